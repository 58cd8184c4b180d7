"""The restore consumer's fetches taken from librdkafka by the native core (`RestoreQueues`,
runtime/native/src/restore_queue.rs) against confluent-kafka's `consume()`, on a real broker.

The same changelog restored both ways must give byte-identical stores: tombstones (of live and
missing keys), an empty key, an empty value, a large value, several partitions, and transactions, one
of them aborted, read read_committed (exactly_once_v2: the aborted records and the markers never
reach the store) and read_uncommitted (at_least_once: they do, on both paths alike). A proxy around
the core's reader proves the native run actually carried the records (the fallback would pass the
comparison trivially)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from kappaflow import Materialized, StreamsBuilder, serdes
from kappaflow.runner import KafkaStreams, assembly, native_restore
from tests.kafka.streams_support import fast_config, wait_running
from tests.native_support import require_native_core
from tests.runtime.test_bulk_restore import open_rocksdb

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

STORE = "store"
PARTITIONS = 2
BULK = 2500  # plain records per partition after the edge cases: several 10k-record steps' worth overall


def _create(bootstrap: str, app_id: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [
        NewTopic(f"{app_id}-source", num_partitions=PARTITIONS, replication_factor=1),
        NewTopic(
            f"{app_id}-{STORE}-changelog",
            num_partitions=PARTITIONS,
            replication_factor=1,
            # not compacted: the log cleaner would drop superseded records between the two restores
            config={"cleanup.policy": "delete", "retention.ms": "-1"},
        ),
    ]
    for future in admin.create_topics(topics).values():
        future.result(30)


def _fill(bootstrap: str, changelog: str) -> None:
    """Per partition: edge cases, a committed, an aborted and a committed transaction, then bulk."""
    failed: list[Any] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err)

    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "on_delivery": report})
    plain.list_topics(changelog, timeout=10)
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"fill-{uuid.uuid4().hex[:8]}"})
    txn.init_transactions(30)
    for p in range(PARTITIONS):
        edge: list[tuple[bytes | None, bytes | None]] = [
            (b"k1", b"v1"), (b"k2", b""), (b"", b"empty-key"), (b"k3", b"v3"), (b"k3", None),
            (b"missing", None), (b"k4", b"x" * 70000),
        ]  # fmt: skip
        for i, (key, value) in enumerate(edge):
            plain.produce(changelog, key=key, value=value, partition=p, timestamp=1000 + i)
        plain.flush(30)
        for commit, records in (
            (True, [(b"t1", b"committed"), (b"k1", b"v1-by-txn")]),
            (False, [(b"k1", b"ABORTED"), (b"t2", b"ABORTED")]),
            (True, [(b"t3", b"committed"), (b"k2", None)]),
        ):
            txn.begin_transaction()
            for key, value in records:
                txn.produce(changelog, key=key, value=value, partition=p, timestamp=5000)
            txn.flush(30)
            if commit:
                txn.commit_transaction(30)
            else:
                txn.abort_transaction(30)
        for i in range(BULK):
            plain.produce(changelog, key=b"b%05d" % i, value=b"%d-%d" % (p, i), partition=p, timestamp=i)
        plain.flush(30)
    assert failed == [], failed[:2]


class CountingQueues:
    """The core's reader, counting the records its runs carried."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.records = 0

    def open(self, topic: str, partition: int) -> bool:
        return bool(self.inner.open(topic, partition))

    def consume(self, max_records: int, timeout: float) -> Any:
        runs, ends, errors = self.inner.consume(max_records, timeout)
        self.records += sum(len(run) for _tp, run in runs)
        return runs, ends, errors

    def write(self, batch: Any, run: Any, timestamped: bool) -> None:
        self.inner.write(batch, run, timestamped)

    def close(self) -> None:
        self.inner.close()


