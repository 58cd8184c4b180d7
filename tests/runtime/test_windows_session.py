"""Session windows: merging, tombstones for merged sessions, grace and late drops, restart."""

from __future__ import annotations

import pytest

from kappaflow import Materialized, StreamsBuilder, Window, Windowed
from kappaflow.api.serdes import Long, String
from kappaflow.api.windowed_serdes import SessionWindowedSerde
from kappaflow.dsl.windows import SessionWindows
from kappaflow.testing import TopologyTestDriver

CFG = {"default.key.serde": "String", "default.value.serde": "String"}


def topology(store_type: str = "rocksdb", caching: bool = False):
    builder = StreamsBuilder()
    mat = Materialized.as_("sessions").with_store_type(store_type)  # type: ignore[arg-type]
    mat = mat.with_caching_enabled() if caching else mat.with_caching_disabled()
    (
        builder.stream("input")
        .group_by_key()
        .windowed_by(SessionWindows.of_inactivity_gap_and_grace(5, 10))
        .count(mat)
        .to_stream()
        .to("output", value_serde=Long())
    )
    return builder.build()


def S(key: str, start: int, end: int) -> Windowed[str]:
    return Windowed(key, Window(start, end))


def read(driver):
    topic = driver.create_output_topic("output", SessionWindowedSerde(String()), Long())
    return [(r.key, r.value, r.timestamp) for r in topic.read_records_to_list()]


@pytest.mark.parametrize("store_type", ["rocksdb", "memory"])
def test_sessions_merge_and_retract(store_type: str) -> None:
    with TopologyTestDriver(topology(store_type), CFG) as driver:
        inp = driver.create_input_topic("input")
        for ts in (0, 3, 20, 10, 14, 16):
            inp.pipe_input("a", "x", ts)
        inp.pipe_input("b", "x", 1)  # late: session [1,1] ends before stream time 20 - grace 10
        assert read(driver) == [
            (S("a", 0, 0), 1, 0),
            (S("a", 0, 0), None, 0),
            (S("a", 0, 3), 2, 3),
            (S("a", 20, 20), 1, 20),
            (S("a", 10, 10), 1, 10),  # out of order, within grace
            (S("a", 10, 10), None, 10),
            (S("a", 10, 14), 2, 14),
            (S("a", 10, 14), None, 14),  # bridging record merges [10,14] and [20,20]
            (S("a", 20, 20), None, 20),
            (S("a", 10, 20), 4, 20),
        ]
        assert driver.metrics().counter(
            "dropped-records-total", reason="late", task="0_0", node="KSTREAM-AGGREGATE-0000000001"
        ) == 1  # fmt: skip
        store = driver.get_session_store("sessions")
        # retention is gap + grace = 15: at stream time 20 the session [0,3] has expired
        assert store.fetch("a") == [(S("a", 10, 20), 4)]
        assert store.find_sessions("a", 4, 30) == [(S("a", 10, 20), 4)]
        assert store.find_sessions("a", 4, 9) == []
        assert store.fetch_session("a", 10, 20) == 4
        assert store.fetch_session("a", 0, 3) is None


def test_session_store_restores_after_restart() -> None:
    topo = topology("memory")
    first = TopologyTestDriver(topo, CFG)
    inp = first.create_input_topic("input")
    inp.pipe_input("a", "x", 0)
    inp.pipe_input("a", "x", 2)
    first.close()
    second = TopologyTestDriver(topo, CFG, restore_from=first)
    try:
        assert second.get_session_store("sessions").fetch("a") == [(S("a", 0, 2), 2)]
        second.create_input_topic("input").pipe_input("a", "x", 4)
        assert read(second) == [(S("a", 0, 2), None, 2), (S("a", 0, 4), 3, 4)]
    finally:
        second.close()


def test_session_reduce_with_caching() -> None:
    builder = StreamsBuilder()
    (
        builder.stream("input")
        .group_by_key()
        .windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(5))
        .reduce(lambda a, b: a + b, Materialized.as_("r").with_caching_enabled())
        .to_stream()
        .to("output")
    )
    with TopologyTestDriver(builder.build(), dict(CFG, **{"statestore.cache.max.bytes": 1 << 20})) as driver:
        inp = driver.create_input_topic("input")
        inp.pipe_input("a", "x", 0)
        inp.pipe_input("a", "y", 2)
        out = driver.create_output_topic("output", SessionWindowedSerde(String()), String())
        # the driver commits per record: the cache flushes the tombstone and the new session together
        assert [(r.key, r.value) for r in out.read_records_to_list()] == [
            (S("a", 0, 0), "x"),
            (S("a", 0, 0), None),
            (S("a", 0, 2), "xy"),
        ]
