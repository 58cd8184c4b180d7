"""RocksDB options per store: Kafka Streams' `rocksdb.config.setter`, and a bounded-memory setter.

Each RocksDB store (one per store per task, one per segment of a window store) opens with RocksDB's
default options: a block cache and memtables of its own, so memory grows with the number of tasks and
stores rather than with any one setting. Kafka Streams lets users change that with a
`RocksDBConfigSetter` class; here the setter is a Python callable, called for every store just before it
opens with the store's name, its `rocksdict.Options` and the application's configuration. It is named in
the configuration as an object or a `module:attribute` path (the form a properties file or a
`KAPPAFLOW_ROCKSDB_CONFIG_SETTER` variable can carry).

`BoundedMemoryConfigSetter` is the setter Kafka Streams' memory-management guide builds by hand: every
store of the process shares one LRU block cache, and memtables are charged to that same cache through one
write buffer manager, so RocksDB's memory for the whole process is capped by one number whatever the
number of stores.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import rocksdict

from kappaflow.api.errors import ConfigError
from kappaflow.api.imports import import_object
from kappaflow.state.write_buffer_group import WriteBufferGroup

CONFIG_KEY = "rocksdb.config.setter"


class RocksDBConfigSetter(Protocol):
    """Called once per RocksDB store before it opens; changes `options` in place."""

    def __call__(self, store_name: str, options: rocksdict.Options, config: Mapping[str, Any]) -> None: ...


def resolve_config_setter(value: object) -> RocksDBConfigSetter | None:
    """The configured setter: None when unset, a callable as is, a `module:attribute` (or dotted) path
    imported. A class is instantiated without arguments, as Kafka Streams does with its setter class."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        value = import_object(value, CONFIG_KEY, "setter")
    if isinstance(value, type):
        value = value()
    if not callable(value):
        raise ConfigError(
            f"config '{CONFIG_KEY}': {value!r} is not callable; expected a function "
            "(store_name, options, config) or an object with such a __call__"
        )
    setter: RocksDBConfigSetter = value
    return setter


def write_buffer_group_of(setter: RocksDBConfigSetter | None) -> WriteBufferGroup | None:
    """The group of stores a setter's shared write buffer manager counts (its `write_buffer_group`
    attribute, as `BoundedMemoryConfigSetter` has), or None: each store's memtables are its own."""
    group = getattr(setter, "write_buffer_group", None)
    return group if isinstance(group, WriteBufferGroup) else None


BLOOM_BITS_PER_KEY = 10
METADATA_BLOCK_BYTES = 4096  # a partition of an index or filter, as RocksDB's default data block
# A memtable's whole-key bloom filter as a share of its write buffer: at this store's ~60-byte entries
# (key, value and the skiplist's node) about 10 bits a key, as the SST files' filters.
MEMTABLE_BLOOM_RATIO = 0.02
# The memtables' allocation unit under the bounded setter (RocksDB's default is an eighth of the write
# buffer). A memtable takes its first block with its first write and its bloom filter when it is made, and
# the write buffer manager counts both: when every store's memtable holding that much fills most of the
# shared write-buffer budget, each write asks for a flush of the store it went to, whatever that store's
# memtable holds. Writing 500k new keys straight into 64 stores behind 16 MiB of write buffers, the default
# 512 KiB blocks did that: 4,894 flushes (8 with 4 stores) and 24.8 CPU us a key, against 251 flushes and
# 7.7 us with 64 KiB blocks; through the broker (bench/scaling_cost.py, 64 partitions x 1M keys) RocksDB's
# threads took 9.5-9.9 CPU us a record against 12.0-12.1.
ARENA_BLOCK_BYTES = 64 << 10


def bloom_filtered_table() -> rocksdict.BlockBasedOptions:
    """Block-based table options with a bloom filter of 10 bits a key (~1% false positives), as Kafka
    Streams' RocksDB stores have. An aggregation looks up every key before it writes it, and a key seen
    for the first time is in no SST file: without a filter that miss reads an index and a data block of
    every level-0 file and level, through the block cache. Counting 1M distinct keys from 4 partitions,
    `RocksDBKeyValueBytesStore.get` took 24% of the stream thread (py-spy, bench/scaling_cost.py)."""
    table = rocksdict.BlockBasedOptions()
    table.set_bloom_filter(BLOOM_BITS_PER_KEY, False)
    return table


def filter_memtables_by_whole_key(options: rocksdict.Options) -> None:
    """A bloom filter of whole keys in every memtable, so a point lookup of a key no memtable holds skips
    their skiplists.

    Why: an aggregation reads every key before it writes it, and past the record cache most keys are new.
    Counting 1M new keys from 4 partitions, RocksDB's memtable search (`SkipListRep::Iterator::Seek`, a
    cache miss per level hop in a few MiB of nodes, for the active and each immutable memtable) was 44% of
    `RocksDBKeyValueBytesStore.get` and 16% of the stream thread (py-spy --native, bench/scaling_cost.py);
    with the filter, bench/rocksdb_new_keys.py (1M keys, 4 stores, the bounded setter) took 2.12-2.34 CPU
    us a key against 2.61-3.15 without, interleaved.

    The filter is allocated and zeroed when a memtable is created, inside the memtable's arena (so a write
    buffer manager charges it with the memtable): `MEMTABLE_BLOOM_RATIO` of the write buffer. That is why
    it is not in every store's defaults: RocksDB's default 64 MiB write buffer would carry 1.3 MiB from
    the moment a store opens (32 idle stores: 49 MiB of RSS against 8), where the bounded setter's
    memtables carry 2% of their few MiB."""
    options.set_memtable_prefix_bloom_ratio(MEMTABLE_BLOOM_RATIO)
    options.set_memtable_whole_key_filtering(True)


