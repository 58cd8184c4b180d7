"""RocksDB options: the `rocksdb.config.setter` hook reaches every RocksDB store, and the bounded-memory
setter keeps all stores of a process inside one cache."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import rocksdict

from kappaflow import Materialized, StreamsBuilder, serdes
from kappaflow.api.config import StreamsConfig
from kappaflow.api.errors import ConfigError
from kappaflow.state.kv_bytes import RocksDBKeyValueBytesStore
from kappaflow.state.rocksdb_config import (
    MEMTABLE_BLOOM_RATIO,
    BoundedMemoryConfigSetter,
    resolve_config_setter,
)
from kappaflow.testing import TopologyTestDriver
from tests.runtime.test_stores import FakeStoreContext

S = serdes.String()
SEEN: list[tuple[str, Any]] = []


def record_store(store_name: str, options: rocksdict.Options, config: Mapping[str, Any]) -> None:
    """A setter named by path in the tests below: remembers which store opened with which app id."""
    SEEN.append((store_name, config["application.id"]))


def two_counts() -> Any:
    builder = StreamsBuilder()
    words = builder.stream("in", key_serde=S, value_serde=S)
    words.group_by_key().count(Materialized.as_("by-key"))
    words.group_by(lambda _key, value: value, key_serde=S, value_serde=S).count(Materialized.as_("by-value"))
    return builder.build()


def test_setter_named_by_path_is_called_for_every_rocksdb_store_before_it_opens() -> None:
    SEEN.clear()
    config = {"rocksdb.config.setter": f"{__name__}:record_store"}
    with TopologyTestDriver(two_counts(), config) as driver:
        driver.create_input_topic("in", S, S).pipe_key_value_list([("a", "x"), ("b", "x")])
        assert driver.get_key_value_store("by-value").get("x") == 2
    assert sorted(name for name, _ in SEEN) == ["by-key", "by-value"]
    assert {app for _, app in SEEN} == {"topology-test-driver"}


def test_bounded_memory_setter_shares_one_cache_across_stores(tmp_path: Path) -> None:
    bounded = BoundedMemoryConfigSetter(total_bytes=8 << 20, write_buffer_bytes=4 << 20)
    context = FakeStoreContext(tmp_path)
    context.app_config = StreamsConfig({"application.id": "app", "rocksdb.config.setter": bounded})
    stores = [RocksDBKeyValueBytesStore(name) for name in ("one", "two")]
    try:
        for store in stores:
            store.init(context, store)  # type: ignore[arg-type]
        opened = bounded.usage_bytes()  # each memtable's first arena block is charged at open
        for i in range(20_000):
            stores[i % 2].put(f"key-{i}".encode(), b"v" * 100)
        # both stores' memtables are charged to the one cache, which stays under its capacity
        charged = bounded.usage_bytes()
        assert opened + (512 << 10) <= charged <= 8 << 20
        for store in stores:
            store.flush()
        assert stores[1].get(b"key-19999") == b"v" * 100
    finally:
        for store in stores:
            store.close()


def test_bad_setters_are_rejected_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="rocksdb.config.setter.*cannot import"):
        resolve_config_setter("no_such_module_xyz:setter")
    with pytest.raises(ConfigError, match="rocksdb.config.setter.*not callable"):
        resolve_config_setter(f"{__name__}:S")
    with pytest.raises(ConfigError, match="write_buffer_bytes"):
        BoundedMemoryConfigSetter(total_bytes=1 << 20, write_buffer_bytes=2 << 20)
    assert resolve_config_setter(None) is None


@pytest.mark.parametrize("bounded", [False, True])
def test_stores_open_with_a_bloom_filter_with_or_without_the_bounded_setter(
    tmp_path: Path, bounded: bool
) -> None:
    """A count looks up every new key before writing it; without a filter each miss reads blocks of every
    SST file (24% of the stream thread at 1M keys, bench/scaling_cost.py). RocksDB records the table
    options it opened with in the OPTIONS file: the filter policy must be a bloom filter."""
    setter = BoundedMemoryConfigSetter(8 << 20, 4 << 20) if bounded else None
    assert opened_table_options(tmp_path, setter)["filter_policy"].startswith("bloomfilter")


def opened_table_options(tmp_path: Path, setter: BoundedMemoryConfigSetter | None) -> dict[str, str]:
    """The block-based table options a store opened with, as RocksDB wrote them to its OPTIONS file."""
    return opened_options(tmp_path, setter, '[TableOptions/BlockBasedTable "default"]')


def opened_options(tmp_path: Path, setter: BoundedMemoryConfigSetter | None, section: str) -> dict[str, str]:
    """One section of the options a store opened with, as RocksDB wrote them to its OPTIONS file."""
    context = FakeStoreContext(tmp_path)
    values: dict[str, Any] = {"application.id": "app"}
    if setter is not None:
        values["rocksdb.config.setter"] = setter
    context.app_config = StreamsConfig(values)
    store = RocksDBKeyValueBytesStore("partitioned")
    store.init(context, store)  # type: ignore[arg-type]
    try:
        assert store.path is not None
        options = max(store.path.glob("OPTIONS-*")).read_text()
    finally:
        store.close()
    table = options.split(section)[1].split("[")[0]
    pairs = (line.strip().split("=", 1) for line in table.splitlines() if "=" in line)
    return {name.strip(): value.strip() for name, value in pairs}


@pytest.mark.parametrize("partitioned", [True, False])
def test_bounded_setter_partitions_index_and_filters_in_the_shared_cache(
    tmp_path: Path, partitioned: bool
) -> None:
    """Past the bounded cache a whole-file filter is evicted and read back for every new key (39 vs 7.6
    CPU us a key, bench/rocksdb_new_keys.py): the setter cuts index and filters into partitions under a
    pinned top level, unless asked not to; both ways they stay charged to the shared cache."""
    table = opened_table_options(
        tmp_path, BoundedMemoryConfigSetter(8 << 20, 4 << 20, partitioned_index_filters=partitioned)
    )
    assert table["cache_index_and_filter_blocks"] == "true"
    assert table["partition_filters"] == str(partitioned).lower()
    assert table["index_type"] == ("kTwoLevelIndexSearch" if partitioned else "kBinarySearch")
    assert table["pin_top_level_index_and_filter"] == "true"  # RocksDB's default, used once partitioned
    assert "bloomfilter" in table["filter_policy"]
    if partitioned:
        assert table["metadata_block_size"] == "4096"


@pytest.mark.parametrize("bounded", [False, True])
def test_the_bounded_setters_memtables_filter_lookups_by_whole_key(tmp_path: Path, bounded: bool) -> None:
    """A new key's lookup searched every memtable's skiplist (44% of the get at 1M new keys): the bounded
    setter's small memtables carry a whole-key bloom filter; the defaults' 64 MiB ones do not (the filter
    is allocated when a memtable is, 1.3 MiB per idle store)."""
    setter = BoundedMemoryConfigSetter(8 << 20, 4 << 20) if bounded else None
    column_family = opened_options(tmp_path, setter, '[CFOptions "default"]')
    assert column_family["memtable_whole_key_filtering"] == str(bounded).lower()
    assert float(column_family["memtable_prefix_bloom_size_ratio"]) == (
        MEMTABLE_BLOOM_RATIO if bounded else 0
    )


def test_partitioned_store_finds_every_key_across_flushed_files(tmp_path: Path) -> None:
    """Reads through partitioned indexes and filters: present keys from several SST files, absent keys
    filtered out, after the store is reopened (top-level blocks read back from the files)."""
    context = FakeStoreContext(tmp_path)
    setter = BoundedMemoryConfigSetter(1 << 20, 512 << 10)  # smaller than the state: blocks get evicted
    context.app_config = StreamsConfig({"application.id": "app", "rocksdb.config.setter": setter})
    store = RocksDBKeyValueBytesStore("partitioned")
    store.init(context, store)  # type: ignore[arg-type]
    try:
        for part in range(3):
            store.put_all([(b"%08d" % i, b"%d" % i) for i in range(part, 30_000, 3)])
            store.flush()
        store.close()
        store.init(context, store)  # type: ignore[arg-type]
        assert all(store.get(b"%08d" % i) == b"%d" % i for i in range(0, 30_000, 7))
        assert store.get(b"%08d" % 30_001) is None and store.get(b"absent") is None
    finally:
        store.close()


def test_many_stores_behind_the_bounded_setter_flush_full_memtables_not_one_per_write(tmp_path: Path) -> None:
    """A written memtable holds its first arena block and its bloom filter however few its entries, and the
    shared write buffer manager counts both. With RocksDB's default blocks (an eighth of the write buffer,
    512 KiB here) 64 stores' floors alone filled the 16 MiB budget, so nearly every write flushed the store
    it went to: 4,894 flushes for 500k new keys, compactions 11 CPU us a record (bench/scaling_cost.py at
    64 partitions). With 64 KiB blocks the memtables fill before they flush."""
    setter = BoundedMemoryConfigSetter(32 << 20, 16 << 20)
    stores = []
    for index in range(64):
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        setter(f"store-{index}", options, {})
        stores.append(rocksdict.Rdict(str(tmp_path / str(index)), options))
    try:
        for i in range(64_000):  # ~1,000 new keys a store: ~4 MiB of memtables in all
            key = b"%016x" % ((i * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF)
            stores[i % 64].put(key, b"\0" * 16)
    finally:
        for store in stores:
            store.close()
    flushes = sum(log.read_text().count('"event": "flush_started"') for log in tmp_path.glob("*/LOG"))
    assert flushes <= 64, flushes  # at most a flush a store; the default blocks made thousands


def test_checkpointed_stores_behind_the_bounded_setter_flush_full_memtables(tmp_path: Path) -> None:
    """Each store's metadata column family (its checkpointed changelog offset) shares the write buffer
    manager too. With RocksDB's default options its memtable counted an 8 MiB arena block once a few dozen
    checkpoints had filled the inline one, and 64 such stores kept the budget overrun: a flush of a tiny
    memtable on most writes (193 here). Its memtable is now RocksDB's smallest."""
    context = FakeStoreContext(tmp_path)
    setter = BoundedMemoryConfigSetter(32 << 20, 16 << 20)
    context.app_config = StreamsConfig({"application.id": "app", "rocksdb.config.setter": setter})
    stores = [RocksDBKeyValueBytesStore(f"counts-{index}") for index in range(64)]
    for store in stores:
        store.init(context, store)  # type: ignore[arg-type]
    try:
        for offset in range(100):  # a checkpoint's offset, as `commit` records it, 100 commits a store
            for store in stores:
                store.record_offset(offset)
        for i in range(64_000):
            key = b"%016x" % ((i * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF)
            stores[i % 64].put(key, b"\0" * 16)
    finally:
        for store in stores:
            store.close()
    logs = [log.read_text() for log in tmp_path.rglob("LOG")]
    flushes = sum(log.count('"flush_reason": "Write Buffer Manager"') for log in logs)
    assert flushes <= 64, flushes  # thousands with the metadata memtable's default 8 MiB blocks