def _restore(bootstrap: str, app_id: str, state: Path, guarantee: str, native: bool, monkeypatch: Any) -> Any:
    """Restore the changelog into an empty `state`; return (store contents per task, records the
    native reader carried, records restored)."""
    made: list[CountingQueues] = []

    def counting(core: Any, consumer: Any) -> Any:
        found = native_restore.restore_queues(core, consumer)
        if found is None:
            return None
        made.append(CountingQueues(found))
        return made[-1]

    monkeypatch.setattr(assembly, "restore_queues", counting)
    builder = StreamsBuilder()
    builder.table(
        f"{app_id}-source", key_serde=serdes.Bytes(), value_serde=serdes.Bytes(),
        materialized=Materialized.as_(STORE),
    )  # fmt: skip
    config = fast_config(
        bootstrap, app_id, str(state), **{"processing.guarantee": guarantee,
        "kappaflow.native.restore.enabled": native, "metrics.port": -1},
    )  # fmt: skip
    app = KafkaStreams(builder.build(), config)
    app.start()
    try:
        wait_running(app, timeout=120)
        restored = app.metrics.counter("restored-records-total")
    finally:
        assert app.close(30)
    contents = {}
    for db in sorted(state.rglob(f"rocksdb/{STORE}")):
        store = open_rocksdb(db.parent.parent, STORE, timestamped=True)
        try:
            contents[db.parent.parent.name] = list(store.all())
        finally:
            store.close()
    return contents, sum(q.records for q in made), restored, len(made)


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_native_fetches_restore_the_stores_consume_restores(
    kafka_bootstrap: str, tmp_path: Path, guarantee: str, monkeypatch: Any
) -> None:
    require_native_core()
    app_id = f"nrq-{uuid.uuid4().hex[:8]}"
    _create(kafka_bootstrap, app_id)
    _fill(kafka_bootstrap, f"{app_id}-{STORE}-changelog")

    native, carried, native_restored, readers = _restore(
        kafka_bootstrap, app_id, tmp_path / "native", guarantee, True, monkeypatch
    )
    python, none, python_restored, no_readers = _restore(
        kafka_bootstrap, app_id, tmp_path / "python", guarantee, False, monkeypatch
    )
    assert readers == 1 and no_readers == 0
    expected = PARTITIONS * (7 + 2 + 2 + BULK) + (PARTITIONS * 2 if guarantee == "at_least_once" else 0)
    assert carried == native_restored == python_restored == expected and none == 0
    assert len(native) == PARTITIONS and native == python
    for rows in native.values():
        stored = dict(rows)
        assert stored[b"k1"][8:] == (b"v1-by-txn" if guarantee == "exactly_once_v2" else b"ABORTED")
        assert (b"t2" in stored) is (guarantee == "at_least_once")
        assert b"k3" not in stored and b"missing" not in stored
        assert stored[b""][8:] == b"empty-key" and len(stored[b"k4"]) == 8 + 70000
        assert b"k2" not in stored  # deleted by the last committed transaction


