"""Retrying calls to a broker that is briefly unreachable, up to `default.api.timeout.ms`.

A broker restart or a short network partition must not crash an instance (and, in a pod, start a crash
loop): like Kafka Streams, calls that fail with a retriable or connectivity error are tried again until
the API timeout, then fail with a message that says what was being attempted. A stop asked for meanwhile
(SIGTERM) ends the waiting at once: a process told to stop must not sit out the timeout first.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

from kappaflow.api.errors import StreamsError

log = logging.getLogger(__name__)
T = TypeVar("T")

# Errors that retrying cannot cure: refused by authorization or configuration, or a client that is done.
_PERMANENT = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError._AUTHENTICATION,
    KafkaError._INVALID_ARG,
    KafkaError.INVALID_REQUEST,
    KafkaError.INVALID_CONFIG,
    KafkaError.POLICY_VIOLATION,
    KafkaError.UNSUPPORTED_VERSION,
    KafkaError._UNSUPPORTED_FEATURE,
    KafkaError._FATAL,
    KafkaError._FENCED,
    KafkaError.PRODUCER_FENCED,
    KafkaError.INVALID_PRODUCER_EPOCH,
}


class StoppedWhileWaitingError(StreamsError):
    """The instance was told to stop while it retried a broker it could not reach."""


def is_unreachable(exc: BaseException) -> bool:
    """True for a client error worth retrying: the broker cannot be reached, or its partitions' leaders
    are moving (a broker restart shows as transport errors, leader-epoch errors, `No leaders found`...).
    Authorization, configuration and fatal errors are not: no retry cures them."""
    if not isinstance(exc, KafkaException) or not exc.args or not isinstance(exc.args[0], KafkaError):
        return False
    err: KafkaError = exc.args[0]
    return not err.fatal() and err.code() not in _PERMANENT


def retry_unreachable(
    what: str,
    call: Callable[[], T],
    timeout_s: float,
    retriable: Callable[[BaseException], bool] = is_unreachable,
    backoff_s: float = 0.5,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    stop: threading.Event | None = None,
) -> T:
    """`call()`, retried with backoff while it fails with an error `retriable` accepts, for up to
    `timeout_s`; then a StreamsError naming `what` and the last error. With `stop`, its setting ends the
    retries (StoppedWhileWaitingError) instead of the next attempt."""
    deadline = clock() + timeout_s
    attempt = 0
    while True:
        try:
            return call()
        except Exception as exc:
            if not retriable(exc):
                raise
            attempt += 1
            if stop is not None and stop.is_set():
                raise StoppedWhileWaitingError(f"{what}: stopped while retrying: {exc}") from exc
            if clock() + backoff_s > deadline:
                raise StreamsError(f"{what}: broker unreachable for {timeout_s:.0f}s: {exc}") from exc
            if attempt == 1 or attempt % 10 == 0:
                log.warning("%s: %s; retrying for up to %.0fs", what, exc, timeout_s)
            if stop is not None:
                stop.wait(backoff_s)
            else:
                sleep(backoff_s)
            backoff_s = min(backoff_s * 2, 5.0)
