"""KIP-1106 on the real broker: each source starts a partition its group never committed where its own
`AutoOffsetReset` says - earliest, latest, or the first record of the last hour (`by_duration`) - while a
source without a policy keeps `auto.offset.reset` (earliest)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from kappaflow import AutoOffsetReset, Consumed, StreamsBuilder, Topology, serdes
from kappaflow.runner import KafkaStreams
from tests.kafka.streams_support import fast_config, wait_for, wait_running

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

S = serdes.String()
HOUR_MS = 3_600_000


def _produce(bootstrap: str, topic: str, value: str, timestamp_ms: int | None = None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, key=b"k", value=value.encode(), timestamp=timestamp_ms or 0)
    assert producer.flush(30) == 0


def _labelled(label: str) -> Callable[[str], str]:
    return lambda value: f"{label}:{value}"


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
        stream.map_values(_labelled(label)).to(out, key_serde=S, value_serde=S)
    return builder.build()


class _Output:
    """Reads the output topic as it grows (one consumer for the whole test, no re-reading)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        group = f"reader-{uuid.uuid4().hex[:8]}"
        self.consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"}
        )
        self.consumer.subscribe([topic])
        self.values: set[str] = set()

    def poll(self) -> set[str]:
        for message in self.consumer.consume(100, 0.5):
            value = message.value()
            if message.error() is None and value is not None:
                self.values.add(value.decode())
        return self.values


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
        output = _Output(kafka_bootstrap, out)

        def all_arrived() -> bool:
            nonlocal sent
            sent += 1
            _produce(kafka_bootstrap, topics["live"], f"after-{sent}")
            values = output.poll()
            expected = {"history:before", "default:before", "recent:ten-minutes-ago"}
            return expected <= values and any(v.startswith("live:after-") for v in values)

        wait_for(all_arrived, 60, "the old records and one produced after start to come through")
        values = set(output.poll())
        output.consumer.close()
    finally:
        app.close()
    assert {"history:before", "default:before", "recent:ten-minutes-ago"} <= values
    assert "live:before" not in values and "recent:two-hours-ago" not in values
    assert {v for v in values if not v.startswith("live:after-")} == {
        "history:before",
        "default:before",
        "recent:ten-minutes-ago",
    }