def test_restore_queues_return_what_consume_returns(kafka_bootstrap: str) -> None:
    """Record for record, the core's runs hold what `consume()` gives for the same partitions, and the
    ends it reports are the end-of-partition offsets."""
    core = require_native_core()
    app_id = f"nrq-{uuid.uuid4().hex[:8]}"
    _create(kafka_bootstrap, app_id)
    changelog = f"{app_id}-{STORE}-changelog"
    _fill(kafka_bootstrap, changelog)
    settings = {
        "bootstrap.servers": kafka_bootstrap,
        "group.id": f"{app_id}-restore",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": "read_committed",
    }

    def by_consume() -> tuple[dict[int, list[Any]], dict[int, int]]:
        consumer = Consumer(settings)
        got: dict[int, list[Any]] = {p: [] for p in range(PARTITIONS)}
        ends: dict[int, int] = {}
        try:
            consumer.assign([TopicPartition(changelog, p, 0) for p in range(PARTITIONS)])
            while len(ends) < PARTITIONS:
                for msg in consumer.consume(1000, 1.0):
                    if msg.error() is not None:
                        ends[msg.partition()] = msg.offset()
                        continue
                    got[msg.partition()].append((msg.key() or b"", msg.value(), msg.timestamp()[1]))
        finally:
            consumer.close()
        return got, ends

    def by_core() -> tuple[dict[int, list[Any]], dict[int, int]]:
        consumer = Consumer(settings)
        queues = native_restore.restore_queues(core, consumer)
        assert queues is not None
        got: dict[int, list[Any]] = {p: [] for p in range(PARTITIONS)}
        ends: dict[int, int] = {}
        try:
            consumer.list_topics(changelog, timeout=10)
            assert all(queues.open(changelog, p) for p in range(PARTITIONS))
            consumer.assign([TopicPartition(changelog, p, 0) for p in range(PARTITIONS)])
            while len(ends) < PARTITIONS:
                assert consumer.consume(1000, 0.0) == []  # nothing reaches the consumer queue
                runs, found, errors = queues.consume(1000, 1.0)
                assert errors == []
                for (topic, p), run in runs:
                    assert topic == changelog
                    got[p].extend(run.records())
                ends.update({p: end for (_t, p), end in found.items()})
        finally:
            queues.close()
            consumer.close()
        return got, ends

    assert by_core() == by_consume()


def test_a_partition_unassigned_mid_restore_stops_and_reopened_resumes(kafka_bootstrap: str) -> None:
    """A task revoked mid-restore: once its partition is unassigned nothing more of it comes (what was
    fetched before is outdated, as for `consume()`); assigned again (opened first, as the reader
    does), it is read from the new position to its end, record for record."""
    core = require_native_core()
    app_id = f"nrq-{uuid.uuid4().hex[:8]}"
    _create(kafka_bootstrap, app_id)
    changelog = f"{app_id}-{STORE}-changelog"
    _fill(kafka_bootstrap, changelog)
    consumer = Consumer({
        "bootstrap.servers": kafka_bootstrap, "group.id": f"{app_id}-restore", "enable.auto.commit": False,
        "enable.partition.eof": True, "isolation.level": "read_committed",
    })  # fmt: skip
    queues = native_restore.restore_queues(core, consumer)
    assert queues is not None
    try:
        consumer.list_topics(changelog, timeout=10)
        assert queues.open(changelog, 0) and queues.open(changelog, 1)
        consumer.incremental_assign([TopicPartition(changelog, p, 0) for p in range(PARTITIONS)])
        seen: dict[int, list[Any]] = {0: [], 1: []}
        while not seen[0]:
            for (_t, p), run in queues.consume(5, 1.0)[0]:
                seen[p].extend(run.records())
        consumer.incremental_unassign([TopicPartition(changelog, 0)])
        ends: dict[int, int] = {}
        while 1 not in ends:
            runs, found, _errors = queues.consume(1000, 1.0)
            assert all(p == 1 for (_t, p), _run in runs)  # nothing of the revoked partition
            for (_t, p), run in runs:
                seen[p].extend(run.records())
            ends.update({p: end for (_t, p), end in found.items()})
        assert 0 not in ends
        # again from offset 7 (the first committed transaction's records, then the rest)
        assert queues.open(changelog, 0)
        consumer.incremental_assign([TopicPartition(changelog, 0, 7)])
        resumed: list[Any] = []
        while 0 not in ends:
            runs, found, _errors = queues.consume(1000, 1.0)
            for (_t, p), run in runs:
                assert p == 0
                resumed.extend(run.records())
            ends.update({p: end for (_t, p), end in found.items()})
    finally:
        queues.close()
        consumer.close()
    assert [key for key, _v, _ts in resumed[:4]] == [b"t1", b"k1", b"t3", b"k2"]
    assert len(resumed) == 4 + BULK and len(seen[1]) == 7 + 4 + BULK
