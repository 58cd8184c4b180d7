"""The stream thread's input fetches taken from librdkafka by the native core (`InputQueues`,
runtime/native/src/input_queue.rs) against confluent-kafka's `consume()`, on a real broker.

Record for record, a group consumer whose partitions are opened in its rebalance callback reads what
`consume()` + `raw_records_by_partition` read: headers (with a NULL value), NULL and empty keys and
values, a large value, transactions with an aborted one under read_committed and read_uncommitted; a
paused partition yields nothing until resumed, and a seek drops what was fetched before it (outdated op
versions), as for `consume()`. A whole application (a count, exactly_once_v2 and at_least_once) gives
the same output both ways, with a proxy proving the native reader carried its input."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from kappaflow import StreamsBuilder, serdes
from kappaflow.runner import KafkaStreams, native_input, thread
from kappaflow.runner.routing import raw_records_by_partition
from tests.kafka.streams_support import fast_config, wait_running
from tests.native_support import require_native_core

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

PARTITIONS = 2
BULK = 1500


def _topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [NewTopic(name, num_partitions=PARTITIONS, replication_factor=1)]
    ).values():
        future.result(30)


def _fill(bootstrap: str, topic: str) -> int:
    """Edge cases, a committed, an aborted and a committed transaction, then bulk, per partition;
    returns the records per partition a read_committed reader sees."""
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"fill-{uuid.uuid4().hex[:8]}"})
    txn.init_transactions(30)
    for p in range(PARTITIONS):
        plain.produce(topic, key=b"h", value=b"v", partition=p, timestamp=7,
                      headers=[("a", b"1"), ("empty", b""), ("none", None), ("a", b"2")])  # fmt: skip
        for key, value in ((None, b"no-key"), (b"k", None), (b"", b""), (b"big", b"x" * 70000)):
            plain.produce(topic, key=key, value=value, partition=p)
        plain.flush(30)
        for commit in (True, False, True):
            txn.begin_transaction()
            txn.produce(topic, key=b"t", value=b"committed" if commit else b"ABORTED", partition=p)
            txn.flush(30)
            (txn.commit_transaction if commit else txn.abort_transaction)(30)
        for i in range(BULK):
            plain.produce(topic, key=b"b%05d" % i, value=b"%d" % i, partition=p, timestamp=1000 + i)
        plain.flush(30)
    return 5 + 2 + BULK


def _consumer(bootstrap: str, isolation: str) -> Consumer:
    return Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"niq-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False, "auto.offset.reset": "earliest", "isolation.level": isolation,
        "enable.partition.eof": True,
    })  # fmt: skip


def _read(consumer: Consumer, topic: str, queues: Any, until: Callable[[dict[int, list[Any]]], bool]) -> Any:
    """Subscribe (opening each partition in the assignment callback when `queues` is given) and read
    record tuples per partition until `until` holds; returns (records, consume()'s leftovers,
    librdkafka's position per partition: what lag, hanging-transaction checks and commits start from)."""
    got: dict[int, list[Any]] = {p: [] for p in range(PARTITIONS)}

    def on_assign(c: Consumer, partitions: list[TopicPartition]) -> None:
        if queues is not None:
            assert all(queues.open(tp.topic, tp.partition) for tp in partitions)
        c.assign(partitions)

    consumer.subscribe([topic], on_assign=on_assign)
    deadline = time.monotonic() + 120
    leftovers = 0
    while not until(got) and time.monotonic() < deadline:
        messages = [
            m for m in consumer.consume(1000, 0.0 if queues is not None else 0.5) if m.error() is None
        ]
        leftovers += len(messages)
        for (_t, p), records in raw_records_by_partition(messages):
            got[p].extend(records)
        if queues is not None:
            runs, errors = queues.consume(1000, 0.5)
            assert all(code == -191 for code, _reason in errors)  # partition EOF only
            for (t, p), records in runs:
                assert t == topic
                got[p].extend(records)
    positions = consumer.position([TopicPartition(topic, p) for p in range(PARTITIONS)])
    return got, leftovers, {tp.partition: tp.offset for tp in positions}


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_input_queues_read_what_consume_reads(kafka_bootstrap: str, isolation: str) -> None:
    core = require_native_core()
    topic = f"niq-{uuid.uuid4().hex[:8]}"
    _topic(kafka_bootstrap, topic)
    per_partition = _fill(kafka_bootstrap, topic) + (1 if isolation == "read_uncommitted" else 0)

    def complete(got: dict[int, list[Any]]) -> bool:
        return all(len(r) >= per_partition for r in got.values())

    consumer = _consumer(kafka_bootstrap, isolation)
    try:
        by_consume, _, consume_positions = _read(consumer, topic, None, complete)
    finally:
        consumer.close()
    consumer = _consumer(kafka_bootstrap, isolation)
    queues = native_input.input_queues(core, consumer)
    assert queues is not None
    try:
        by_core, leftovers, core_positions = _read(consumer, topic, queues, complete)
    finally:
        queues.close()
        consumer.close()
    assert leftovers == 0  # every record came through the core's queue
    assert all(len(r) == per_partition for r in by_consume.values())
    assert by_core == by_consume
    assert core_positions == consume_positions
    assert all(offset > by_core[p][-1][0] for p, offset in core_positions.items())
    first = by_core[0][0]
    assert (
        first[1] == 7
        and first[2] == b"h"
        and list(first[4]) == [("a", b"1"), ("empty", b""), ("none", None), ("a", b"2")]
    )
    assert type(first[4]) is type(by_consume[0][1][4])  # Headers, empty or not
    assert [r[3] for r in by_core[0] if r[2] == b"t"] == (
        [b"committed", b"committed"]
        if isolation == "read_committed"
        else [b"committed", b"ABORTED", b"committed"]
    )


def test_paused_and_seeked_partitions_as_consume(kafka_bootstrap: str) -> None:
    """Paused: nothing of the partition comes; a seek back while paused drops what was fetched before
    it; resumed, the partition is read from the seeked offset, record for record."""
    core = require_native_core()
    topic = f"niq-{uuid.uuid4().hex[:8]}"
    _topic(kafka_bootstrap, topic)
    per_partition = _fill(kafka_bootstrap, topic)
    consumer = _consumer(kafka_bootstrap, "read_committed")
    queues = native_input.input_queues(core, consumer)
    assert queues is not None
    try:
        got, _, _ = _read(consumer, topic, queues, lambda g: len(g[0]) >= 100)
        tp0 = TopicPartition(topic, 0)
        consumer.pause([tp0])
        consumer.seek(TopicPartition(topic, 0, 0))
        for _ in range(5):  # whatever was fetched before the pause is outdated now
            assert consumer.consume(1000, 0.0) == []
            runs, _errors = queues.consume(1000, 0.2)
            assert all(p != 0 for (_t, p), _r in runs)
        consumer.resume([tp0])
        again: list[Any] = []
        deadline = time.monotonic() + 60
        while len(again) < per_partition and time.monotonic() < deadline:
            consumer.consume(1000, 0.0)
            runs, _errors = queues.consume(1000, 0.5)
            again.extend(r for (_t, p), records in runs if p == 0 for r in records)
        assert len(again) == per_partition and again[: len(got[0])] == got[0]
        assert [r[0] for r in again] == sorted(r[0] for r in again)  # in order, no duplicates
    finally:
        queues.close()
        consumer.close()


class CountingInputs:
    """The core's reader, counting the records its runs carried."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.records = 0

    def open(self, topic: str, partition: int) -> bool:
        return bool(self.inner.open(topic, partition))

    def consume(self, max_records: int, timeout: float) -> Any:
        runs, errors = self.inner.consume(max_records, timeout)
        self.records += sum(len(records) for _tp, records in runs)
        return runs, errors

    def close(self) -> None:
        self.inner.close()


def bulk_count_topology(source: str, sink: str) -> Any:
    """A count of the bulk records' keys (`b0...`) of `source` into `sink`, grouped without a
    repartition (each partition counts its own copy of a key)."""
    builder = StreamsBuilder()
    (
        builder.stream(source, key_serde=serdes.Bytes(), value_serde=serdes.Bytes())
        .filter(lambda k, _v: k is not None and k.startswith(b"b0"))
        .group_by_key()
        .count()
        .to_stream()
        .to(sink, key_serde=serdes.Bytes(), value_serde=serdes.Long())
    )
    return builder.build()


def _count(bootstrap: str, app_id: str, source: str, state: Path, guarantee: str, native: bool,
           monkeypatch: Any) -> tuple[dict[bytes, bytes], int]:  # fmt: skip
    """Run a count over `source` until its output is complete; (last count per key, records carried)."""
    made: list[CountingInputs] = []

    def counting(core: Any, consumer: Any) -> Any:
        found = native_input.input_queues(core, consumer)
        if found is None:
            return None
        made.append(CountingInputs(found))
        return made[-1]

    monkeypatch.setattr(thread, "input_queues", counting)
    config = fast_config(bootstrap, app_id, str(state), **{
        "processing.guarantee": guarantee, "kappaflow.native.consume.enabled": native, "metrics.port": -1,
    })  # fmt: skip
    app = KafkaStreams(bulk_count_topology(source, f"{app_id}-out"), config)
    app.start()
    out = _consumer(bootstrap, "read_committed")
    last: dict[bytes, bytes] = {}
    try:
        wait_running(app, timeout=120)
        out.assign([TopicPartition(f"{app_id}-out", p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 120
        while len(last) < BULK and time.monotonic() < deadline:
            for m in out.consume(1000, 0.5):
                if m.error() is None:
                    last[m.key()] = m.value()
    finally:
        out.close()
        assert app.close(30)
    return last, sum(q.records for q in made)


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_an_application_counts_the_same_both_ways(
    kafka_bootstrap: str, tmp_path: Path, guarantee: str, monkeypatch: Any
) -> None:
    require_native_core()
    source = f"niq-{uuid.uuid4().hex[:8]}"
    _topic(kafka_bootstrap, source)
    per_partition = _fill(kafka_bootstrap, source)
    results = {}
    for native in (True, False):
        app_id = f"{source}-{'n' if native else 'p'}"
        _topic(kafka_bootstrap, f"{app_id}-out")
        results[native] = _count(kafka_bootstrap, app_id, source, tmp_path / str(native), guarantee, native,
                                 monkeypatch)  # fmt: skip
    (native_counts, carried), (python_counts, none) = results[True], results[False]
    assert carried >= PARTITIONS * per_partition and none == 0
    assert len(native_counts) == BULK and native_counts == python_counts
    # grouped by key without a repartition: each partition counts its own copy of a key once
    assert set(native_counts.values()) == {(1).to_bytes(8, "big")}
