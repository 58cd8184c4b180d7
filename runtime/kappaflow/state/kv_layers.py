"""The wrapping layers of a key-value store: change-logging, caching and the typed metered facade.

Each layer forwards what it does not change to the layer inside it, so the same three classes serve every
bytes store. The caching layer is where Kafka Streams' emit behaviour comes from: with caching, updates
to a key between two commits collapse into one downstream record and one changelog record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kappaflow.api.serdes import Serde
from kappaflow.state.api import (
    BytesIterator,
    ExpiryForwarding,
    KeyValueBytesStore,
    RecordContext,
    StateStore,
    StoreContext,
    prefix_upper_bound,
)
from kappaflow.state.cache import NOT_DECODED, DirtyEntries, RecordCache, ThreadCache
from kappaflow.state.flushed_batch import FlushedBatch
from kappaflow.state.kv_wrapped import (  # re-exported: the stores import them from here
    ChangeLoggingKeyValueBytesStore as ChangeLoggingKeyValueBytesStore,
)
from kappaflow.state.kv_wrapped import WrappedBytesStore as WrappedBytesStore
from kappaflow.state.metered import MeteredStoreBase
from kappaflow.state.timestamped import ValueAndTimestampSerde
from kappaflow.state.uncommitted import overlay

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class CachedStoreBinding:
    """A cached typed key-value store as the native aggregation uses it (`cached_binding`): the context
    whose record context writes carry, the native record cache and the store's namespace in it (whose
    native `gets` and `puts` counters the store publishes with its own), and the serdes and the store
    below the cache."""

    context: StoreContext
    cache: Any  # kappaflow_native.ThreadCache
    namespace: str
    topic: str  # the serdes' topic (the changelog's)
    utf8_keys: bool  # String keys: `str.encode()` instead of `serialize_key`
    serialize_key: Callable[[Any], bytes]
    deserialize: Callable[[str, bytes | None], Any]
    inner_get: Callable[[bytes], bytes | None]  # the store below the cache
    serialize: Callable[[str, Any], bytes | None]
    decodes_to_itself: Callable[[Any], bool]  # kept decoded in the cache entry (Serde.decodes_to_itself)
    packs_longs: bool  # ValueAndTimestamp of an int packs as TIMESTAMPED_LONG
    caching_put: Callable[[bytes, bytes | None], None]  # the caching layer's put: values kept as bytes


# (key bytes, new value bytes, old value bytes, the record context of the write)
BytesFlushListener = Callable[[bytes, bytes | None, bytes | None, RecordContext], None]
# A whole flush at once (`CachingKeyValueStore._flush_batched`): the writes (key, new value, record
# context), the old values, and each new value's decoded copy (NOT_DECODED when the cache kept none).
BytesFlushBatchListener = Callable[
    [list[tuple[bytes, bytes | None, RecordContext]], list[bytes | None], list[object]], None
]
# What the typed store hands a batch listener: the flush's columns and how to type them (iterated:
# (key, new value, old value, record context) per entry, each entry's record context made current).
FlushBatchListener = Callable[[FlushedBatch], None]


class WritesThroughPutStore(WrappedBytesStore):
    """A layer that sees every write in its own `get` and `put` (the record cache, the TTL index): the
    compound writes are made of those two, not delegated, so none of them bypasses the layer."""

    def put_if_absent(self, key: bytes, value: bytes | None) -> bytes | None:
        existing = self.get(key)
        if existing is None:
            self.put(key, value)
        return existing

    def put_all(self, entries: list[tuple[bytes, bytes | None]]) -> None:
        for key, value in entries:
            self.put(key, value)

    def delete(self, key: bytes) -> bytes | None:
        old = self.get(key)
        self.put(key, None)
        return old


class CachingKeyValueStore(WritesThroughPutStore):
    """Buffers writes in the thread's record cache; dirty entries reach the inner store (and the flush
    listener, which forwards them downstream) on commit or eviction."""

    def __init__(self, inner: KeyValueBytesStore) -> None:
        super().__init__(inner)
        self._context: StoreContext | None = None
        self._cache: RecordCache | None = None
        self._namespace = ""
        self._listener: BytesFlushListener | None = None
        self._batch_listener: BytesFlushBatchListener | None = None
        self._send_old_values = False
        # windowed stores say which keys their segmented store would still serve: an expired key's old
        # value reads as absent on flush, as Java's underlying window/session store returns null for it
        self.underlying_live: Callable[[bytes], bool] | None = None
        # The flush of a logged store writes its entries in one batch (`_flush_batched`); False keeps
        # the per-entry loop, the reference the tests compare it with.
        self.batched_flush = True

    def init(self, context: StoreContext, root: StateStore) -> None:
        self.inner.init(context, root)
        self._context = context
        # a zero-byte cache is no cache (as in Kafka Streams): updates go straight to the store and
        # downstream, so e.g. a delete of an absent key still forwards its tombstone
        cache = context.cache
        self._cache = cache if cache is not None and cache.max_bytes > 0 else None
        self._namespace = f"{context.task_id}-{self.name}"
        if self._cache is not None:
            self._cache.add_dirty_entry_flush_listener(self._namespace, self._flush_entries)

    def set_flush_listener(
        self,
        listener: BytesFlushListener,
        send_old_values: bool,
        batch_listener: BytesFlushBatchListener | None = None,
    ) -> bool:
        """`batch_listener`, when given, receives a batched flush's entries in one call instead of
        `listener` per entry (the same entries, in the same order, each under its record context)."""
        self._listener = listener
        self._batch_listener = batch_listener
        self._send_old_values = send_old_values
        return self._cache is not None

    def _flush_entries(self, entries: DirtyEntries) -> None:
        if type(self.inner) is ChangeLoggingKeyValueBytesStore and self.batched_flush:
            self._flush_batched(entries, self.inner)
            return
        context = self._context
        assert context is not None
        previous = context.record_context()
        try:
            for key, entry in entries:
                context.set_record_context(entry.context)
                if self._listener is None:
                    self.inner.put(key, entry.value)
                    continue
                wanted = entry.value is None or self._send_old_values
                live = self.underlying_live is None or self.underlying_live(key)
                old = self.inner.get(key) if wanted and live else None
                if entry.value is None and old is None:
                    # Java's caching stores skip a delete of a key the inner store never held: nothing
                    # to write, and no tombstone downstream for a row that was never emitted
                    continue
                self.inner.put(key, entry.value)
                self._listener(key, entry.value, old if self._send_old_values else None, entry.context)
        except BaseException:
            context.flush_failed(context.record_context())
            raise
        finally:
            context.set_record_context(previous)

    def _flush_batched(self, entries: DirtyEntries, logged: ChangeLoggingKeyValueBytesStore) -> None:
        """`_flush_entries` of a logged store with the writes batched: the old values read first (the
        keys of a flush are distinct, so no write of this flush changes another's read), every write and
        changelog record in one `put_all_logged`, then the records downstream, each under its entry's
        record context. The same store contents, changelog records and downstream records, in the same
        order per topic; a past-the-cache workload (every update a new key, so one flushed entry per
        update) pays one RocksDB write batch per flush instead of a write per entry."""
        context = self._context
        assert context is not None
        listener, send_old = self._listener, self._send_old_values
        cache = self._cache
        assert cache is not None
        # as `_flush_entries`: old values read from the store below, no write and no tombstone for a
        # delete of a key never held
        read_old = self.inner.get if listener is not None else None
        writes, olds, decodeds = cache.split_flush(entries, read_old, send_old, self.underlying_live)
        if not writes:
            return
        logged.put_all_logged(writes)
        if listener is None:
            return
        previous = context.record_context()
        try:
            if self._batch_listener is not None:
                self._batch_listener(writes, olds, decodeds)
                return
            for (key, value, record_context), old in zip(writes, olds, strict=True):
                context.set_record_context(record_context)
                listener(key, value, old, record_context)
        except BaseException:
            context.flush_failed(context.record_context())
            raise
        finally:
            context.set_record_context(previous)

    def _put_cached(self, key: bytes, value: bytes | None, decoded: object = NOT_DECODED) -> None:
        assert self._cache is not None and self._context is not None
        self._cache.put(self._namespace, key, value, True, self._context.record_context(), decoded)

    @property
    def caching(self) -> bool:
        return self._cache is not None

    def holds(self, key: bytes) -> bool:
        """Whether the record cache holds a live entry for the key (windowed stores' expired reads)."""
        return self._cache is not None and self._cache.holds(self._namespace, key)

    def cache_binding(self) -> tuple[RecordCache, str]:
        """The thread cache and this store's namespace in it (caching on only): the typed layer reads and
        writes decoded entries through it directly, two Python frames less per get and put."""
        assert self._cache is not None
        return self._cache, self._namespace

    def put_decoded(self, key: bytes, value: bytes | None, decoded: object) -> None:
        """`put` that also remembers the typed value the bytes decode to (caching on only)."""
        cache: Any = self._cache
        context: Any = self._context
        cache.put(self._namespace, key, value, True, context.record_context(), decoded)

    def get(self, key: bytes) -> bytes | None:
        cache = self._cache
        if cache is None:
            return self.inner.get(key)
        entry = cache.get(self._namespace, key)
        if entry is not None:
            return entry.value
        return self.inner.get(key)

    def put(self, key: bytes, value: bytes | None) -> None:
        if self._cache is None:
            self.inner.put(key, value)
        else:
            self._put_cached(key, value)

    def _cached_range(self, from_key: bytes | None, to_key: bytes | None) -> list[tuple[bytes, bytes | None]]:
        if self._cache is None:
            return []
        return [(k, e.value) for k, e in self._cache.sorted_entries(self._namespace, from_key, to_key)]

    def range(self, from_key: bytes | None, to_key: bytes | None) -> BytesIterator:
        if from_key is not None and to_key is not None and from_key > to_key:
            return iter(())
        return overlay(self._cached_range(from_key, to_key), self.inner.range(from_key, to_key), False)

    def reverse_range(self, from_key: bytes | None, to_key: bytes | None) -> BytesIterator:
        if from_key is not None and to_key is not None and from_key > to_key:
            return iter(())
        cached = list(reversed(self._cached_range(from_key, to_key)))
        return overlay(cached, self.inner.reverse_range(from_key, to_key), True)

    def all(self) -> BytesIterator:
        return self.range(None, None)

    def reverse_all(self) -> BytesIterator:
        return self.reverse_range(None, None)

    def prefix_scan(self, prefix: bytes) -> BytesIterator:
        upper = prefix_upper_bound(prefix)
        return (kv for kv in self.range(prefix, None) if upper is None or kv[0] < upper)

    def flush(self) -> None:
        if self._cache is not None:
            self._cache.flush(self._namespace)
        self.inner.flush()

    def close(self) -> None:
        if self._cache is not None:
            self._cache.flush(self._namespace)
            self._cache.close(self._namespace)
        self.inner.close()

    def delete_below_cache(self, key: bytes) -> None:
        """Delete the key from the store below (logged there) and drop its cache entry unflushed: an
        expired entry (kappaflow.state.ttl) leaves without passing the flush listener, which would
        forward it downstream whether or not its expiry is to be forwarded."""
        if self._cache is not None:
            self._cache.drop(self._namespace, key)
        self.inner.delete(key)

    def discard(self) -> None:
        """Drop the cached writes without flushing them (a dirty close): they belong to a transaction
        that will not commit, so they must neither be forwarded nor logged."""
        if self._cache is not None:
            self._cache.close(self._namespace)


class MeteredKeyValueStore(MeteredStoreBase, Generic[K, V]):
    """The typed store processors and queries see: serdes at the boundary, counters in the metrics."""

    __slots__ = (
        "_caching",
        "_context",
        "_labels",
        "_metrics",
        "_namespace",
        "_native_named",
        "_thread_cache",
        "deletes",
        "gets",
        "puts",
        "scans",
    )

    def __init__(
        self, inner: KeyValueBytesStore, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None
    ):
        super().__init__(inner, key_serde, value_serde)
        # plain integer counters on the hot path; published to the metrics registry on flush
        self.gets = 0
        self.puts = 0
        self.deletes = 0
        self.scans = 0
        self._metrics: Any = None
        self._labels: dict[str, str] = {}
        # the caching layer right below, when there is one and the thread has a cache: get/put then
        # keep decoded immutable values in the cache entries (CacheEntry.decoded)
        self._caching: CachingKeyValueStore | None = None
        self._thread_cache: RecordCache | None = None
        self._namespace = ""
        # the native cache's namespace: the native aggregation counts this store's gets and puts there
        self._native_named: Any = None
        self._context: StoreContext | None = None

    def init(self, context: StoreContext, root: StateStore | None = None) -> None:
        self.key_serde, self.value_serde = self.resolve_serdes(context)
        self._topic = context.changelog_topic(self.name)
        self._metrics = context.metrics
        self._labels = {"store": self.name, "task": str(context.task_id)}
        self.inner.init(context, root or self)
        inner = self.inner
        self._caching = inner if isinstance(inner, CachingKeyValueStore) and inner.caching else None
        if self._caching is not None:
            self._thread_cache, self._namespace = self._caching.cache_binding()
            if not isinstance(self._thread_cache, ThreadCache):
                self._native_named = self._thread_cache.named(self._namespace)  # type: ignore[attr-defined]
        self._context = context

    def flush(self) -> None:
        self.inner.flush()
        self.publish_metrics()

    def publish_metrics(self) -> None:
        if self._metrics is None:
            return
        gets, puts, named = self.gets, self.puts, self._native_named
        if named is not None:
            gets, puts = gets + named.gets, puts + named.puts
        for name, value in (
            ("state-store-get-total", gets),
            ("state-store-put-total", puts),
            ("state-store-delete-total", self.deletes),
            ("state-store-scan-total", self.scans),
        ):
            self._metrics.set_counter(name, float(value), **self._labels)

    def _v(self, value: V | None) -> bytes | None:
        return self.value_serde.serialize(self._topic, value)  # type: ignore[union-attr]

    def _dv(self, raw: bytes | None) -> V | None:
        return self.value_serde.deserialize(self._topic, raw)  # type: ignore[union-attr]

    def _pairs(self, it: BytesIterator) -> Iterator[tuple[K, V]]:
        for k, v in it:
            yield self._dk(k), self._dv(v)  # type: ignore[misc]

    def get(self, key: K) -> V | None:
        self.gets += 1
        raw_key: bytes
        if key is self.last_key:
            raw_key = self.last_raw_key
        elif self._utf8_keys and type(key) is str:  # _k inlined for String keys
            text: Any = key
            raw_key = self.last_raw_key = text.encode()
            self.last_key = text
        else:
            raw_key = self._k(key)
        caching = self._caching
        if caching is None:
            return self._dv(self.inner.get(raw_key))
        entry = self._thread_cache.get(self._namespace, raw_key)  # type: ignore[union-attr]
        if entry is None:
            return self._dv(caching.inner.get(raw_key))
        decoded = entry.decoded
        if decoded is NOT_DECODED:
            return self._dv(entry.value)
        return decoded  # type: ignore[return-value]

    def put(self, key: K, value: V | None) -> None:
        self.puts += 1
        value_serde: Any = self.value_serde
        raw_value = value_serde.serialize(self._topic, value)
        # an aggregation puts the key it just read: its bytes are remembered (metered.IMMUTABLE_KEY_TYPES)
        raw_key = self.last_raw_key if key is self.last_key else self._k(key)
        caching = self._caching
        if caching is None:
            self.inner.put(raw_key, raw_value)
        elif value_serde.decodes_to_itself(value):
            # CachingKeyValueStore.put_decoded, without its frame
            context: Any = self._context
            cache: Any = self._thread_cache
            cache.put(self._namespace, raw_key, raw_value, True, context.record_context(), value)
        else:
            caching.put(raw_key, raw_value)

    def cached_binding(self) -> CachedStoreBinding | None:
        """What the native aggregation reads and writes this store through, caching on in the native
        record cache only (None without, or with the Python `ThreadCache`): the typed store's serdes,
        the store below the cache, and the cache's namespace."""
        caching, cache, context = self._caching, self._thread_cache, self._context
        if caching is None or cache is None or context is None or self._native_named is None:
            return None
        value_serde: Any = self.value_serde
        return CachedStoreBinding(
            context=context,
            cache=cache,
            namespace=self._namespace,
            topic=self._topic,
            utf8_keys=self._utf8_keys,
            serialize_key=self._k,
            deserialize=value_serde.deserialize,
            inner_get=_reading_layer(caching.inner).get,
            serialize=value_serde.serialize,
            decodes_to_itself=value_serde.decodes_to_itself,
            # timestamped Long values (counts): packed as ValueAndTimestampSerde would, without its calls
            packs_longs=type(value_serde) is ValueAndTimestampSerde and value_serde.packs_longs,
            caching_put=caching.put,
        )

    def put_if_absent(self, key: K, value: V | None) -> V | None:
        self.puts += 1
        return self._dv(self.inner.put_if_absent(self._k(key), self._v(value)))

    def put_all(self, entries: list[tuple[K, V | None]]) -> None:
        self.puts += len(entries)
        self.inner.put_all([(self._k(k), self._v(v)) for k, v in entries])

    def delete(self, key: K) -> V | None:
        self.deletes += 1
        return self._dv(self.inner.delete(self._k(key)))

    def range(self, from_key: K | None, to_key: K | None) -> Iterator[tuple[K, V]]:
        self.scans += 1
        lo = None if from_key is None else self._k(from_key)
        hi = None if to_key is None else self._k(to_key)
        return self._pairs(self.inner.range(lo, hi))

    def reverse_range(self, from_key: K | None, to_key: K | None) -> Iterator[tuple[K, V]]:
        lo = None if from_key is None else self._k(from_key)
        hi = None if to_key is None else self._k(to_key)
        return self._pairs(self.inner.reverse_range(lo, hi))

    def all(self) -> Iterator[tuple[K, V]]:
        self.scans += 1
        return self._pairs(self.inner.all())

    def reverse_all(self) -> Iterator[tuple[K, V]]:
        return self._pairs(self.inner.reverse_all())

    def prefix_scan(self, prefix: Any, prefix_key_serde: Serde[Any]) -> Iterator[tuple[K, V]]:
        raw = prefix_key_serde.serialize(self._topic, prefix)
        assert raw is not None
        return self._pairs(self.inner.prefix_scan(raw))

    def approximate_num_entries(self) -> int:
        return self.inner.approximate_num_entries()

    def set_flush_listener(
        self,
        listener: Callable[[K, V | None, V | None, RecordContext], None],
        send_old_values: bool,
        batch_listener: FlushBatchListener | None = None,
    ) -> bool:
        """Called by DSL processors: with caching, updates are forwarded when flushed, not when written.
        Returns False when the store has no cache, so the processor must forward immediately.
        `batch_listener` takes a logged store's batched flush in one call (past the record cache every
        update is a flushed entry: one Python frame per flush instead of two per entry)."""
        caching = find_layer(self.inner, CachingKeyValueStore)

        def on_flush(key: bytes, new: bytes | None, old: bytes | None, context: RecordContext) -> None:
            listener(self._dk(key), self._dv(new), self._dv(old), context)

        def on_flush_batch(
            writes: list[tuple[bytes, bytes | None, RecordContext]],
            olds: list[bytes | None],
            decodeds: list[object],
        ) -> None:
            assert batch_listener is not None and self._context is not None
            key_serde: Any = self.key_serde
            value_serde: Any = self.value_serde
            batch_listener(
                FlushedBatch(
                    writes,
                    olds,
                    decodeds,
                    self._topic,
                    self._utf8_keys,
                    key_serde.deserialize,
                    value_serde.deserialize,
                    self._context.set_record_context,
                )
            )

        expiring: Any = self.inner
        while expiring is not None and not isinstance(expiring, ExpiryForwarding):
            expiring = getattr(expiring, "inner", None)
        if expiring is not None:  # a store with a TTL tells the forwarder of expired entries
            expiring.set_expiry_listener(on_flush, send_old_values)
        if caching is None:
            return False
        batched = on_flush_batch if batch_listener is not None else None
        return caching.set_flush_listener(on_flush, send_old_values, batched)


def _reading_layer(store: KeyValueBytesStore) -> KeyValueBytesStore:
    """The layer whose `get` answers for `store`: past the layers that only delegate `get` (the
    change-logging one), so the aggregation's read of a key the cache misses skips their frames."""
    while isinstance(store, WrappedBytesStore) and type(store).get is WrappedBytesStore.get:
        store = store.inner
    return store


L = TypeVar("L")


def find_layer(store: object, layer: type[L]) -> L | None:
    """The first layer of type `layer` from `store` inward, or None."""
    current: object | None = store
    while current is not None:
        if isinstance(current, layer):
            return current
        current = getattr(current, "inner", None)
    return None
