"""Where newly assigned input partitions start when their group never committed them (KIP-1106).

The decision is pure (`start_positions`: committed offsets and each source's `AutoOffsetReset` in, a
start position per partition out); `resolve_start_offsets` does the broker I/O around it (the group's
committed offsets, and `offsets_for_times` for `by_duration`). Partitions of topics without a policy are
left to the consumer's `auto.offset.reset`, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

from kappaflow.api.errors import StreamsError
from kappaflow.api.offset_reset import AutoOffsetReset

Partition = tuple[str, int]


@dataclass(frozen=True)
class StartAt:
    """`beginning`, `end`, or the first offset at or after `timestamp_ms`."""

    where: str
    timestamp_ms: int = -1


def start_positions(
    partitions: list[Partition],
    committed: Mapping[Partition, int],
    policies: Mapping[str, AutoOffsetReset],
    now_ms: int,
) -> dict[Partition, StartAt]:
    """The start of each partition that has a policy and no committed offset; `none` without a committed
    offset is an error naming the partitions (Java's NoOffsetForPartitionException)."""
    starts: dict[Partition, StartAt] = {}
    missing: list[Partition] = []
    for topic, partition in partitions:
        policy = policies.get(topic)
        if policy is None or committed.get((topic, partition), -1) >= 0:
            continue
        if policy.kind == "earliest":
            starts[(topic, partition)] = StartAt("beginning")
        elif policy.kind == "latest":
            starts[(topic, partition)] = StartAt("end")
        elif policy.kind == "by_duration":
            assert policy.duration_ms is not None
            starts[(topic, partition)] = StartAt("timestamp", now_ms - policy.duration_ms)
        else:
            missing.append((topic, partition))
    if missing:
        names = ", ".join(f"{t}-{p}" for t, p in sorted(missing))
        raise StreamsError(
            f"no committed offset for {names} and the source's offset reset policy is none "
            "(AutoOffsetReset.none()): commit offsets for the group first, or choose another policy"
        )
    return starts


def resolve_start_offsets(
    consumer: Consumer,
    partitions: list[TopicPartition],
    policies: Mapping[str, AutoOffsetReset],
    now_ms: int,
    timeout_s: float,
) -> None:
    """Set the start offset of each of `partitions` (before they are assigned) that has a reset policy
    and no committed offset."""
    wanted = [tp for tp in partitions if tp.topic in policies]
    if not wanted:
        return
    committed = consumer.committed(
        [TopicPartition(tp.topic, tp.partition) for tp in wanted], timeout=timeout_s
    )
    offsets = {(tp.topic, tp.partition): tp.offset for tp in committed}
    starts = start_positions([(tp.topic, tp.partition) for tp in wanted], offsets, policies, now_ms)
    by_time = [TopicPartition(t, p, s.timestamp_ms) for (t, p), s in starts.items() if s.where == "timestamp"]
    found: dict[Partition, int] = {}
    if by_time:
        for tp in consumer.offsets_for_times(by_time, timeout=timeout_s):
            # -1: no record at or after the time - start at the end, as Java's byDuration does
            found[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else OFFSET_END
    for tp in wanted:
        start = starts.get((tp.topic, tp.partition))
        if start is None:
            continue
        if start.where == "beginning":
            tp.offset = OFFSET_BEGINNING
        elif start.where == "end":
            tp.offset = OFFSET_END
        else:
            tp.offset = found[(tp.topic, tp.partition)]
