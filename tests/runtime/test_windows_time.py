"""Tumbling and hopping windowed aggregations, compared with Kafka Streams' documented results."""

from __future__ import annotations

import pytest

from kappaflow import Materialized, StreamsBuilder, Window, Windowed
from kappaflow.api.serdes import Long, String
from kappaflow.api.windowed_serdes import SessionWindowedSerde, TimeWindowedSerde
from kappaflow.dsl.windows import TimeWindows
from kappaflow.testing import TopologyTestDriver

CFG = {"default.key.serde": "String", "default.value.serde": "String"}


def count_topology(windows: TimeWindows, store_type: str = "rocksdb", caching: bool = False):
    builder = StreamsBuilder()
    mat = Materialized.as_("counts").with_store_type(store_type)  # type: ignore[arg-type]
    mat = mat.with_caching_enabled() if caching else mat.with_caching_disabled()
    (
        builder.stream("input")
        .group_by_key()
        .windowed_by(windows)
        .count(mat)
        .to_stream()
        .to("output", value_serde=Long())
    )
    return builder.build()


def windowed_out(driver: TopologyTestDriver, size: int):
    return driver.create_output_topic("output", TimeWindowedSerde(String(), size), Long())


def records(topic) -> list[tuple[object, object, int]]:
    return [(r.key, r.value, r.timestamp) for r in topic.read_records_to_list()]


def W(key: str, start: int, size: int) -> Windowed[str]:
    return Windowed(key, Window(start, start + size))


@pytest.mark.parametrize("store_type", ["rocksdb", "memory"])
def test_tumbling_count_in_order_out_of_order_and_late(store_type: str) -> None:
    windows = TimeWindows.of_size_and_grace(10, 5)
    with TopologyTestDriver(count_topology(windows, store_type), CFG) as driver:
        inp = driver.create_input_topic("input")
        out = windowed_out(driver, 10)
        inp.pipe_input("a", "1", 1)
        inp.pipe_input("a", "2", 9)
        inp.pipe_input("a", "3", 12)  # next window; stream time 12
        inp.pipe_input("a", "4", 3)  # out of order, window [0,10) closes at 10+5=15 > 12: accepted
        inp.pipe_input("b", "5", 20)  # stream time 20: window [0,10) now closed
        inp.pipe_input("a", "6", 8)  # late: dropped
        inp.pipe_input("a", "7", 11)  # [10,20) still open (20 + 5 > 20)
        expected = [
            (W("a", 0, 10), 1, 1),
            (W("a", 0, 10), 2, 9),
            (W("a", 10, 10), 1, 12),
            (W("a", 0, 10), 3, 9),  # timestamp: max(record 3, aggregate 9)
            (W("b", 20, 10), 1, 20),
            (W("a", 10, 10), 2, 12),
        ]
        assert records(out) == expected
        assert driver.metrics().counter("dropped-records-total", reason="late", task="0_0",
                                        node="KSTREAM-AGGREGATE-0000000001") == 1  # fmt: skip
        store = driver.get_window_store("counts")
        # retention is size + grace = 15: at stream time 20 the window starting at 0 is expired
        assert store.fetch("a", 0, 100) == [(10, 2)]
        assert store.fetch("a", 0) is None
        assert store.fetch("a", 10) == 2
        assert store.fetch_all(0, 100) == [(W("a", 10, 10), 2), (W("b", 20, 10), 1)]
        inp.pipe_input("a", "8", 19)
        assert store.fetch("a", 0, 100) == [(10, 3)]


@pytest.mark.parametrize("store_type", ["rocksdb", "memory"])
def test_window_store_queries(store_type: str) -> None:
    windows = TimeWindows.of_size_and_grace(10, 1000)
    with TopologyTestDriver(count_topology(windows, store_type), CFG) as driver:
        inp = driver.create_input_topic("input")
        for key, ts in [("a", 1), ("a", 12), ("b", 5), ("ab", 25), ("a", 27)]:
            inp.pipe_input(key, "v", ts)
        store = driver.get_window_store("counts")
        assert store.fetch("a", 0, 100) == [(0, 1), (10, 1), (20, 1)]
        assert store.backward_fetch("a", 0, 100) == [(20, 1), (10, 1), (0, 1)]
        assert store.fetch("a", 5, 15) == [(10, 1)]
        assert store.fetch("ab", 0, 100) == [(20, 1)]
        assert store.fetch_range("a", "ab", 0, 15) == [(W("a", 0, 10), 1), (W("a", 10, 10), 1)]
        assert store.fetch_all(0, 100) == [
            (W("a", 0, 10), 1),
            (W("a", 10, 10), 1),
            (W("a", 20, 10), 1),
            (W("ab", 20, 10), 1),
            (W("b", 0, 10), 1),
        ]
        assert store.backward_fetch_all(0, 5) == [(W("b", 0, 10), 1), (W("a", 0, 10), 1)]


def test_hopping_windows_update_every_containing_window() -> None:
    windows = TimeWindows.of_size_with_no_grace(10).advance_by(5)
    with TopologyTestDriver(count_topology(windows), CFG) as driver:
        inp = driver.create_input_topic("input")
        out = windowed_out(driver, 10)
        inp.pipe_input("k", "x", 7)
        inp.pipe_input("k", "y", 12)
        assert records(out) == [
            (W("k", 0, 10), 1, 7),
            (W("k", 5, 10), 1, 7),
            (W("k", 5, 10), 2, 12),
            (W("k", 10, 10), 1, 12),
        ]


