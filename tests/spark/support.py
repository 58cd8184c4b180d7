"""Helpers for Spark reprocessing tests: exact log reads, a streaming run to compare against."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from kappaflow.runner import KafkaStreams, State
from tests.kafka.streams_support import fast_config

Rec = tuple[bytes | None, bytes | None, int]  # key, value, timestamp

# Test data is timestamped an hour ago: old enough to lie in closed windows, young enough that no
# topic's retention (windowed changelogs are compact,delete) removes it while a test reads it.
BASE_TS = (int(time.time()) - 3600) * 1000


def produce_records(bootstrap: str, topic: str, records: Iterable[Rec]) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 5})
    count = 0
    for key, value, timestamp in records:
        producer.produce(topic, key=key, value=value, timestamp=timestamp)
        count += 1
        if count % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    return count


def _consumer(bootstrap: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"spark-test-reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )


def watermarks(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    consumer = _consumer(bootstrap)
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in parts}
    finally:
        consumer.close()


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    return {p: high for p, (_low, high) in watermarks(bootstrap, topic).items()}


def read_all(bootstrap: str, topic: str, timeout: float = 30.0) -> list[Any]:
    """Every record of `topic` up to its current end (exact: stops at the watermarks, no idle wait)."""
    marks = watermarks(bootstrap, topic)
    ends = {p: high for p, (_low, high) in marks.items()}
    pending = {p for p, (low, high) in marks.items() if high > low}
    consumer = _consumer(bootstrap)
    records: list[Any] = []
    try:
        consumer.assign([TopicPartition(topic, p, marks[p][0]) for p in pending])
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is not None:
                    continue
                records.append(msg)
                if msg.offset() + 1 >= ends[msg.partition()]:
                    pending.discard(msg.partition())
        assert not pending, f"{topic}: partitions {pending} not read to their end"
    finally:
        consumer.close()
    return records


def latest_per_key(records: Iterable[Any]) -> dict[bytes, bytes]:
    """What compaction keeps: the last value per key, keys whose last record is a tombstone dropped."""
    result: dict[bytes, bytes | None] = {}
    for msg in records:
        result[msg.key()] = msg.value()
    return {k: v for k, v in result.items() if v is not None}


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        found = consumer.committed([TopicPartition(topic, p) for p in parts], timeout=10)
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()


def wait_caught_up(bootstrap: str, group: str, topics: Sequence[str], timeout: float = 90.0) -> None:
    """Block until the group has committed the end of every partition of `topics` (all input processed)."""
    deadline = time.monotonic() + timeout
    while True:
        lagging = []
        for topic in topics:
            ends, done = end_offsets(bootstrap, topic), committed(bootstrap, group, topic)
            lagging += [f"{topic}-{p}" for p, end in ends.items() if end > 0 and done.get(p, -1) < end]
        if not lagging:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"group {group} did not catch up on {lagging}")
        time.sleep(0.3)


def run_streaming(
    bootstrap: str,
    topology: Any,
    app_id: str,
    state_dir: str,
    phases: Sequence[Callable[[], None]],
) -> None:
    """The reference: run the Kafka runtime, feeding it phase by phase and waiting until each is done."""
    app = KafkaStreams(topology, fast_config(bootstrap, app_id, state_dir))
    sources = sorted(
        {t for s in topology.sub_topologies() for t in s.source_topics} - set(topology.internal_topics)
    )
    repartition = [t for t, spec in topology.internal_topics.items() if spec.kind == "repartition"]
    watched = sources + [f"{app_id}-{t}" for t in repartition]
    app.start()
    try:
        assert app.wait_until(State.RUNNING, 60), f"runtime did not start: {app.error}"
        for phase in phases:
            phase()
            wait_caught_up(bootstrap, app_id, watched)
    finally:
        assert app.close(30)
