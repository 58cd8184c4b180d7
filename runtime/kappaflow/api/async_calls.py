"""The public options of the asynchronous DSL operations (`KStream.map_values_async` and its siblings).

Kafka Streams has no equivalent: its stream thread calls every function inline, so a 50 ms remote call
caps a task at 20 records a second (KIP-408, async processing, was abandoned). These types are what a
user passes; the bookkeeping is `kappaflow.tasks.async_window`, the execution
`kappaflow.tasks.async_executor`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from enum import Enum

from kappaflow.api.processor import to_millis


class Ordering(Enum):
    """Which outputs of an asynchronous operation keep their input order.

    PER_KEY (the default): the calls of one key run one at a time, in offset order, so its outputs
    leave in input order (keys differ: any order). PER_PARTITION: calls run concurrently and outputs
    leave in offset order of the input partition. NONE: outputs leave as calls complete."""

    PER_KEY = "per_key"
    PER_PARTITION = "per_partition"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class AsyncCallOptions:
    """How one asynchronous operation calls its function, validated once when the topology is built.

    `max_in_flight` bounds the records accepted and not yet emitted per task (a task's input pauses at
    it); `timeout_ms` bounds one attempt; a failed or timed-out attempt is retried `retries` times after
    `backoff_ms`, doubled per attempt; then the record goes to the processing exception handler."""

    max_in_flight: int
    ordering: Ordering
    timeout_ms: int
    retries: int
    backoff_ms: int

    @staticmethod
    def of(
        max_in_flight: int,
        ordering: Ordering | str,
        timeout: timedelta | int,
        retries: int,
        backoff: timedelta | int,
    ) -> AsyncCallOptions:
        """The options, or a ValueError naming the argument that is wrong."""
        if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1:
            raise ValueError(f"max_in_flight must be an integer of at least 1, got {max_in_flight!r}")
        if isinstance(ordering, str):
            try:
                ordering = Ordering(ordering)
            except ValueError:
                choices = ", ".join(repr(o.value) for o in Ordering)
                raise ValueError(
                    f"ordering must be an Ordering or one of {choices}, got {ordering!r}"
                ) from None
        if not isinstance(ordering, Ordering):
            raise ValueError(f"ordering must be an Ordering, got {ordering!r}")
        timeout_ms = to_millis(timeout, "timeout")
        if timeout_ms < 1:
            raise ValueError(f"timeout must be at least 1 ms, got {timeout_ms} ms")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be an integer of at least 0, got {retries!r}")
        backoff_ms = to_millis(backoff, "backoff")
        if backoff_ms < 0:
            raise ValueError(f"backoff must not be negative, got {backoff_ms} ms")
        return AsyncCallOptions(max_in_flight, ordering, timeout_ms, retries, backoff_ms)
