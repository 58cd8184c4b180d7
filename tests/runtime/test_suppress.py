"""KTable.suppress: final windowed results and time-limited rate limiting, with Kafka Streams' rules."""

from __future__ import annotations

import pytest

from kappaflow import Materialized, StreamsBuilder, Window, Windowed
from kappaflow.api.serdes import Long, String
from kappaflow.api.windowed_serdes import TimeWindowedSerde
from kappaflow.dsl.suppress import BufferConfig, Suppressed
from kappaflow.dsl.windows import TimeWindows
from kappaflow.testing import TopologyTestDriver

CFG = {"default.key.serde": "String", "default.value.serde": "String"}


def final_counts_topology(store_type: str = "rocksdb"):
    builder = StreamsBuilder()
    (
        builder.stream("input")
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(10, 5))
        .count(Materialized.as_("counts").with_store_type(store_type))  # type: ignore[arg-type]
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to_stream()
        .to("output", value_serde=Long())
    )
    return builder.build()


def read(driver):
    topic = driver.create_output_topic("output", TimeWindowedSerde(String(), 10), Long())
    return [(r.key, r.value, r.timestamp) for r in topic.read_records_to_list()]


def W(key: str, start: int) -> Windowed[str]:
    return Windowed(key, Window(start, start + 10))


def test_final_results_emitted_once_when_window_closes() -> None:
    with TopologyTestDriver(final_counts_topology(), CFG) as driver:
        inp = driver.create_input_topic("input")
        inp.pipe_input("b", "x", 1)
        inp.pipe_input("a", "x", 5)
        inp.pipe_input("a", "x", 12)
        inp.pipe_input("a", "x", 14)  # stream time 14 < 10 + 5: nothing final yet
        assert read(driver) == []
        inp.pipe_input("a", "x", 3)  # out of order but within grace: counted
        inp.pipe_input("c", "x", 15)  # stream time 15 = end 10 + grace 5: window [0,10) is final
        # ordered by window end, then key bytes; each with its latest update's timestamp
        assert read(driver) == [(W("a", 0), 2, 5), (W("b", 0), 1, 1)]
        inp.pipe_input("a", "x", 4)  # late for the closed window: dropped, nothing emitted again
        inp.pipe_input("c", "x", 25)
        assert read(driver) == [(W("a", 10), 2, 14), (W("c", 10), 1, 15)]


def test_suppression_buffer_survives_restart() -> None:
    topology = final_counts_topology("memory")
    first = TopologyTestDriver(topology, CFG)
    first.create_input_topic("input").pipe_input("a", "x", 1)
    first.create_input_topic("input").pipe_input("a", "x", 2)
    assert read(first) == []
    first.close()
    second = TopologyTestDriver(topology, CFG, restore_from=first)
    try:
        second.create_input_topic("input").pipe_input("z", "x", 30)
        assert read(second) == [(W("a", 0), 2, 2)]
    finally:
        second.close()


def table_topology(suppressed: Suppressed):
    builder = StreamsBuilder()
    builder.table("input").suppress(suppressed).to_stream().to("output")
    return builder.build()


def read_plain(driver):
    return [
        (r.key, r.value, r.timestamp) for r in driver.create_output_topic("output").read_records_to_list()
    ]


def test_time_limit_rate_limits_updates_and_keeps_tombstones() -> None:
    with TopologyTestDriver(
        table_topology(Suppressed.until_time_limit(10, BufferConfig.unbounded())), CFG
    ) as d:
        inp = d.create_input_topic("input")
        inp.pipe_input("a", "v1", 0)
        inp.pipe_input("a", "v2", 3)
        inp.pipe_input("b", "w1", 4)
        assert read_plain(d) == []
        inp.pipe_input("c", "u1", 10)  # stream time 10: a (first buffered at 0) is due
        assert read_plain(d) == [("a", "v2", 3)]
        inp.pipe_input("b", None, 12)  # tombstone replaces b's update; b keeps buffer time 4
        inp.pipe_input("c", "u2", 14)
        assert read_plain(d) == [("b", None, 12)]


def test_emit_early_when_full() -> None:
    config = BufferConfig.max_records(1).emit_early_when_full()
    with TopologyTestDriver(table_topology(Suppressed.until_time_limit(1000, config)), CFG) as d:
        inp = d.create_input_topic("input")
        inp.pipe_input("a", "v1", 0)
        inp.pipe_input("b", "w1", 1)  # two keys > 1: the oldest is emitted early
        assert read_plain(d) == [("a", "v1", 0)]


def test_should_shut_down_when_full() -> None:
    config = BufferConfig.max_records(1).should_shut_down()
    with TopologyTestDriver(table_topology(Suppressed.until_time_limit(1000, config)), CFG) as d:
        inp = d.create_input_topic("input")
        inp.pipe_input("a", "v1", 0)
        with pytest.raises(Exception, match="exceeded its capacity"):
            inp.pipe_input("b", "w1", 1)


def test_until_window_closes_requires_windowed_table_and_strict_buffer() -> None:
    builder = StreamsBuilder()
    with pytest.raises(Exception, match="windowed"):
        builder.table("t").suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
    with pytest.raises(Exception, match="strict"):
        Suppressed.until_window_closes(BufferConfig.max_records(5))


def test_buffer_changelog_is_compacted_topic() -> None:
    topology = final_counts_topology()
    spec = topology.changelog_topics()["KTABLE-SUPPRESS-STATE-STORE-0000000003"]
    assert spec.config == {"cleanup.policy": "compact"}
