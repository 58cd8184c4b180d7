"""Key-value stores: memory and RocksDB behave identically (property-tested); cache and changelog layers."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kappaflow.api.config import StreamsConfig
from kappaflow.api.metrics import Metrics
from kappaflow.api.processor import TaskId
from kappaflow.api.record import Headers
from kappaflow.api.serdes import Long, String
from kappaflow.state.api import RecordContext
from kappaflow.state.cache import RecordCache, ThreadCache
from kappaflow.state.kv_bytes import InMemoryKeyValueBytesStore, RocksDBKeyValueBytesStore
from kappaflow.state.kv_layers import (
    CachingKeyValueStore,
    ChangeLoggingKeyValueBytesStore,
    MeteredKeyValueStore,
)
from kappaflow.state.kv_wrapped import log_writes
from kappaflow.state.timestamped import ValueAndTimestamp, ValueAndTimestampSerde
from kappaflow.tasks.native import installed_core
from tests.native_support import require_native_core


class FakeStoreContext:
    """A minimal StoreContext: records changelog writes and restore registrations."""

    def __init__(self, state_dir: Path, cache_bytes: int | None = None, native: bool = False) -> None:
        self.application_id = "app"
        self.task_id = TaskId(0, 0)
        self.app_config = StreamsConfig({"application.id": "app"})
        self.metrics = Metrics()
        self.cache = record_cache(cache_bytes, native) if cache_bytes is not None else None
        self._dir = state_dir
        self.logged: list[tuple[str, bytes, bytes | None, int]] = []
        self.registered: list[Any] = []
        self.current = RecordContext(7, "in", 0, 3, Headers())

    def state_dir(self) -> Path:
        return self._dir

    def changelog_topic(self, store_name: str) -> str:
        return f"app-{store_name}-changelog"

    def log_change(
        self, store_name: str, key: bytes, value: bytes | None, timestamp: int, headers: Any = None
    ) -> None:
        self.logged.append((store_name, key, value, timestamp))

    def log_flushed(self, store_name: str, writes: Any, timestamped: bool) -> None:
        def send(topic: str, key: bytes, value: bytes | None, timestamp: int, partition: int) -> None:
            self.logged.append((store_name, key, value, timestamp))

        log_writes(send, self.changelog_topic(store_name), 0, writes, timestamped)

    def record_context(self) -> RecordContext:
        return self.current

    def set_record_context(self, context: RecordContext) -> None:
        self.current = context

    def flush_failed(self, record: RecordContext) -> None:
        self.failed_flush = record

    def register_store(self, store: Any, restore: Any, restore_messages: Any = None) -> None:
        self.registered.append((store, restore))


def record_cache(max_bytes: int, native: bool) -> RecordCache:
    """The Python `ThreadCache`, or its native twin (the test skipped without the core): the cache tests
    below run against both."""
    if native:
        from kappaflow.state.cache import _ENTRY_OVERHEAD, NOT_DECODED

        return require_native_core().ThreadCache(max_bytes, NOT_DECODED, _ENTRY_OVERHEAD)
    return ThreadCache(max_bytes)


BOTH_CACHES = pytest.mark.parametrize(
    "native",
    [
        pytest.param(False, id="python-cache"),
        pytest.param(True, id="native-cache", marks=pytest.mark.native_core),
    ],
)


keys = st.binary(min_size=1, max_size=4)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), keys, st.binary(max_size=4)),
        st.tuples(st.just("delete"), keys, st.none()),
        st.tuples(st.just("put_if_absent"), keys, st.binary(max_size=4)),
        st.tuples(st.just("put_none"), keys, st.none()),
    ),
    max_size=40,
)


def _apply(store: Any, operations: list[tuple[str, bytes, bytes | None]]) -> list[Any]:
    results = []
    for op, key, value in operations:
        if op == "put":
            results.append(store.put(key, value))
        elif op == "put_none":
            results.append(store.put(key, None))
        elif op == "delete":
            results.append(store.delete(key))
        else:
            results.append(store.put_if_absent(key, value))
    return results


def _queries(store: Any, lo: bytes, hi: bytes, prefix: bytes) -> dict[str, Any]:
    return {
        "all": list(store.all()),
        "reverse_all": list(store.reverse_all()),
        "range": list(store.range(lo, hi)),
        "reverse_range": list(store.reverse_range(lo, hi)),
        "open_lo": list(store.range(None, hi)),
        "open_hi": list(store.reverse_range(lo, None)),
        "prefix": list(store.prefix_scan(prefix)),
        "get": [store.get(k) for k in (lo, hi, prefix)],
        "count": store.approximate_num_entries(),
    }


@settings(max_examples=60, deadline=None)
@given(ops, keys, keys, st.binary(max_size=2))
def test_rocksdb_and_memory_stores_behave_the_same(
    operations: list[tuple[str, bytes, bytes | None]], lo: bytes, hi: bytes, prefix: bytes
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        context = FakeStoreContext(Path(tmp))
        memory = InMemoryKeyValueBytesStore("s")
        rocks = RocksDBKeyValueBytesStore("s")
        memory.init(context, memory)  # type: ignore[arg-type]
        rocks.init(context, rocks)  # type: ignore[arg-type]
        try:
            assert _apply(memory, operations) == _apply(rocks, operations)
            expected = _queries(memory, lo, hi, prefix)
            actual = _queries(rocks, lo, hi, prefix)
            # RocksDB's entry count is an estimate; everything else must be identical
            expected.pop("count")
            actual.pop("count")
            assert actual == expected
        finally:
            rocks.close()


@BOTH_CACHES
@settings(max_examples=40, deadline=None)
@given(ops, keys, keys, st.integers(min_value=0, max_value=400))
def test_caching_layer_reads_like_the_store_under_it(
    native: bool, operations: list[tuple[str, bytes, bytes | None]], lo: bytes, hi: bytes, cache_bytes: int
) -> None:
    """Whatever the cache size (so whatever was evicted when), reads through the cache match a store
    written directly, before and after a flush."""
    with tempfile.TemporaryDirectory() as tmp:
        context = FakeStoreContext(Path(tmp), cache_bytes=cache_bytes, native=native)
        plain = InMemoryKeyValueBytesStore("p")
        plain.init(context, plain)  # type: ignore[arg-type]
        cached = CachingKeyValueStore(InMemoryKeyValueBytesStore("c"))
        cached.init(context, cached)  # type: ignore[arg-type]
        _apply(plain, operations)
        _apply(cached, operations)
        assert _queries(cached, lo, hi, b"")["range"] == _queries(plain, lo, hi, b"")["range"]
        assert list(cached.all()) == list(plain.all())
        cached.flush()
        assert list(cached.inner.all()) == list(plain.all())


def test_rocksdb_keeps_data_and_checkpoint_across_reopen(tmp_path: Path) -> None:
    context = FakeStoreContext(tmp_path)
    store = RocksDBKeyValueBytesStore("s")
    store.init(context, store)  # type: ignore[arg-type]
    store.put(b"k", b"v")
    store.checkpoint(42)
    store.close()
    reopened = RocksDBKeyValueBytesStore("s")
    reopened.init(context, reopened)  # type: ignore[arg-type]
    try:
        assert reopened.get(b"k") == b"v"
        assert reopened.committed_changelog_offset() == 42
    finally:
        reopened.close()


def test_change_logging_writes_every_change_with_the_record_time(tmp_path: Path) -> None:
    context = FakeStoreContext(tmp_path)
    store = ChangeLoggingKeyValueBytesStore(InMemoryKeyValueBytesStore("s"))
    store.init(context, store)  # type: ignore[arg-type]
    store.put(b"a", b"1")
    store.put_if_absent(b"a", b"2")  # no change, no log
    store.delete(b"a")
    assert context.logged == [("s", b"a", b"1", 7), ("s", b"a", None, 7)]


def test_timestamped_changelog_carries_plain_value_and_stored_timestamp(tmp_path: Path) -> None:
    context = FakeStoreContext(tmp_path)
    store = ChangeLoggingKeyValueBytesStore(
        InMemoryKeyValueBytesStore("s", timestamped=True), timestamped=True
    )
    store.init(context, store)  # type: ignore[arg-type]
    store.put(b"a", (99).to_bytes(8, "big") + b"value")
    assert context.logged == [("s", b"a", b"value", 99)]
    restored = InMemoryKeyValueBytesStore("r", timestamped=True)
    restored.restore_batch([(b"a", b"value", 99)])
    assert restored.get(b"a") == (99).to_bytes(8, "big") + b"value"


@BOTH_CACHES
def test_cache_flushes_dirty_entries_in_write_order_with_their_context(tmp_path: Path, native: bool) -> None:
    context = FakeStoreContext(tmp_path, cache_bytes=10_000, native=native)
    store = CachingKeyValueStore(ChangeLoggingKeyValueBytesStore(InMemoryKeyValueBytesStore("s")))
    store.init(context, store)  # type: ignore[arg-type]
    flushed: list[tuple[bytes, bytes | None, bytes | None, int]] = []
    store.set_flush_listener(lambda k, new, old, rc: flushed.append((k, new, old, rc.timestamp)), True)
    store.put(b"b", b"1")
    context.current = RecordContext(8, "in", 0, 4, Headers())
    store.put(b"a", b"1")
    store.put(b"b", b"2")
    assert context.logged == []  # nothing reaches the changelog before a flush
    store.flush()
    assert flushed == [(b"a", b"1", None, 8), (b"b", b"2", None, 8)]
    assert [(k, v) for _, k, v, _ in context.logged] == [(b"a", b"1"), (b"b", b"2")]
    store.put(b"a", b"3")
    store.flush()
    assert flushed[-1] == (b"a", b"3", b"1", 8)


@BOTH_CACHES
def test_cache_eviction_flushes_when_over_budget(tmp_path: Path, native: bool) -> None:
    context = FakeStoreContext(tmp_path, cache_bytes=200, native=native)
    store = CachingKeyValueStore(InMemoryKeyValueBytesStore("s"))
    store.init(context, store)  # type: ignore[arg-type]
    flushed: list[bytes] = []
    store.set_flush_listener(lambda k, new, old, rc: flushed.append(k), False)
    for i in range(10):
        store.put(bytes([i]), b"x" * 10)
    assert flushed  # evictions forced flushes long before a commit
    assert context.cache is not None and context.cache.size_bytes <= 200
    assert [store.get(bytes([i])) for i in range(10)] == [b"x" * 10] * 10


def test_cache_accounts_for_the_memory_its_entries_really_hold() -> None:
    """statestore.cache.max.bytes bounds memory: an entry's accounted size is what Python allocates for it
    (key, value, entry, record context, headers, decoded value, dict slots), within 25%."""
    import tracemalloc

    cache = ThreadCache(1 << 40)
    count = 20_000
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(count):
            key, value = f"key-{i:09d}".encode(), (i + 1000).to_bytes(16, "big")
            cache.put("ns", key, value, True, RecordContext(i, "input-topic", 0, i, Headers()), i + 10**6)
        allocated = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert 0.75 <= cache.size_bytes / allocated <= 1.25, (cache.size_bytes, allocated)


def test_metered_store_publishes_operation_counts_on_flush() -> None:
    from kappaflow import Materialized, StreamsBuilder, serdes
    from kappaflow.testing import TopologyTestDriver

    S = serdes.String()
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).group_by_key().count(Materialized.as_("c"))
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("in", S, S).pipe_key_value_list([("a", "1"), ("a", "2")])
        metrics = driver.metrics()
        assert metrics.counter("state-store-put-total", store="c") == 2
        assert metrics.gauge("state-store-put-total", store="c") is None  # a counter, not a gauge
        assert metrics.counter("state-store-get-total", store="c") == 2


typed_ops = st.lists(
    st.tuples(
        st.sampled_from(["put", "delete", "put_if_absent", "put_none", "get"]),
        st.sampled_from(["a", "b", "c", "d"]),
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
    ),
    max_size=60,
)


@BOTH_CACHES
@settings(max_examples=60, deadline=None)
@given(typed_ops, st.integers(min_value=1, max_value=600))  # a 0-byte cache is no cache at all
def test_typed_store_over_the_cache_reads_like_one_without(
    native: bool, operations: list[tuple[str, str, int]], cache_bytes: int
) -> None:
    """The typed layer keeps decoded values in cache entries (CacheEntry.decoded); whatever was evicted
    or flushed when, every read must equal a typed store with no cache at all."""
    from kappaflow import serdes
    from kappaflow.state.kv_layers import MeteredKeyValueStore

    with tempfile.TemporaryDirectory() as tmp:
        context = FakeStoreContext(Path(tmp), cache_bytes=cache_bytes, native=native)
        plain: Any = MeteredKeyValueStore(InMemoryKeyValueBytesStore("p"), serdes.String(), serdes.Long())
        cached: Any = MeteredKeyValueStore(
            CachingKeyValueStore(InMemoryKeyValueBytesStore("c")), serdes.String(), serdes.Long()
        )
        plain.init(context)
        cached.init(context)
        assert cached._caching is not None  # the decoded fast path is what this test is about
        for i, (op, key, value) in enumerate(operations):
            if op == "get":
                assert cached.get(key) == plain.get(key)
            elif op == "put":
                cached.put(key, value)
                plain.put(key, value)
            elif op == "put_none":
                cached.put(key, None)
                plain.put(key, None)
            elif op == "delete":
                assert cached.delete(key) == plain.delete(key)
            else:
                assert cached.put_if_absent(key, value) == plain.put_if_absent(key, value)
            if i % 7 == 6:
                cached.flush()
        assert [cached.get(k) for k in "abcd"] == [plain.get(k) for k in "abcd"]
        assert list(cached.all()) == list(plain.all())


@BOTH_CACHES
def test_cached_store_returns_what_the_serde_decodes_not_the_object_written(
    tmp_path: Path, native: bool
) -> None:
    """Only values a serde says decode to themselves are handed back as written: a serde that
    normalizes, or a mutable value, is read back from its bytes, as without a cache."""
    from kappaflow import serdes
    from kappaflow.state.kv_layers import MeteredKeyValueStore

    class Upper(serdes.String):
        def deserialize(self, topic: str, data: bytes | None) -> str | None:
            return None if data is None else data.decode().upper()

        def decodes_to_itself(self, data: Any) -> bool:
            return False

    context = FakeStoreContext(tmp_path, cache_bytes=10_000, native=native)
    upper: Any = MeteredKeyValueStore(
        CachingKeyValueStore(InMemoryKeyValueBytesStore("u")), serdes.String(), Upper()
    )
    upper.init(context)
    upper.put("k", "abc")
    assert upper.get("k") == "ABC"

    listed: Any = MeteredKeyValueStore(
        CachingKeyValueStore(InMemoryKeyValueBytesStore("l")), serdes.String(), serdes.Json()
    )
    listed.init(context)
    value = [1, 2]
    listed.put("k", value)
    value.append(3)  # mutating the written object must not change the stored aggregate
    first = listed.get("k")
    assert first == [1, 2]
    assert listed.get("k") is not first


CRASHING_WRITER = """
import os, sys
from pathlib import Path
from kappaflow.state.kv_bytes import RocksDBKeyValueBytesStore
from tests.runtime.test_stores import FakeStoreContext

