"""The record cache: Kafka Streams' ThreadCache, shared by the tasks of one stream thread.

It exists to turn many updates of a hot key into one downstream record and one changelog write per
commit. Entries are grouped in named caches (one per task and store); the total size is bounded by
`statestore.cache.max.bytes`. When a put pushes the total over the bound, the least recently used
entries of the cache being written are evicted, and evicting a dirty entry first flushes every dirty
entry of that cache, in the order they were last written, exactly as Kafka Streams does. A bound of 0
therefore forwards every update immediately: caching off.

This module is the reference and the fallback: with the native core (`kappaflow_native.ThreadCache`,
runtime/native/src/cache.rs) a thread's cache is its Rust twin, the same operations on Rust entries and
integer counters (`kappaflow.tasks.native.new_thread_cache`); without the core, or with
`kappaflow.native.enabled=false`, this class.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kappaflow.state.api import FlushedWrites, RecordContext

# What an entry costs in this process beyond its key, value and topic bytes: the CacheEntry, its
# RecordContext and Headers, the decoded value and the slots of the two ordered dicts (measured with
# tracemalloc: tests/runtime/test_stores.py). Counting it makes `statestore.cache.max.bytes` a bound on
# the memory the cache really holds, not on its payload only: with Kafka Streams' 64-byte figure a
# 100 MiB cache of small entries held about 500 MiB.
_ENTRY_OVERHEAD = 480
NOT_DECODED = object()
"""`CacheEntry.decoded` when the typed store above has no decoded copy of the entry's bytes."""


@dataclass(slots=True)
class CacheEntry:
    value: bytes | None
    dirty: bool
    context: RecordContext
    size: int
    # The typed value the bytes decode to, kept when it is immutable and round-trips (see
    # Serde.decodes_to_itself): a hot aggregate is then read back without deserializing it per update.
    decoded: object = NOT_DECODED


DirtyEntries = list[tuple[bytes, CacheEntry]]
FlushListener = Callable[[DirtyEntries], None]
FlushColumns = tuple[FlushedWrites, list[bytes | None], list[object]]
"""A logged store's flush, split: the writes (key, value, record context), the old values the listener
is told, and the decoded copies of the new values (`split_flush`)."""


class NamedCache:
    """One namespace (a task's store) of the record cache: its entries in LRU order and its dirty keys in
    the order last written."""

    __slots__ = ("dirty", "entries", "listener", "name", "size")

    def __init__(self, name: str) -> None:
        self.name = name
        self.entries: OrderedDict[bytes, CacheEntry] = OrderedDict()
        self.dirty: OrderedDict[bytes, None] = OrderedDict()
        self.size = 0
        self.listener: FlushListener | None = None

    def flush(self) -> None:
        if not self.dirty:
            return
        batch: DirtyEntries = []
        for key in self.dirty:
            entry = self.entries[key]
            entry.dirty = False
            batch.append((key, entry))
        self.dirty.clear()
        if self.listener is not None:
            self.listener(batch)

    def evict_eldest(self) -> int:
        key, entry = next(iter(self.entries.items()))
        if entry.dirty:
            self.flush()
        # the listener may have written through this cache; the eldest is still the one to drop
        removed = self.entries.pop(key, None)
        if removed is None:
            return 0
        self.dirty.pop(key, None)
        self.size -= removed.size
        return removed.size


class RecordCache(Protocol):
    """What the stores and tasks use of a thread's record cache: `ThreadCache` below or its native twin
    (`kappaflow_native.ThreadCache`), whose entries Python reads as copies with the same fields."""

    max_bytes: int

    @property
    def size_bytes(self) -> int: ...
    @property
    def hits(self) -> int: ...
    @property
    def misses(self) -> int: ...
    @property
    def evictions(self) -> int: ...

    def add_dirty_entry_flush_listener(self, namespace: str, listener: FlushListener) -> None: ...
    def get(self, namespace: str, key: bytes) -> CacheEntry | None: ...
    def holds(self, namespace: str, key: bytes) -> bool: ...
    def put(
        self, namespace: str, key: bytes, value: bytes | None, dirty: bool, context: RecordContext,
        decoded: object = NOT_DECODED,
    ) -> None: ...  # fmt: skip
    def sorted_entries(
        self, namespace: str, from_key: bytes | None, to_key: bytes | None
    ) -> list[tuple[bytes, CacheEntry]]: ...
    def flush(self, namespace: str) -> None: ...
    def drop(self, namespace: str, key: bytes) -> None: ...
    def close(self, namespace: str) -> None: ...
    @staticmethod
    def split_flush(
        entries: DirtyEntries,
        read_old: Callable[[bytes], bytes | None] | None,
        send_old: bool,
        live: Callable[[bytes], bool] | None,
    ) -> FlushColumns: ...


