"""Timestamp extractors: how a consumed record's event time is decided.

The default fails on a negative timestamp, as Kafka Streams' `FailOnInvalidTimestamp` does, because a
record without a valid event time would silently corrupt windowing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kappaflow.api.errors import StreamsError
from kappaflow.api.record import Headers


@dataclass(slots=True)
class ConsumedRecord:
    """A deserialized record as read from a topic, before it enters the topology."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: Any
    value: Any
    headers: Headers = field(default_factory=Headers)


class TimestampExtractor(Protocol):
    def __call__(self, record: ConsumedRecord, partition_time: int) -> int: ...


class InvalidTimestampError(StreamsError):
    pass


def record_timestamp(record: ConsumedRecord, partition_time: int) -> int:
    """The record's own timestamp (producer or broker time); negative timestamps fail the task."""
    if record.timestamp < 0:
        raise InvalidTimestampError(
            f"record {record.topic}-{record.partition}@{record.offset} has invalid timestamp "
            f"{record.timestamp}; use another timestamp extractor"
        )
    return record.timestamp


def wall_clock_timestamp(record: ConsumedRecord, partition_time: int) -> int:
    """Processing time: the system clock when the record is processed."""
    return int(time.time() * 1000)


def log_and_skip_on_invalid_timestamp(record: ConsumedRecord, partition_time: int) -> int:
    """Return the record's timestamp; a negative one makes the task drop the record (with a metric)."""
    return record.timestamp


def use_partition_time_on_invalid_timestamp(record: ConsumedRecord, partition_time: int) -> int:
    """Fall back to the partition's current stream time for records without a valid timestamp."""
    return record.timestamp if record.timestamp >= 0 else max(partition_time, 0)


FailOnInvalidTimestamp: Callable[[ConsumedRecord, int], int] = record_timestamp
WallclockTimestampExtractor: Callable[[ConsumedRecord, int], int] = wall_clock_timestamp