store = RocksDBKeyValueBytesStore("s")
store.init(FakeStoreContext(Path(sys.argv[1])), store)
for i in range(500):
    store.put(b"k%04d" % i, b"v")
store.put_all([(b"k%04d" % i, b"v") for i in range(500, 1000)])
store.flush()
store.checkpoint(1000)
for i in range(1000, 1500):
    store.put(b"k%04d" % i, b"w")
os._exit(0)  # a crash: no close, no flush
"""


def test_a_crash_keeps_every_write_the_checkpoint_counts(tmp_path: Path) -> None:
    """Ordinary writes skip RocksDB's write-ahead log, as in Kafka Streams (the changelog restores what a
    crash loses); what the checkpointed offset counts must have reached SST files before it."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", CRASHING_WRITER, str(tmp_path)], cwd=root, check=True, timeout=60)
    store = RocksDBKeyValueBytesStore("s")
    store.init(FakeStoreContext(tmp_path), store)  # type: ignore[arg-type]
    try:
        assert store.committed_changelog_offset() == 1000
        counted = [k for k, _ in store.range(None, b"k0999")]
        assert counted == [b"k%04d" % i for i in range(1000)]
    finally:
        store.close()


def test_a_clean_close_keeps_writes_made_after_the_last_flush(tmp_path: Path) -> None:
    store = RocksDBKeyValueBytesStore("s")
    store.init(FakeStoreContext(tmp_path), store)  # type: ignore[arg-type]
    store.put(b"k", b"v")
    store.close()
    reopened = RocksDBKeyValueBytesStore("s")
    reopened.init(FakeStoreContext(tmp_path), reopened)  # type: ignore[arg-type]
    try:
        assert reopened.get(b"k") == b"v"
    finally:
        reopened.close()


