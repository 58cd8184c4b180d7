"""The bulk restore path: consumed changelog records applied as they come give the per-record path's state.

The runtime restores through `ProcessorStateManager.restore_messages` (RocksDB stores: one write batch,
no per-record tuple); the test driver and stores without a bulk path go through `restore_batch`. These
tests hold the two to the same contents: overwrites, tombstones, missing keys, timestamps, and the
transactional (exactly_once_v2) store writing restored records straight to its database.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError
from hypothesis import given, settings
from hypothesis import strategies as st

from kappaflow.api.errors import StreamsError
from kappaflow.runner.changelog_reader import ChangelogReader
from kappaflow.state.kv_bytes import (
    UNLOGGED_RESTORE_MIN,
    InMemoryKeyValueBytesStore,
    RocksDBKeyValueBytesStore,
)
from kappaflow.tasks.state_manager import ProcessorStateManager
from tests.runtime.test_stores import FakeStoreContext


@dataclass
class Consumed:
    """A consumed record with the accessors of confluent-kafka's Message that restoring reads."""

    topic_: str
    partition_: int
    offset_: int
    key_: bytes | None = None
    value_: bytes | None = None
    timestamp_: int = 0
    error_: KafkaError | None = None

    def topic(self) -> str:
        return self.topic_

    def partition(self) -> int:
        return self.partition_

    def offset(self) -> int:
        return self.offset_

    def key(self) -> bytes | None:
        return self.key_

    def value(self) -> bytes | None:
        return self.value_

    def timestamp(self) -> tuple[int, int]:
        return (1, self.timestamp_)

    def error(self) -> KafkaError | None:
        return self.error_


# Overwrites, a tombstone of a live key, a tombstone of a missing key, a re-put after a delete, a null
# key (restored under b"", as the per-record path does) and negative / large timestamps.
CHANGELOG = [
    (b"b", b"1", 10),
    (b"a", b"1", 11),
    (b"b", b"2", 12),
    (b"c", b"1", -5),
    (b"a", None, 13),
    (b"zz", None, 14),
    (None, b"nokey", 15),
    (b"c", b"2", 2**62),
    (b"a", b"3", 16),
]


def messages() -> list[Any]:
    return [Consumed("log", 0, i, k, v, ts) for i, (k, v, ts) in enumerate(CHANGELOG)]


def records() -> list[tuple[bytes, bytes | None, int]]:
    return [(k or b"", v, ts) for k, v, ts in CHANGELOG]


def open_rocksdb(path: Path, name: str, timestamped: bool) -> RocksDBKeyValueBytesStore:
    store = RocksDBKeyValueBytesStore(name, timestamped=timestamped)
    store.init(FakeStoreContext(path), store)  # type: ignore[arg-type]
    return store


@pytest.mark.parametrize("timestamped", [False, True])
def test_bulk_restore_gives_the_per_record_paths_contents(tmp_path: Path, timestamped: bool) -> None:
    reference = InMemoryKeyValueBytesStore("mem", timestamped=timestamped)
    reference.restore_batch(records())
    per_record = open_rocksdb(tmp_path, "per-record", timestamped)
    bulk = open_rocksdb(tmp_path, "bulk", timestamped)
    try:
        per_record.restore_batch(records())
        bulk.restore_messages(messages())
        expected = list(reference.all())
        assert list(bulk.all()) == list(per_record.all()) == expected
        assert {k for k, _ in expected} == {b"", b"b", b"c", b"a"}
        if timestamped:
            assert bulk.get(b"c") == (2**62).to_bytes(8, "big") + b"2"
        else:
            assert bulk.get(b"c") == b"2"
    finally:
        per_record.close()
        bulk.close()


def test_transactional_store_writes_restored_records_straight_to_its_database(tmp_path: Path) -> None:
    """Restored records are committed changelog records: closing without a commit keeps them."""
    store = open_rocksdb(tmp_path, "tx", timestamped=True)
    store.begin_transactions()
    store.restore_messages(messages())
    assert store.uncommitted_count() == 0
    store.close()
    reopened = open_rocksdb(tmp_path, "tx", timestamped=True)
    try:
        assert reopened.get(b"a") == (16).to_bytes(8, "big") + b"3"
        assert reopened.get(b"zz") is None
    finally:
        reopened.close()


def test_state_manager_converts_for_stores_without_a_bulk_path(tmp_path: Path) -> None:
    manager = ProcessorStateManager(tmp_path, 0, lambda s: f"app-{s}-changelog")
    store = InMemoryKeyValueBytesStore("mem", timestamped=True)
    manager.register(store, store.restore_batch)
    manager.restore_messages("mem", messages(), len(CHANGELOG))
    reference = InMemoryKeyValueBytesStore("ref", timestamped=True)
    reference.restore_batch(records())
    assert list(store.all()) == list(reference.all())
    assert manager.offset("mem") == len(CHANGELOG)
    assert manager.stores["mem"].restored_records == len(CHANGELOG)