def partition_index_and_filters(table: rocksdict.BlockBasedOptions) -> None:
    """Index and bloom filter of each SST file cut into ~4 KiB partitions under a small top-level index,
    the top level pinned in the block cache (RocksDB's "partitioned index/filters").

    Why: once index and filter blocks are charged to a bounded cache, a whole-file filter is one block
    of ~1.2 MiB per million keys. With state larger than the cache, data blocks evict it and the next
    lookup of a new key (every aggregation reads before it writes) reads the whole filter back from the
    file into the cache: counting 4M new keys over 4 stores sharing a 32 MiB cache, RocksDB alone took
    39 us of CPU a key, against 7.6 us with partitions, which a lookup reads one of (a few KiB)."""
    table.set_partition_filters(True)
    table.set_index_type(rocksdict.BlockBasedIndexType.two_level_index_search())
    table.set_metadata_block_size(METADATA_BLOCK_BYTES)
    table.set_pin_top_level_index_and_filter(True)


class BoundedMemoryConfigSetter:
    """Caps RocksDB's memory for every store of the process at `total_bytes`.

    One LRU block cache of `total_bytes` holds data, index and filter blocks of all stores; memtables
    (`write_buffer_bytes` of it at most) are charged to the same cache by one write buffer manager, so
    the cap covers both. Each store's own memtable is `write_buffer_bytes // 4` (Kafka Streams' recipe
    keeps several per store in flight). Share one instance across the application, e.g. in its module:

        ROCKSDB_MEMORY = BoundedMemoryConfigSetter(total_bytes=64 << 20, write_buffer_bytes=16 << 20)
        config = {"rocksdb.config.setter": ROCKSDB_MEMORY}   # or "myapp.module:ROCKSDB_MEMORY"

    Index and filters are partitioned (`partition_index_and_filters`), as Kafka Streams' memory guide
    suggests for a bounded cache; `partitioned_index_filters=False` keeps one index and one filter block
    per SST file (cheaper while every store's state fits in the cache, far dearer once it does not).
    Memtables filter lookups by whole key (`filter_memtables_by_whole_key`) and grow in 64 KiB blocks
    (`ARENA_BLOCK_BYTES`). A written store's memtable holds one block and its filter (2% of its write
    buffer) however few its entries: keep the stores' count times that well under `write_buffer_bytes`
    (about 100 stores for 16 MiB), or RocksDB flushes a tiny memtable on most writes. The stores opened
    with the setter form its `write_buffer_group`, which flushes the memtables of stores that went quiet
    holding much of the budget (RocksDB flushes only the store being written).
    """

    def __init__(
        self, total_bytes: int, write_buffer_bytes: int, partitioned_index_filters: bool = True
    ) -> None:
        if total_bytes <= 0:
            raise ConfigError(f"BoundedMemoryConfigSetter: total_bytes must be > 0, got {total_bytes}")
        if not 0 < write_buffer_bytes <= total_bytes:
            raise ConfigError(
                "BoundedMemoryConfigSetter: write_buffer_bytes must be > 0 and <= total_bytes "
                f"({total_bytes}), got {write_buffer_bytes}"
            )
        self.total_bytes = total_bytes
        self.write_buffer_bytes = write_buffer_bytes
        self.partitioned_index_filters = partitioned_index_filters
        self.cache = rocksdict.Cache(total_bytes)
        self.write_buffers = rocksdict.WriteBufferManager.new_write_buffer_manager_with_cache(
            write_buffer_bytes, False, self.cache
        )
        self.write_buffer_group = WriteBufferGroup(self.write_buffers, write_buffer_bytes)

    def __call__(self, store_name: str, options: rocksdict.Options, config: Mapping[str, Any]) -> None:
        table = bloom_filtered_table()
        table.set_block_cache(self.cache)
        # index and filter blocks live in the bounded cache too, not on the heap beside it
        table.set_cache_index_and_filter_blocks(True)
        table.set_pin_l0_filter_and_index_blocks_in_cache(True)
        if self.partitioned_index_filters:
            partition_index_and_filters(table)
        options.set_block_based_table_factory(table)
        options.set_write_buffer_manager(self.write_buffers)
        options.set_write_buffer_size(max(self.write_buffer_bytes // 4, 1 << 20))
        options.set_max_write_buffer_number(3)
        options.set_arena_block_size(ARENA_BLOCK_BYTES)
        filter_memtables_by_whole_key(options)

    def usage_bytes(self) -> int:
        """The shared cache's current use (blocks and charged memtables)."""
        return int(self.cache.get_usage())