few_keys = st.sampled_from([b"a", b"b", b"c", b"d", b"e"])  # updates and deletes of keys held before
flush_ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), few_keys, st.binary(max_size=4), st.integers(0, 50)),
        st.tuples(st.just("delete"), few_keys, st.none(), st.integers(0, 50)),
        st.tuples(st.just("flush"), st.just(b""), st.none(), st.just(0)),
    ),
    max_size=60,
)


def _run_flushes(
    batched: bool, operations: list[tuple[str, bytes, bytes | None, int]], send_old: bool, listening: bool,
    timestamped: bool, cache_bytes: int, state_dir: Path, native: bool = False,
) -> tuple[list[Any], list[Any], list[Any]]:  # fmt: skip
    """What a logged, cached store forwards, logs and holds after `operations`, flushed batched or not."""
    context = FakeStoreContext(state_dir, cache_bytes=cache_bytes, native=native)
    below = InMemoryKeyValueBytesStore("s")
    store = CachingKeyValueStore(ChangeLoggingKeyValueBytesStore(below, timestamped=timestamped))
    store.batched_flush = batched
    store.init(context, store)  # type: ignore[arg-type]
    forwarded: list[Any] = []
    if listening:
        store.set_flush_listener(
            lambda k, new, old, rc: forwarded.append((k, new, old, rc.timestamp, context.current.offset)),
            send_old,
        )
    for op, key, value, offset in operations:
        context.current = RecordContext(offset * 3, "in", 0, offset, Headers())
        if op == "flush":
            store.flush()
        elif op == "delete":
            store.delete(key)
        else:
            store.put(key, (offset.to_bytes(8, "big") if timestamped else b"") + (value or b""))
    store.flush()
    assert context.current.offset == (operations[-1][3] if operations else 3)  # restored after a flush
    return forwarded, context.logged, list(below.all())


