"""KIP-1106 on the real broker: each source starts a partition its group never committed where its own
`AutoOffsetReset` says - earliest, latest, or the first record of the last hour (`by_duration`) - while a
source without a policy keeps `auto.offset.reset` (earliest)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from kappaflow import AutoOffsetReset, Consumed, StreamsBuilder, Topology, serdes
from kappaflow.runner import KafkaStreams
from tests.kafka.streams_support import fast_config, read_topic, wait_for, wait_running

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

S = serdes.String()
HOUR_MS = 3_600_000


def _produce(bootstrap: str, topic: str, value: str, timestamp_ms: int | None = None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, key=b"k", value=value.encode(), timestamp=timestamp_ms or 0)
    assert producer.flush(30) == 0


def _topology(topics: dict[str, str], out: str) -> Topology:
    builder = StreamsBuilder()
    policies: dict[str, AutoOffsetReset | None] = {
        "history": AutoOffsetReset.earliest(),
        "live": AutoOffsetReset.latest(),
        "recent": AutoOffsetReset.by_duration(HOUR_MS),
        "default": None,
    }
    for label, policy in policies.items():
        consumed = Consumed(S, S) if policy is None else Consumed(S, S).with_offset_reset_policy(policy)
        stream = builder.stream(topics[label], consumed=consumed)
        stream.map_values(lambda v, label=label: f"{label}:{v}").to(out, key_serde=S, value_serde=S)
    return builder.build()


def _values(bootstrap: str, out: str) -> set[str]:
    return {m.value().decode() for m in read_topic(bootstrap, out, timeout=3)}


def test_each_source_starts_where_its_policy_says(
    kafka_bootstrap: str, kafka_topics: Any, tmp_path: Path
) -> None:
    topics = {label: kafka_topics(label) for label in ("history", "live", "recent", "default")}
    out = kafka_topics("out")
    now = int(time.time() * 1000)
    for label in ("history", "live", "default"):
        _produce(kafka_bootstrap, topics[label], "before")
    _produce(kafka_bootstrap, topics["recent"], "two-hours-ago", now - 2 * HOUR_MS)
    _produce(kafka_bootstrap, topics["recent"], "ten-minutes-ago", now - 600_000)
    config = fast_config(kafka_bootstrap, f"reset-{out}", str(tmp_path))
    app = KafkaStreams(_topology(topics, out), config)
    app.start()
    try:
        wait_running(app)
        # a latest source sees only what arrives after its position was taken: keep producing until one
        # such record comes through (no sleep to guess when that was), then the old one must be absent
        sent = 0

        def live_arrived() -> bool:
            nonlocal sent
            sent += 1
            _produce(kafka_bootstrap, topics["live"], f"after-{sent}")
            return any(v.startswith("live:after-") for v in _values(kafka_bootstrap, out))

        wait_for(live_arrived, 60, "a record produced after start to come through the latest source")
        values = _values(kafka_bootstrap, out)
    finally:
        app.close()
    assert {"history:before", "default:before", "recent:ten-minutes-ago"} <= values
    assert "live:before" not in values and "recent:two-hours-ago" not in values
    assert {v for v in values if not v.startswith("live:after-")} == {
        "history:before",
        "default:before",
        "recent:ten-minutes-ago",
    }
