"""Stores sharing the bounded setter's write buffer manager: a store that went quiet holding a large
memtable is flushed once the shared budget passes RocksDB's flush trigger (RocksDB flushes only the store
being written, so without the group every other store flushes tiny memtables instead)."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from kappaflow.api.config import StreamsConfig
from kappaflow.state.kv_bytes import RocksDBKeyValueBytesStore
from kappaflow.state.rocksdb_config import BoundedMemoryConfigSetter
from kappaflow.state.write_buffer_group import SCAN_INTERVAL_S, WriteBufferGroup, outsized_memtables
from tests.runtime.test_stores import FakeStoreContext


def test_memtables_far_above_the_groups_mean_are_outsized() -> None:
    assert outsized_memtables([1100, 1100, 90, 90, 90, 90, 90, 90, 90, 90, 90, 90]) == [0, 1]
    assert outsized_memtables([0, 0, 0, 400]) == [3]


def test_even_memtables_a_single_store_or_empty_ones_are_left_to_rocksdb() -> None:
    assert outsized_memtables([200, 210, 190, 205]) == []
    assert outsized_memtables([5000]) == []  # its own writes flush it
    assert outsized_memtables([0, 0, 0]) == []
    assert outsized_memtables([]) == []


class FakeManager:
    def __init__(self, usage: int) -> None:
        self.usage = usage

    def get_usage(self) -> int:
        return self.usage


class FakeStore:
    def __init__(self, active_bytes: int) -> None:
        self.active_bytes = active_bytes
        self.flushed = 0

    def active_memtable_bytes(self) -> int:
        return self.active_bytes

    def start_memtable_flush(self) -> None:
        self.flushed += 1
        self.active_bytes = 0


def test_the_group_scans_only_past_the_trigger_and_at_most_once_an_interval() -> None:
    now = [100.0]
    manager = FakeManager(usage=13 << 20)  # under 7/8 of 16 MiB
    group = WriteBufferGroup(manager, 16 << 20, clock=lambda: now[0])
    quiet, busy = FakeStore(4 << 20), [FakeStore(100 << 10) for _ in range(7)]
    for db in [quiet, *busy]:
        group.join(db)
    group.after_write()
    assert quiet.flushed == 0  # under the trigger: RocksDB's business
    manager.usage = 15 << 20
    group.after_write()
    assert (quiet.flushed, [db.flushed for db in busy]) == (1, [0] * 7)
    quiet.active_bytes = 4 << 20
    now[0] += SCAN_INTERVAL_S / 2
    group.after_write()
    assert quiet.flushed == 1  # no second scan within the interval
    now[0] += SCAN_INTERVAL_S
    group.after_write()
    assert (quiet.flushed, group.flushes) == (2, 2)


def test_a_database_that_left_the_group_is_never_flushed_by_it() -> None:
    group = WriteBufferGroup(FakeManager(usage=16 << 20), 16 << 20, clock=lambda: 0.0)
    leaving, others = FakeStore(4 << 20), [FakeStore(100 << 10) for _ in range(3)]
    for db in [leaving, *others]:
        group.join(db)
    group.leave(leaving)
    group.after_write()
    assert leaving.flushed == 0


def test_a_store_dropped_without_closing_is_not_kept_alive_by_the_group(tmp_path: Path) -> None:
    """The group holds its stores weakly: a dropped store's database closes and frees its directory's
    lock, so the same directory opens again in this process."""
    context = FakeStoreContext(tmp_path)
    setter = BoundedMemoryConfigSetter(32 << 20, 16 << 20)
    context.app_config = StreamsConfig({"application.id": "app", "rocksdb.config.setter": setter})
    dropped = RocksDBKeyValueBytesStore("counts")
    dropped.init(context, dropped)  # type: ignore[arg-type]
    dropped.put(b"k", b"v")
    context.registered.clear()  # the fake context's restore callbacks hold the store too
    del dropped
    gc.collect()
    again = RocksDBKeyValueBytesStore("counts")
    again.init(context, again)  # type: ignore[arg-type]
    again.close()


def key(i: int) -> bytes:
    return b"%016x" % ((i * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF)


@pytest.mark.parametrize("grouped", [True, False])
def test_stores_that_went_quiet_are_flushed_once_the_shared_budget_fills(
    tmp_path: Path, grouped: bool
) -> None:
    """As the scaling table's 64-partition cell: the first eight stores take all their keys (~1.1 MiB of
    memtable each), then only the other 56 are written. Without the group the quiet stores kept their
    memtables to the end (~9 of the 16 MiB), and the others flushed memtables of ~80 KiB."""
    context = FakeStoreContext(tmp_path)
    setter = BoundedMemoryConfigSetter(32 << 20, 16 << 20)
    if not grouped:
        setter.write_buffer_group = None  # type: ignore[assignment]
    context.app_config = StreamsConfig({"application.id": "app", "rocksdb.config.setter": setter})
    stores = [RocksDBKeyValueBytesStore(f"counts-{index}") for index in range(64)]
    for store in stores:
        store.init(context, store)  # type: ignore[arg-type]
    written = 0
    try:
        for store in stores[:8]:
            for _ in range(52):
                store.put_all([(key(written + i), b"\0" * 16) for i in range(300)])
                written += 300
        for _ in range(300):
            for store in stores[8:]:
                store.put_all([(key(written + i), b"\0" * 16) for i in range(3)])
                written += 3
        quiet = [store.active_memtable_bytes() for store in stores[:8]]
        assert all(store.get(key(0)) == b"\0" * 16 for store in stores[:1])  # flushed, not lost
    finally:
        for store in stores:
            store.close()
    if grouped:
        assert max(quiet) < 64 << 10, quiet  # flushed by the group
    else:
        assert min(quiet) > 1 << 20, quiet  # what RocksDB alone leaves: the test sees the difference