@settings(max_examples=60, deadline=None)
@given(flush_ops, st.booleans(), st.booleans(), st.booleans(), st.sampled_from([0, 600, 1300, 2000, 1 << 20]))
def test_a_batched_flush_forwards_logs_and_stores_what_the_per_entry_flush_does(
    operations: list[tuple[str, bytes, bytes | None, int]], send_old: bool, listening: bool,
    timestamped: bool, cache_bytes: int,
) -> None:  # fmt: skip
    """The record cache's flush of a logged store writes its entries in one batch (`_flush_batched`):
    the downstream records (each with its entry's record context, set while it is forwarded), the
    changelog records and the store's contents are the per-entry loop's, evictions and deletes included."""
    with tempfile.TemporaryDirectory() as tmp:
        args = (operations, send_old, listening, timestamped, cache_bytes, Path(tmp))
        assert _run_flushes(True, *args) == _run_flushes(False, *args)
        if installed_core() is not None:  # the native record cache: the same, evictions included
            assert _run_flushes(True, *args, native=True) == _run_flushes(True, *args)


typed_ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"), st.sampled_from(["a", "b", "c", "d"]), st.integers(-5, 5), st.integers(0, 50)
        ),
        st.tuples(st.just("delete"), st.sampled_from(["a", "b", "c", "d"]), st.just(0), st.integers(0, 50)),
        st.tuples(st.just("flush"), st.just(""), st.just(0), st.just(0)),
    ),
    max_size=60,
)


