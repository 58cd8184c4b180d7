"""Sliding windows (KIP-450): the windows records define, checked against a brute-force model."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kappaflow import Materialized, SlidingWindows, StreamsBuilder, Window, Windowed
from kappaflow.api.serdes import Long, String
from kappaflow.api.windowed_serdes import TimeWindowedSerde
from kappaflow.testing import TopologyTestDriver

CFG = {"default.key.serde": "String", "default.value.serde": "String"}
D = 10


def topology(grace: int = 1000, store_type: str = "rocksdb"):
    builder = StreamsBuilder()
    mat = Materialized.as_("sliding").with_store_type(store_type).with_caching_disabled()  # type: ignore[arg-type]
    (
        builder.stream("input")
        .group_by_key()
        .windowed_by(SlidingWindows.of_time_difference_and_grace(D, grace))
        .count(mat)
        .to_stream()
        .to("output", value_serde=Long())
    )
    return builder.build()


def W(start: int) -> Windowed[str]:
    return Windowed("k", Window(start, start + D))


def read(driver):
    topic = driver.create_output_topic("output", TimeWindowedSerde(String(), D), Long())
    return [(r.key, r.value, r.timestamp) for r in topic.read_records_to_list()]


def test_in_order_records_create_left_and_right_windows() -> None:
    with TopologyTestDriver(topology(), CFG) as driver:
        inp = driver.create_input_topic("input")
        inp.pipe_input("k", "a", 20)
        assert read(driver) == [(W(10), 1, 20)]  # left window [10, 20]
        inp.pipe_input("k", "b", 25)
        # the right window of 20 ([21, 31]) is created holding 25; 20's left window gains nothing;
        # 25's left window [15, 25] holds both
        assert read(driver) == [(W(21), 1, 25), (W(15), 2, 25)]
        inp.pipe_input("k", "c", 40)  # far: only its own left window
        assert read(driver) == [(W(30), 1, 40)]


def test_early_records_share_the_window_from_zero() -> None:
    with TopologyTestDriver(topology(), CFG) as driver:
        inp = driver.create_input_topic("input")
        inp.pipe_input("k", "a", 3)
        inp.pipe_input("k", "b", 5)
        assert read(driver) == [(W(0), 1, 3), (W(4), 1, 5), (W(0), 2, 5)]


def test_late_records_are_dropped() -> None:
    with TopologyTestDriver(topology(grace=0), CFG) as driver:
        inp = driver.create_input_topic("input")
        inp.pipe_input("k", "a", 100)
        inp.pipe_input("k", "late", 50)  # 50 + 1 + 10 <= 100: every window it could touch is closed
        assert read(driver) == [(W(90), 1, 100)]
        # out of order at 90: [90,100] (end inclusive, not closed at stream time 100) is updated and
        # 90's right window [91,101] created; its own left window [80,90] is closed: dropped
        inp.pipe_input("k", "b", 90)
        assert read(driver) == [(W(90), 2, 100), (W(91), 1, 100)]
        assert driver.metrics().counter(
            "dropped-records-total", reason="late", task="0_0", node="KSTREAM-AGGREGATE-0000000001"
        ) == 2  # fmt: skip


def model(timestamps: list[int]) -> dict[int, int]:
    """Every window the records define, with the count of records inside it (both ends inclusive)."""
    starts: set[int] = set()
    for t in timestamps:
        starts.add(max(0, t - D))
        if any(t < u <= t + 1 + D for u in timestamps):
            starts.add(t + 1)
    return {s: sum(1 for t in timestamps if s <= t <= s + D) for s in starts}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=60), min_size=1, max_size=12))
def test_any_order_matches_the_model(timestamps: list[int]) -> None:
    with TopologyTestDriver(topology(), CFG) as driver:
        inp = driver.create_input_topic("input")
        for t in timestamps:
            inp.pipe_input("k", "v", t)
        stored = {w.window.start: n for w, n in driver.get_window_store("sliding").all()}
        assert stored == model(timestamps)
        last_emitted = {key.window.start: value for key, value, _ in read(driver)}
        assert last_emitted == stored
