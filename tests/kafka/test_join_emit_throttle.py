"""On a real broker, unmatched left/outer stream-stream join results are looked for once per wall-clock
interval, as Kafka Streams' KafkaStreams does (the TopologyTestDriver turns that throttle off).

Java scans its outer-join store for windows that closed at most once per
`__emit.interval.ms.kstreams.outer.join.spurious.results.fix__` (1 s by default): the first record
scans and arms the interval, later ones skip the scan until it passes. Here the interval is a minute,
so after the first record no unmatched result may come out while the matched one still does; the
control run with interval 0 emits every unmatched record as soon as its window closes.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from kappaflow import JoinWindows, StreamsBuilder, serdes
from kappaflow.api.config import EMIT_INTERVAL_OUTER_JOIN
from kappaflow.runner import KafkaStreams
from tests.kafka.streams_support import fast_config, read_topic, wait_for, wait_running

pytestmark = pytest.mark.kafka

S = serdes.String()


def _run(
    bootstrap: str, topics: Any, tmp_path: Path, interval_ms: int, expected: int
) -> list[tuple[str, str]]:
    left, right, out = topics("left"), topics("right"), topics("joined")
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    # an hour ago, to the second: not 0 (librdkafka reads it as "now") and not 1970 (the broker's next
    # retention check, every 5 minutes, would delete the records mid-test)
    base = (int(time.time()) - 3600) * 1000
    for key, ts in (("k1", 0), ("k2", 100), ("k3", 200), ("k4", 300)):
        producer.produce(left, key=key.encode(), value=f"l-{key}".encode(), timestamp=base + ts)
    producer.produce(right, key=b"k4", value=b"r-k4", timestamp=base + 300)
    assert producer.flush(30) == 0
    builder = StreamsBuilder()
    lefts = builder.stream(left, key_serde=S, value_serde=S)
    rights = builder.stream(right, key_serde=S, value_serde=S)
    windows = JoinWindows.of_time_difference_and_grace(10, 0)
    lefts.left_join(rights, lambda a, b: f"{a}+{b}", windows).to(out, key_serde=S, value_serde=S)
    config = fast_config(
        bootstrap,
        f"throttle-{uuid.uuid4().hex[:6]}",
        str(tmp_path),
        **{EMIT_INTERVAL_OUTER_JOIN: interval_ms},
    )
    app = KafkaStreams(builder.build(), config)
    app.start()
    try:
        wait_running(app)
        wait_for(lambda: app.metrics.counter("records-processed-total") >= 5, 60, "5 records processed")
        records = read_topic(bootstrap, out, expected=expected, timeout=15)
    finally:
        app.close(30)
    return [(r.key().decode(), r.value().decode()) for r in records]


def test_unmatched_join_results_wait_for_the_wall_clock_interval(
    kafka_bootstrap: str, kafka_topics: Any, tmp_path: Path
) -> None:
    joined = _run(kafka_bootstrap, kafka_topics, tmp_path, interval_ms=60_000, expected=1)
    assert joined == [("k4", "l-k4+r-k4")]


def test_without_the_throttle_closed_windows_emit_at_once(
    kafka_bootstrap: str, kafka_topics: Any, tmp_path: Path
) -> None:
    """The control: interval 0 (the test driver's setting) emits k1..k3 unmatched as their windows close."""
    joined = _run(kafka_bootstrap, kafka_topics, tmp_path, interval_ms=0, expected=4)
    assert sorted(joined) == [
        ("k1", "l-k1+None"),
        ("k2", "l-k2+None"),
        ("k3", "l-k3+None"),
        ("k4", "l-k4+r-k4"),
    ]
