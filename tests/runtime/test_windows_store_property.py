"""Property test: the in-memory and RocksDB window stores answer every query identically."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kappaflow import Materialized, StreamsBuilder
from kappaflow.dsl.windows import TimeWindows
from kappaflow.testing import TopologyTestDriver

CFG = {"default.key.serde": "String", "default.value.serde": "String"}
keys = st.sampled_from(["a", "b", "ab", "ba", "a\x00"])
events = st.lists(st.tuples(keys, st.integers(min_value=0, max_value=400)), max_size=25)


def topology(store_type: str):
    builder = StreamsBuilder()
    mat = Materialized.as_("w").with_store_type(store_type).with_caching_disabled()  # type: ignore[arg-type]
    windowed = (
        builder.stream("in").group_by_key().windowed_by(TimeWindows.of_size_and_grace(50, 100).advance_by(25))
    )
    windowed.count(mat)
    return builder.build()


@settings(max_examples=40, deadline=None)
@given(events, st.integers(0, 400), st.integers(0, 400), keys)
def test_memory_and_rocksdb_window_stores_agree(batch, t1, t2, key) -> None:
    lo, hi = min(t1, t2), max(t1, t2)
    answers = []
    for store_type in ("memory", "rocksdb"):
        with TopologyTestDriver(topology(store_type), CFG) as driver:
            inp = driver.create_input_topic("in")
            for k, ts in batch:
                inp.pipe_input(k, "v", ts)
            store = driver.get_window_store("w")
            answers.append(
                (
                    store.fetch(key, lo, hi),
                    store.backward_fetch(key, lo, hi),
                    store.fetch_all(lo, hi),
                    store.backward_fetch_all(lo, hi),
                    store.fetch_range("a", "b", lo, hi),
                    store.all(),
                )
            )
    assert answers[0] == answers[1]
    assert answers[0][0] == model_fetch(batch, key, lo, hi)


def model_fetch(batch, key, lo, hi):
    """Counts per window of the records that were not late, minus windows past retention (150 ms)."""
    windows = TimeWindows.of_size_and_grace(50, 100).advance_by(25)
    counts: dict[tuple[str, int], int] = {}
    stream_time = store_time = -1
    for k, ts in batch:
        stream_time = max(stream_time, ts)
        for start, window in windows.windows_for(ts).items():
            if window.end > stream_time - 100:
                counts[(k, start)] = counts.get((k, start), 0) + 1
                store_time = max(store_time, start)
    return sorted(
        (start, n)
        for (k, start), n in counts.items()
        if k == key and lo <= start <= hi and start > store_time - 150
    )
