"""cogroup: several grouped streams into one aggregate (Kafka Streams' CogroupedKStream)."""

from __future__ import annotations

from typing import Any

from kappaflow import (
    Materialized,
    SessionWindows,
    SlidingWindows,
    StreamsBuilder,
    TimeWindows,
    Window,
    Windowed,
)
from kappaflow.api.serdes import String
from kappaflow.api.windowed_serdes import SessionWindowedSerde, TimeWindowedSerde
from kappaflow.testing import TopologyTestDriver

CFG = {"default.key.serde": "String", "default.value.serde": "String"}


def test_cogroup_aggregates_streams_into_one_table() -> None:
    builder = StreamsBuilder()
    clicks = builder.stream("clicks").group_by_key()
    buys = builder.stream("buys").select_key(lambda k, v: v).group_by_key()
    (
        clicks.cogroup(lambda k, v, agg: agg + "c")
        .cogroup(buys, lambda k, v, agg: agg + "B")
        .aggregate(lambda: "", Materialized.as_("activity").with_caching_disabled())
        .to_stream()
        .to("out")
    )
    topology = builder.build()
    assert any("clicks" in group for group in topology.copartition_groups)
    with TopologyTestDriver(topology, CFG) as driver:
        driver.create_input_topic("clicks").pipe_input("u1", "x", 1)
        driver.create_input_topic("buys").pipe_input("ignored", "u1", 5)
        driver.create_input_topic("clicks").pipe_input("u1", "y", 3)
        out = driver.create_output_topic("out")
        assert [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()] == [
            ("u1", "c", 1),
            ("u1", "cB", 5),
            ("u1", "cBc", 5),  # max(aggregate 5, record 3)
        ]
        assert driver.get_key_value_store("activity").get("u1") == "cBc"


def windowed_cogroup(windows: Any, *extra: Any) -> Any:
    builder = StreamsBuilder()
    clicks = builder.stream("clicks").group_by_key()
    buys = builder.stream("buys").group_by_key()
    cogrouped = clicks.cogroup(lambda k, v, agg: agg + "c").cogroup(buys, lambda k, v, agg: agg + "B")
    mat = Materialized.as_("activity").with_caching_disabled()
    cogrouped.windowed_by(windows).aggregate(lambda: "", *extra, mat).to_stream().to("out")
    return builder.build()


def piped(topology: Any, serde: Any, inputs: list[tuple[str, int]]) -> list[tuple[Any, Any, int]]:
    with TopologyTestDriver(topology, CFG) as driver:
        topics = {name: driver.create_input_topic(name) for name in ("clicks", "buys")}
        for topic, ts in inputs:
            topics[topic].pipe_input("u1", "x", ts)
        out = driver.create_output_topic("out", serde, String())
        return [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()]


def test_cogroup_time_windows_share_one_window_store() -> None:
    """Each input's window aggregate keeps its own stream time (Java builds one KStreamWindowAggregate per
    input), so a buy at 3 is not late for buys after a click at 12 - but the shared store has seen 12 and
    retains only size + grace, so [0,10) reads as expired: the buy starts it afresh, as in Java."""
    topology = windowed_cogroup(TimeWindows.of_size_with_no_grace(10))
    inputs = [("clicks", 1), ("buys", 5), ("clicks", 12), ("buys", 3), ("clicks", 4)]
    assert piped(topology, TimeWindowedSerde(String(), 10), inputs) == [
        (W(0, 10), "c", 1),
        (W(0, 10), "cB", 5),
        (W(10, 20), "c", 12),
        (W(0, 10), "B", 3),  # buys' stream time is 5: not late, but the store no longer returns [0,10)
    ]  # clicks at 4: late for clicks (stream time 12), dropped


def test_cogroup_sliding_windows() -> None:
    topology = windowed_cogroup(SlidingWindows.of_time_difference_and_grace(10, 100))
    out = piped(topology, TimeWindowedSerde(String(), 10), [("clicks", 20), ("buys", 25)])
    # Java creates the previous record's right window before the new record's left window
    assert out == [(W(10, 20), "c", 20), (W(21, 31), "B", 25), (W(15, 25), "cB", 25)]


def test_cogroup_session_windows_merge_sessions() -> None:
    topology = windowed_cogroup(SessionWindows.of_inactivity_gap_and_grace(5, 100), lambda k, a, b: a + b)
    out = piped(topology, SessionWindowedSerde(String()), [("clicks", 1), ("buys", 4), ("clicks", 20)])
    values = [(r[0], r[1]) for r in out]
    assert values == [(W(1, 1), "c"), (W(1, 1), None), (W(1, 4), "cB"), (W(20, 20), "c")]


def W(start: int, end: int) -> Windowed[str]:
    return Windowed("u1", Window(start, end))
