"""The record cache's native twin (`kappaflow_native.ThreadCache`) against the Python `ThreadCache`: the
same operations, in any order and at any bound, give the same reads, flushes (batches, their order, the
entries' fields), evictions, sizes and counters; listeners that write through the cache included."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kappaflow.api.record import Headers
from kappaflow.state.api import RecordContext
from kappaflow.state.cache import _ENTRY_OVERHEAD, NOT_DECODED, RecordCache, ThreadCache
from kappaflow.tasks.native import new_thread_cache
from tests.native_support import require_native_core

pytestmark = pytest.mark.native_core  # compares the native core with the Python paths

NAMESPACES = ["0_0-a", "0_0-b"]
keys = st.sampled_from([b"k", b"kk", b"a", b"b", b"zzzz", b"m"])
operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"),
            st.sampled_from(NAMESPACES),
            keys,
            st.one_of(st.none(), st.binary(max_size=40)),
            st.booleans(),
            st.sampled_from(["in", "topic-x"]),
        ),
        st.tuples(st.sampled_from(["get", "holds", "drop"]), st.sampled_from(NAMESPACES), keys),
        st.tuples(st.sampled_from(["flush", "close"]), st.sampled_from(NAMESPACES)),
        st.tuples(
            st.just("range"),
            st.sampled_from(NAMESPACES),
            st.one_of(st.none(), keys),
            st.one_of(st.none(), keys),
        ),
    ),
    max_size=80,
)


def entry_fields(entry: Any) -> tuple[Any, ...] | None:
    if entry is None:
        return None
    decoded = "not-decoded" if entry.decoded is NOT_DECODED else entry.decoded
    return (entry.value, entry.dirty, entry.context.offset, entry.size, decoded)


def run(cache: RecordCache, ops: list[tuple[Any, ...]], rewrite: bool, bound: int) -> list[Any]:
    """Everything observable of `cache` under `ops`: each read's result, each flushed batch, the counters
    after each step. With `rewrite` a listener writes a flushed key back (clean) through the cache."""
    seen: list[Any] = []

    def listener(namespace: str) -> Any:
        def flushed(batch: list[tuple[bytes, Any]]) -> None:
            seen.append(("flushed", namespace, [(key, entry_fields(entry)) for key, entry in batch]))
            if rewrite and batch and batch[0][0] == b"k":  # a write through the cache while it flushes
                cache.put(namespace, b"m", b"re", False, RecordContext(0, "in", 0, -1, Headers()))

        return flushed

    for namespace in NAMESPACES:
        cache.add_dirty_entry_flush_listener(namespace, listener(namespace))
    for offset, op in enumerate(ops, 1):
        match op:
            case ("put", namespace, key, value, dirty, topic):
                context = RecordContext(offset, topic, 0, offset, Headers())
                decoded = offset if value is not None and offset % 2 else NOT_DECODED
                cache.put(namespace, key, value, dirty, context, decoded)
            case ("get", namespace, key):
                seen.append(entry_fields(cache.get(namespace, key)))
            case ("holds", namespace, key):
                seen.append(cache.holds(namespace, key))
            case ("drop", namespace, key):
                cache.drop(namespace, key)
            case ("flush", namespace):
                cache.flush(namespace)
            case ("close", namespace):
                cache.close(namespace)
                cache.add_dirty_entry_flush_listener(namespace, listener(namespace))
            case ("range", namespace, lo, hi):
                pairs = cache.sorted_entries(namespace, lo, hi)
                seen.append([(key, entry_fields(entry)) for key, entry in pairs])
        seen.append((cache.size_bytes, cache.hits, cache.misses, cache.evictions))
        held = sum(entry.size for ns in NAMESPACES for _, entry in cache.sorted_entries(ns, None, None))
        assert cache.size_bytes == held, "the total is what the named caches hold"
        assert bound == 0 or cache.size_bytes <= bound or rewrite
    return seen


@settings(max_examples=200, deadline=None)
@given(operations, st.sampled_from([0, 1, 520, 1100, 2000, 1 << 20]), st.booleans())
def test_the_native_cache_behaves_as_the_python_one(
    ops: list[tuple[Any, ...]], bound: int, rewrite: bool
) -> None:
    core = require_native_core()
    native = core.ThreadCache(bound, NOT_DECODED, _ENTRY_OVERHEAD)
    assert run(native, ops, rewrite, bound) == run(ThreadCache(bound), ops, rewrite, bound)


def test_evicting_a_dirty_entry_flushes_its_whole_cache_in_last_written_order() -> None:
    """Kafka Streams' eviction: the eldest entry is dirty, so every dirty entry of its named cache is
    flushed first (in the order last written, not LRU order), then the eldest leaves."""
    require_native_core()
    cache = new_thread_cache(3 * (_ENTRY_OVERHEAD + 3), enabled=True)
    batches: list[list[bytes]] = []
    cache.add_dirty_entry_flush_listener("ns", lambda batch: batches.append([k for k, _ in batch]))
    context = RecordContext(0, "in", 0, 0, Headers())
    for key in (b"a", b"b", b"c"):
        cache.put("ns", key, None, True, context)
    cache.put("ns", b"a", None, True, context)  # a is now the last written and the most recent
    assert cache.get("ns", b"b") is not None  # b: the most recent, still dirty
    cache.put("ns", b"d", None, True, context)  # over the bound: c is the eldest, and dirty
    assert batches == [[b"b", b"c", b"a", b"d"]]
    assert cache.evictions == 1 and not cache.holds("ns", b"c") and cache.get("ns", b"c") is None
    assert (cache.hits, cache.misses) == (1, 1)


def test_the_python_cache_keeps_its_total_when_a_flush_writes_through_it() -> None:
    """Evicting a dirty entry flushes, and a listener writing through the cache may evict meanwhile: the
    total must be what is left, not the total read before the flush minus the eldest."""
    ops: list[tuple[Any, ...]] = [("put", "0_0-a", b"k", None, True, "in")]
    cache = ThreadCache(0)
    run(cache, ops, True, 0)
    assert cache.size_bytes == 0 and cache.evictions == 3


def test_the_factory_keeps_the_python_cache_when_the_core_is_off() -> None:
    assert type(new_thread_cache(10, enabled=False)) is ThreadCache