def test_reader_splits_consumed_records_by_partition_in_order() -> None:
    """Runs of several partitions, interleaved, and an end-of-partition event between them."""
    a = [Consumed("log", 0, i, b"k", b"v") for i in range(4)]
    b = [Consumed("log", 1, i, b"k", b"v") for i in range(2)]
    other = Consumed("other", 0, 0, b"k", b"v")  # same partition number, another changelog
    eof = Consumed("log", 1, 5, error_=KafkaError(KafkaError._PARTITION_EOF))
    consumed = [a[0], a[1], b[0], other, a[2], eof, b[1], a[3]]
    batches, ends = ChangelogReader._by_partition(consumed)
    assert batches == {("log", 0): a, ("log", 1): b, ("other", 0): [other]}
    assert ends == {("log", 1): 5}
    # No end-of-partition among them: the run-by-run split, a run mixing two changelogs included.
    batches, ends = ChangelogReader._by_partition([a[0], a[1], other, a[2], b[0], b[1], a[3]])
    assert batches == {("log", 0): a, ("log", 1): b, ("other", 0): [other]}
    assert ends == {}


def test_reader_names_the_partition_a_fetch_failed_on_and_rides_out_passing_errors() -> None:
    failed = Consumed("log", 3, -1, error_=KafkaError(KafkaError._FATAL, fatal=True))
    with pytest.raises(StreamsError, match="restoring from log-3 failed"):
        ChangelogReader._by_partition([Consumed("log", 0, 0, b"k", b"v"), failed])
    # a broker restart: librdkafka reports the partition and retries by itself; the batch goes on
    passing = Consumed("log", 3, -1, error_=KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    batches, _ends = ChangelogReader._by_partition(
        [Consumed("log", 0, 0, b"k", b"v"), passing, Consumed("log", 0, 1, b"k", b"w")]
    )
    assert [m.offset() for m in batches[("log", 0)]] == [0, 1]


changelogs = st.lists(
    st.tuples(
        st.one_of(st.none(), st.sampled_from([b"", b"a", b"b", b"c"])),
        st.one_of(st.none(), st.binary(max_size=3)),
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
    ),
    max_size=40,
)


@settings(max_examples=40, deadline=None)
@given(changelog=changelogs, timestamped=st.booleans())
def test_bulk_restore_matches_the_per_record_path_on_any_changelog(
    changelog: list[tuple[bytes | None, bytes | None, int]], timestamped: bool
) -> None:
    """Tombstones first, last, in runs; empty values; repeated and missing keys; any timestamp."""
    reference = InMemoryKeyValueBytesStore("mem", timestamped=timestamped)
    reference.restore_batch([(k or b"", v, ts) for k, v, ts in changelog])
    with tempfile.TemporaryDirectory() as directory:
        bulk = open_rocksdb(Path(directory), "bulk", timestamped)
        try:
            bulk.restore_messages([Consumed("log", 0, i, k, v, ts) for i, (k, v, ts) in enumerate(changelog)])
            assert list(bulk.all()) == list(reference.all())
        finally:
            bulk.close()


CRASHING_RESTORE = """
import os, sys
from pathlib import Path
from kappaflow.state.kv_bytes import UNLOGGED_RESTORE_MIN, RocksDBKeyValueBytesStore
from tests.runtime.test_bulk_restore import Consumed
from tests.runtime.test_stores import FakeStoreContext

store = RocksDBKeyValueBytesStore("s", timestamped=True)
store.init(FakeStoreContext(Path(sys.argv[1])), store)
if sys.argv[2] == "eos":
    store.begin_transactions()
n = UNLOGGED_RESTORE_MIN
store.restore_messages([Consumed("log", 0, i, b"k%06d" % i, b"v", i) for i in range(n)])
store.checkpoint(n)
store.restore_messages([Consumed("log", 0, i, b"k%06d" % i, b"w", i) for i in range(n, 2 * n)])
os._exit(0)  # a crash: no close, no flush of what the write-ahead log did not see
"""


@pytest.mark.parametrize("guarantee", ["at_least_once", "eos"])
def test_a_crash_after_a_bulk_restore_keeps_every_record_its_offset_counts(
    tmp_path: Path, guarantee: str
) -> None:
    """Bulk restores skip the write-ahead log; the offset written with `checkpoint` must never count
    records a crash can lose (killed right after, the database still holds all of them)."""
    root = Path(__file__).resolve().parents[2]
    subprocess.run(
        [sys.executable, "-c", CRASHING_RESTORE, str(tmp_path), guarantee], cwd=root, check=True, timeout=60
    )
    store = open_rocksdb(tmp_path, "s", timestamped=True)
    try:
        offset = store.committed_changelog_offset()
        assert offset == UNLOGGED_RESTORE_MIN
        counted = [k for k, _ in store.range(None, b"k%06d" % (offset - 1))]
        assert counted == [b"k%06d" % i for i in range(offset)]
    finally:
        store.close()
