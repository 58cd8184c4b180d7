"""Retrying calls to a broker that is briefly unreachable, up to `default.api.timeout.ms`.

A broker restart or a short network partition must not crash an instance (and, in a pod, start a crash
loop): like Kafka Streams, calls that fail with a retriable or connectivity error are tried again until
the API timeout, then fail with a message that says what was being attempted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

from kappaflow.api.errors import StreamsError

log = logging.getLogger(__name__)
T = TypeVar("T")

_UNREACHABLE = {
    KafkaError._TRANSPORT,
    KafkaError._TIMED_OUT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._WAIT_COORD,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    # a partition's leadership moving, as after a broker restart
    KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.OFFSET_NOT_AVAILABLE,
    KafkaError.BROKER_NOT_AVAILABLE,
    KafkaError.NETWORK_EXCEPTION,
}


def is_unreachable(exc: BaseException) -> bool:
    """True for errors that mean "the broker cannot be reached or is moving", worth retrying."""
    if not isinstance(exc, KafkaException) or not exc.args or not isinstance(exc.args[0], KafkaError):
        return False
    err: KafkaError = exc.args[0]
    return not err.fatal() and (bool(err.retriable()) or err.code() in _UNREACHABLE)


def retry_unreachable(
    what: str,
    call: Callable[[], T],
    timeout_s: float,
    retriable: Callable[[BaseException], bool] = is_unreachable,
    backoff_s: float = 0.5,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """`call()`, retried with backoff while it fails with an error `retriable` accepts, for up to
    `timeout_s`; then a StreamsError naming `what` and the last error."""
    deadline = clock() + timeout_s
    attempt = 0
    while True:
        try:
            return call()
        except Exception as exc:
            if not retriable(exc):
                raise
            attempt += 1
            if clock() + backoff_s > deadline:
                raise StreamsError(f"{what}: broker unreachable for {timeout_s:.0f}s: {exc}") from exc
            if attempt == 1 or attempt % 10 == 0:
                log.warning("%s: %s; retrying for up to %.0fs", what, exc, timeout_s)
            sleep(backoff_s)
            backoff_s = min(backoff_s * 2, 5.0)
