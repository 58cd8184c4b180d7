"""The asynchronous DSL operations on the real broker, in-process KafkaStreams: every input's output once,
per key in input order, under at_least_once and exactly_once_v2; the input paused at max_in_flight; a
second instance joining (a rebalance with calls in flight) and a clean close."""

from __future__ import annotations

import asyncio
import random
import threading
import uuid
from collections import defaultdict
from typing import Any

import pytest

from kappaflow import StreamsBuilder, serdes
from kappaflow.runner import KafkaStreams
from tests.kafka.streams_support import fast_config, produce, read_topic, wait_for, wait_running

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

S = serdes.String()
KEYS = 64


def slow_echo_topology(
    source: str, sink: str, max_in_flight: int, gate: threading.Event | None = None
) -> Any:
    """Echoes with a random delay; while `gate` is given and not set, every call waits for it."""
    rng = random.Random(7)

    async def echo(value: str) -> str:
        while gate is not None and not gate.is_set():
            await asyncio.sleep(0.01)
        await asyncio.sleep(rng.uniform(0.005, 0.03))  # out of order across keys
        return f"{value}!"

    builder = StreamsBuilder()
    stream = builder.stream(source, key_serde=S, value_serde=S)
    stream.map_values_async(echo, max_in_flight=max_in_flight).to(sink, key_serde=S, value_serde=S)
    return builder.build()


def inputs(n: int) -> list[tuple[bytes, bytes]]:
    return [(f"k{i % KEYS}".encode(), f"{i}".encode()) for i in range(n)]


def assert_once_in_key_order(records: list[Any], n: int) -> None:
    per_key: dict[str, list[int]] = defaultdict(list)
    for m in records:
        value = m.value().decode()
        assert value.endswith("!"), value
        per_key[m.key().decode()].append(int(value[:-1]))
    seen = sorted(v for values in per_key.values() for v in values)
    assert seen == list(range(n)), f"lost or duplicated: {len(seen)} outputs for {n} inputs"
    for key, values in per_key.items():
        assert values == sorted(values), f"key {key} out of order: {values[:20]}"


def test_at_least_once_every_output_once_in_key_order_and_input_paused_at_max_in_flight(
    kafka_bootstrap, kafka_topics, tmp_path
):
    """at_least_once (exactly_once_v2: the rebalance test below and the async kill loop of
    tests/kafka/test_chaos.py, within the CI time budget)."""
    source, sink = kafka_topics("async-in", partitions=2), kafka_topics("async-out", partitions=2)
    n = 4000  # all there at start: more than a batch queues behind each full task, which pauses it
    produce(kafka_bootstrap, source, inputs(n))
    config = fast_config(
        kafka_bootstrap,
        f"async-{uuid.uuid4().hex[:8]}",
        str(tmp_path),
        **{"processing.guarantee": "at_least_once"},
    )
    gate = threading.Event()  # calls wait until the input paused: no race with the fetch
    app = KafkaStreams(slow_echo_topology(source, sink, max_in_flight=32, gate=gate), config)

    def pauses() -> float:
        return sum(app.metrics.counters().get("async-backpressure-pauses-total", {}).values())

    app.start()
    try:
        wait_running(app)
        wait_for(lambda: pauses() >= 2, 30, "both tasks paused at max_in_flight with a batch queued")
        gate.set()
        records = read_topic(kafka_bootstrap, sink, expected=n, timeout=60, committed_only=True)
        assert_once_in_key_order(records, n)
    finally:
        assert app.close(30)


def test_a_rebalance_with_calls_in_flight_emits_nothing_late_or_twice(
    kafka_bootstrap, kafka_topics, tmp_path
):
    """Exactly-once across a second instance joining while calls run: the revoked tasks' calls are
    cancelled (their offsets were never committed past them) and redone by the new owner."""
    source, sink = kafka_topics("async-rb-in", partitions=4), kafka_topics("async-rb-out", partitions=4)
    app_id = f"async-rb-{uuid.uuid4().hex[:8]}"
    topology = slow_echo_topology(source, sink, max_in_flight=32)
    first = KafkaStreams(topology, fast_config(kafka_bootstrap, app_id, str(tmp_path / "1"),
                                               **{"processing.guarantee": "exactly_once_v2"}))  # fmt: skip
    second = KafkaStreams(topology, fast_config(kafka_bootstrap, app_id, str(tmp_path / "2"),
                                                **{"processing.guarantee": "exactly_once_v2"}))  # fmt: skip
    n = 1500
    first.start()
    try:
        wait_running(first)
        produce(kafka_bootstrap, source, inputs(n // 2))
        wait_for(lambda: len(read_topic(kafka_bootstrap, sink, timeout=1, committed_only=True)) > 50,
                 30, "some output")  # fmt: skip
        second.start()  # joins while the first has calls in flight
        produce(kafka_bootstrap, source, [(k, v) for k, v in inputs(n)[n // 2 :]])
        wait_running(first, second)
        records = read_topic(kafka_bootstrap, sink, expected=n, timeout=60, committed_only=True)
        assert_once_in_key_order(records, n)
        rebalances = first.metrics.counter("rebalances-total")
        assert rebalances >= 2, "the second instance's join rebalanced the first"
    finally:
        second.close(30)
        first.close(30)


def test_exactly_once_commits_nothing_while_a_call_is_in_flight(kafka_bootstrap, kafka_topics, tmp_path):
    """exactly_once_v2: a commit first waits for the calls in flight (StreamThread._complete_async_calls).
    Holding the offsets back at the oldest call instead would commit what ran before the asynchronous
    node for that record - here a sink - without its result, and a crash would replay the record and
    write that sink twice. Deterministic: the one call is held open across many commit intervals; nothing
    of its transaction may be visible to read_committed until it ends, then both sinks hold it once."""
    source = kafka_topics("async-eos-in", partitions=1)
    before, after = (
        kafka_topics("async-eos-before", partitions=1),
        kafka_topics("async-eos-after", partitions=1),
    )
    gate, started = threading.Event(), threading.Event()

    async def held(value: str) -> str:
        started.set()
        while not gate.is_set():
            await asyncio.sleep(0.01)
        return f"{value}!"

    builder = StreamsBuilder()
    stream = builder.stream(source, key_serde=S, value_serde=S)
    stream.to(before, key_serde=S, value_serde=S)
    stream.map_values_async(held, max_in_flight=4).to(after, key_serde=S, value_serde=S)
    config = fast_config(
        kafka_bootstrap,
        f"async-eos-{uuid.uuid4().hex[:8]}",
        str(tmp_path),
        **{"processing.guarantee": "exactly_once_v2", "commit.interval.ms": 100},
    )
    app = KafkaStreams(builder.build(), config)
    app.start()
    try:
        wait_running(app)
        produce(kafka_bootstrap, source, [(b"k", b"v")])
        assert started.wait(30), "the call started"
        # twenty commit intervals with the call open: a commit now would make `before` visible
        assert read_topic(kafka_bootstrap, before, timeout=2, committed_only=True) == []
        assert read_topic(kafka_bootstrap, after, timeout=0.5, committed_only=True) == []
        gate.set()
        (out,) = read_topic(kafka_bootstrap, after, expected=1, timeout=30, committed_only=True)
        assert out.value() == b"v!"
        assert [m.value() for m in read_topic(kafka_bootstrap, before, timeout=2, committed_only=True)] == [
            b"v"
        ]
    finally:
        assert app.close(30)