def _run_typed_flushes(
    batch: bool,
    operations: list[tuple[str, str, int, int]],
    send_old: bool,
    cache_bytes: int,
    state_dir: Path,
) -> tuple[list[Any], list[Any], list[Any]]:
    """What a typed, cached, logged timestamped store hands its flush listener (and the record context
    current meanwhile), logs and holds, with or without a batch listener."""
    context = FakeStoreContext(state_dir, cache_bytes=cache_bytes)
    below = InMemoryKeyValueBytesStore("s")
    logged = ChangeLoggingKeyValueBytesStore(below, timestamped=True)
    store: MeteredKeyValueStore[str, Any] = MeteredKeyValueStore(
        CachingKeyValueStore(logged), String(), ValueAndTimestampSerde(Long())
    )
    store.init(context, store)  # type: ignore[arg-type]
    forwarded: list[Any] = []

    def listener(key: str, new: Any, old: Any, rc: RecordContext) -> None:
        forwarded.append((key, new, old, rc.timestamp, context.current.offset))

    def batch_listener(entries: Any) -> None:
        for entry in entries:
            listener(*entry)

    store.set_flush_listener(listener, send_old, batch_listener if batch else None)
    for op, key, value, offset in operations:
        context.current = RecordContext(offset * 3, "in", 0, offset, Headers())
        if op == "flush":
            store.flush()
        elif op == "delete":
            store.delete(key)
        else:
            store.put(key, ValueAndTimestamp(value, offset))
    store.flush()
    return forwarded, context.logged, list(below.all())


@settings(max_examples=60, deadline=None)
@given(typed_ops, st.booleans(), st.sampled_from([0, 600, 1300, 1 << 20]))
def test_a_batch_flush_listener_sees_what_the_per_entry_listener_does(
    operations: list[tuple[str, str, int, int]], send_old: bool, cache_bytes: int
) -> None:
    """A typed store's batch flush listener (what the DSL's table forwarder takes) gets the per-entry
    listener's entries in its order, with each entry's record context current while it is handled, new
    values the cache kept decoded equal to the bytes decoded again; the changelog and the store alike."""
    with tempfile.TemporaryDirectory() as tmp:
        args = (operations, send_old, cache_bytes, Path(tmp))
        batched = _run_typed_flushes(True, *args)
        assert batched == _run_typed_flushes(False, *args)
        last = {key: op for op, key, *_ in operations if op != "flush"}
        if cache_bytes == 1 << 20 and "put" in last.values():
            assert batched[0]  # the batch listener ran: a key's last write was forwarded