class ThreadCache:
    """Kafka Streams' ThreadCache: the record cache every task of one stream thread writes its cached
    stores through (see the module docstring). It owns the bound (`max_bytes`), the named caches and the
    thread's hit, miss and eviction counts. The fallback of `kappaflow_native.ThreadCache` (see the module
    docstring), which the native aggregation requires: with this one an aggregation runs in Python."""

    __slots__ = ("_caches", "evictions", "hits", "max_bytes", "misses", "size_bytes")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._caches: dict[str, NamedCache] = {}
        self.size_bytes = 0  # what all named caches hold, as counted by put (payload + _ENTRY_OVERHEAD)
        self.evictions = 0
        self.hits = 0
        self.misses = 0

    def named(self, namespace: str) -> NamedCache:
        cache = self._caches.get(namespace)
        if cache is None:
            cache = self._caches[namespace] = NamedCache(namespace)
        return cache

    def add_dirty_entry_flush_listener(self, namespace: str, listener: FlushListener) -> None:
        self.named(namespace).listener = listener

    def get(self, namespace: str, key: bytes) -> CacheEntry | None:
        cache = self._caches.get(namespace)
        entry = cache.entries.get(key) if cache is not None else None
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        cache.entries.move_to_end(key)  # type: ignore[union-attr]
        return entry

    def holds(self, namespace: str, key: bytes) -> bool:
        """Whether the cache has a live (non-deleted) entry for the key; a peek: no hit, no LRU refresh."""
        cache = self._caches.get(namespace)
        entry = cache.entries.get(key) if cache is not None else None
        return entry is not None and entry.value is not None

    def put(
        self,
        namespace: str,
        key: bytes,
        value: bytes | None,
        dirty: bool,
        context: RecordContext,
        decoded: object = NOT_DECODED,
    ) -> None:
        cache = self._caches.get(namespace)
        if cache is None:
            cache = self.named(namespace)
        size = len(key) + len(context.topic) + _ENTRY_OVERHEAD
        if value is not None:
            size += len(value)
        entries = cache.entries
        old = entries.get(key)
        if old is None:
            entries[key] = CacheEntry(value, dirty, context, size, decoded)
            delta = size
        else:  # update in place: a hot key costs no allocation
            delta = size - old.size
            old.value = value
            old.context = context
            old.size = size
            old.decoded = decoded
            if dirty:
                old.dirty = True
            else:
                dirty = old.dirty
            entries.move_to_end(key)
        if dirty:  # flushed in the order last written, as Kafka Streams' NamedCache does
            dirty_keys = cache.dirty
            if key in dirty_keys:
                dirty_keys.move_to_end(key)
            else:
                dirty_keys[key] = None
        cache.size += delta
        self.size_bytes += delta
        if self.size_bytes > self.max_bytes:
            self.evict_over_bound(cache)

    def evict_over_bound(self, cache: NamedCache) -> None:
        """Evict `cache`'s least recently used entries while the thread's total is over the bound. Past
        the cache (every update a new key) this runs once per update, and the eldest is mostly clean
        (flushed with the last dirty eviction): a clean one leaves here, without `evict_eldest`'s frame."""
        entries = cache.entries
        while self.size_bytes > self.max_bytes and entries:
            key, entry = next(iter(entries.items()))
            if entry.dirty:
                # not `self.size_bytes -= ...`: that reads the total before the flush, whose listener may
                # write through (and evict from) the cache, and would write back a stale total
                freed = cache.evict_eldest()
                self.size_bytes -= freed
            else:
                del entries[key]
                cache.dirty.pop(key, None)
                cache.size -= entry.size
                self.size_bytes -= entry.size
            self.evictions += 1

    def sorted_entries(
        self, namespace: str, from_key: bytes | None, to_key: bytes | None
    ) -> list[tuple[bytes, CacheEntry]]:
        cache = self._caches.get(namespace)
        if cache is None:
            return []
        return sorted(
            (k, e)
            for k, e in cache.entries.items()
            if (from_key is None or k >= from_key) and (to_key is None or k <= to_key)
        )

    def flush(self, namespace: str) -> None:
        cache = self._caches.get(namespace)
        if cache is not None:
            cache.flush()

    def drop(self, namespace: str, key: bytes) -> None:
        """Forget one entry without flushing it (an expired entry deleted below the cache)."""
        cache = self._caches.get(namespace)
        if cache is None:
            return
        entry = cache.entries.pop(key, None)
        cache.dirty.pop(key, None)
        if entry is not None:
            cache.size -= entry.size
            self.size_bytes -= entry.size

    def close(self, namespace: str) -> None:
        cache = self._caches.pop(namespace, None)
        if cache is not None:
            self.size_bytes -= cache.size

    @staticmethod
    def split_flush(
        entries: DirtyEntries,
        read_old: Callable[[bytes], bytes | None] | None,
        send_old: bool,
        live: Callable[[bytes], bool] | None,
    ) -> FlushColumns:
        """A logged store's flushed entries as the columns its batched flush writes and forwards
        (`CachingKeyValueStore._flush_batched`). `read_old` (the store below, when a listener is told the
        flush) reads the old value of a delete, and of every entry when old values are sent, of a key
        `live` does not call expired; a delete of a key never held is left out: no write and no
        tombstone. Here because past the record cache this runs per input record: the native cache's
        twin (runtime/native/src/table_flush.rs) does it without a Python frame per entry."""
        writes: FlushedWrites = []
        olds: list[bytes | None] = []
        decodeds: list[object] = []
        for key, entry in entries:
            value = entry.value
            old = None
            if read_old is not None and (value is None or send_old) and (live is None or live(key)):
                old = read_old(key)
            if read_old is not None and value is None and old is None:
                continue
            writes.append((key, value, entry.context))
            olds.append(old if send_old else None)
            decodeds.append(entry.decoded)
        return writes, olds, decodeds