def test_windows_for_matches_java() -> None:
    hopping = TimeWindows.of_size_with_no_grace(10).advance_by(3)
    assert sorted(hopping.windows_for(11)) == [3, 6, 9]
    assert sorted(TimeWindows.of_size_with_no_grace(10).windows_for(0)) == [0]
    with pytest.raises(ValueError):
        TimeWindows.of_size_with_no_grace(5).advance_by(6)


def test_caching_collapses_updates_until_commit() -> None:
    windows = TimeWindows.of_size_with_no_grace(100)
    config = dict(CFG, **{"statestore.cache.max.bytes": 10 * 1024 * 1024})
    with TopologyTestDriver(count_topology(windows, caching=True), config) as driver:
        inp = driver.create_input_topic("input")
        out = windowed_out(driver, 100)
        inp.pipe_input("a", "1", 1)
        inp.pipe_input("a", "2", 2)
        # the driver commits after every record, so each record is flushed: one output per record,
        # carrying the flushed record's timestamp (Java's TopologyTestDriver behaves the same)
        assert records(out) == [(W("a", 0, 100), 1, 1), (W("a", 0, 100), 2, 2)]


def test_reduce_and_aggregate() -> None:
    builder = StreamsBuilder()
    grouped = builder.stream("input").group_by_key()
    windowed = grouped.windowed_by(TimeWindows.of_size_with_no_grace(10))
    windowed.reduce(lambda a, b: a + b, Materialized.as_("concat").with_caching_disabled()).to_stream().to(
        "reduced"
    )
    windowed.aggregate(
        lambda: 0,
        lambda k, v, agg: agg + len(v),
        Materialized.as_("lengths").with_value_serde(Long()).with_caching_disabled(),
    ).to_stream().to("lengths", value_serde=Long())
    with TopologyTestDriver(builder.build(), CFG) as driver:
        inp = driver.create_input_topic("input")
        reduced = driver.create_output_topic("reduced", TimeWindowedSerde(String(), 10), String())
        lengths = driver.create_output_topic("lengths", TimeWindowedSerde(String(), 10), Long())
        inp.pipe_input("a", "x", 1)
        inp.pipe_input("a", "yy", 2)
        assert reduced.read_key_values_to_list() == [(W("a", 0, 10), "x"), (W("a", 0, 10), "xyy")]
        assert lengths.read_key_values_to_list() == [(W("a", 0, 10), 1), (W("a", 0, 10), 3)]


def test_restart_restores_windows_from_changelog(tmp_path) -> None:
    windows = TimeWindows.of_size_with_no_grace(10)
    topology = count_topology(windows, "memory")
    first = TopologyTestDriver(topology, CFG)
    inp = first.create_input_topic("input")
    inp.pipe_input("a", "1", 1)
    inp.pipe_input("a", "2", 2)
    first.close()
    second = TopologyTestDriver(topology, CFG, restore_from=first)
    try:
        assert second.get_window_store("counts").fetch("a", 0, 10) == [(0, 2)]
        second.create_input_topic("input").pipe_input("a", "3", 3)
        assert records(windowed_out(second, 10)) == [(W("a", 0, 10), 3, 3)]
    finally:
        second.close()


def test_windowed_changelog_config_and_retention() -> None:
    topology = count_topology(TimeWindows.of_size_and_grace(60_000, 10_000))
    spec = topology.changelog_topics()["counts"]
    assert spec.config["cleanup.policy"] == "compact,delete"
    assert spec.config["retention.ms"] == str(70_000 + 24 * 3600 * 1000)


def test_retention_shorter_than_window_is_an_error() -> None:
    builder = StreamsBuilder()
    windowed = builder.stream("input").group_by_key().windowed_by(TimeWindows.of_size_with_no_grace(100))
    with pytest.raises(Exception, match="retention"):
        windowed.count(Materialized.as_("c").with_retention(50))


def test_expired_windows_are_purged_and_not_returned() -> None:
    windows = TimeWindows.of_size_with_no_grace(60_000)
    with TopologyTestDriver(count_topology(windows), CFG) as driver:
        inp = driver.create_input_topic("input")
        inp.pipe_input("a", "1", 1_000)
        inp.pipe_input("a", "2", 500_000)
        store = driver.get_window_store("counts")
        assert store.fetch("a", 0, 1_000_000) == [(480_000, 1)]


def test_windowed_serde_bytes_match_java_layout() -> None:
    serde = TimeWindowedSerde(String(), 10)
    raw = serde.serialize("t", W("k", 5, 10))
    assert raw == b"k" + (5).to_bytes(8, "big")
    assert serde.deserialize("t", raw) == W("k", 5, 10)
    session = SessionWindowedSerde(String())
    sraw = session.serialize("t", Windowed("k", Window(3, 9)))
    assert sraw == b"k" + (9).to_bytes(8, "big") + (3).to_bytes(8, "big")
    assert session.deserialize("t", sraw) == Windowed("k", Window(3, 9))
