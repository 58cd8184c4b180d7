"""`emit_strategy(EmitStrategy.on_window_close())` (KIP-825): each window forwarded once, when stream time
passes its end plus grace, oldest window first; Java's KStreamWindowAggregate / KStreamSlidingWindowAggregate
with the test driver's emit interval of 0."""

from __future__ import annotations

from typing import Any

import pytest

from kappaflow import (
    EmitStrategy,
    Materialized,
    SessionWindows,
    SlidingWindows,
    StreamsBuilder,
    TimeWindows,
    Window,
    Windowed,
)
from kappaflow.api.serdes import Long, String
from kappaflow.api.windowed_serdes import SessionWindowedSerde, TimeWindowedSerde
from kappaflow.testing import TopologyTestDriver

CFG = {"default.key.serde": "String", "default.value.serde": "String"}


def run(windows: Any, size: int | None, inputs: list[tuple[str, int]], caching: bool) -> list[list[Any]]:
    """Pipe each (key, timestamp) and return what came out after each one."""
    builder = StreamsBuilder()
    mat = Materialized.as_("counts")
    mat = mat if caching else mat.with_caching_disabled()
    (
        builder.stream("in")
        .group_by_key()
        .windowed_by(windows)
        .emit_strategy(EmitStrategy.on_window_close())
        .count(mat)
        .to_stream()
        .to("out", value_serde=Long())
    )
    out: list[list[Any]] = []
    with TopologyTestDriver(builder.build(), CFG) as driver:
        source = driver.create_input_topic("in")
        key_serde = SessionWindowedSerde(String()) if size is None else TimeWindowedSerde(String(), size)
        topic = driver.create_output_topic("out", key_serde, Long())
        for key, ts in inputs:
            source.pipe_input(key, "v", ts)
            out.append([(r.key, r.value, r.timestamp) for r in topic.read_records_to_list()])
    return out


def W(key: str, start: int, end: int) -> Windowed[str]:
    return Windowed(key, Window(start, end))


@pytest.mark.parametrize("caching", [True, False])
def test_time_windows_emit_once_when_closed(caching: bool) -> None:
    windows = TimeWindows.of_size_and_grace(10, 5)
    inputs = [("a", 1), ("b", 3), ("a", 12), ("a", 16), ("a", 4), ("c", 25)]
    assert run(windows, 10, inputs, caching) == [
        [],
        [],
        [],  # close time 7: [0,10) still open
        [(W("a", 0, 10), 1, 1), (W("b", 0, 10), 1, 3)],  # close time 11 >= 10: by key within the window
        [],  # late for [0,10): dropped, nothing new closed
        [(W("a", 10, 20), 2, 16)],
    ]


def test_sliding_windows_emit_once_when_closed() -> None:
    """Sliding windows include their end, so [s, s+10] closes once close time passes s+10."""
    windows = SlidingWindows.of_time_difference_and_grace(10, 0)
    inputs = [("a", 5), ("a", 12), ("a", 30)]
    assert run(windows, 10, inputs, False) == [
        [],
        [(W("a", 0, 10), 1, 5)],
        [(W("a", 2, 12), 2, 12), (W("a", 6, 16), 1, 12)],
    ]


@pytest.mark.parametrize("caching", [True, False])
def test_session_windows_emit_once_when_closed(caching: bool) -> None:
    """A session closes once `end < stream time - grace - gap`; it goes out stamped with its end, by end
    then key, merged sessions only as their final merge."""
    windows = SessionWindows.of_inactivity_gap_and_grace(5, 2)
    inputs = [("b", 3), ("a", 0), ("a", 3), ("a", 10), ("b", 11), ("a", 30)]
    assert run(windows, None, inputs, caching) == [
        [],
        [],
        [],  # a merges into [0,3]
        [],  # close time 3: a session ending at 3 is still open
        [(W("a", 0, 3), 2, 3), (W("b", 3, 3), 1, 3)],  # close time 4: both end at 3, by key
        [(W("a", 10, 10), 1, 10), (W("b", 11, 11), 1, 11)],  # close time 23
    ]


def test_on_window_update_is_the_default() -> None:
    assert EmitStrategy.on_window_update() == EmitStrategy()
    assert EmitStrategy.on_window_close().on_close
