"""The wall-clock throttle of unmatched stream-stream join results, step by step in the test driver.

The driver turns the throttle off, as Java's does; a user config can turn it back on, and then the
outer-join store is scanned at most once per interval of (mock) wall-clock time.
"""

from __future__ import annotations

from kappaflow import JoinWindows, StreamsBuilder
from kappaflow.api.config import EMIT_INTERVAL_OUTER_JOIN
from kappaflow.testing import TopologyTestDriver

CFG = {"default.key.serde": "String", "default.value.serde": "String"}


def _topology() -> object:
    builder = StreamsBuilder()
    windows = JoinWindows.of_time_difference_and_grace(10, 0)
    builder.stream("left").left_join(builder.stream("right"), lambda a, b: f"{a}+{b}", windows).to("out")
    return builder.build()


def _read(driver: TopologyTestDriver) -> list[tuple[str, str]]:
    return driver.create_output_topic("out").read_key_values_to_list()


def test_the_test_driver_emits_every_closed_window_at_once() -> None:
    with TopologyTestDriver(_topology(), CFG, initial_wall_clock_time=0) as driver:  # type: ignore[arg-type]
        left = driver.create_input_topic("left")
        for key, ts in (("k1", 0), ("k2", 100), ("k3", 200)):
            left.pipe_input(key, key, ts)
        assert _read(driver) == [("k1", "k1+None"), ("k2", "k2+None")]


def test_unmatched_results_wait_for_the_next_record_after_the_interval() -> None:
    config = {**CFG, EMIT_INTERVAL_OUTER_JOIN: 1000}
    with TopologyTestDriver(_topology(), config, initial_wall_clock_time=0) as driver:  # type: ignore[arg-type]
        left = driver.create_input_topic("left")
        left.pipe_input("k1", "k1", 0)  # the first record scans (nothing to emit) and arms the interval
        left.pipe_input("k2", "k2", 100)  # k1's window closed, but the scan is throttled
        assert _read(driver) == []
        driver.advance_wall_clock_time(999)
        left.pipe_input("k3", "k3", 200)
        assert _read(driver) == []
        driver.advance_wall_clock_time(1)
        left.pipe_input("k4", "k4", 300)  # the interval has passed: one scan emits every closed window
        assert _read(driver) == [("k1", "k1+None"), ("k2", "k2+None"), ("k3", "k3+None")]
        driver.advance_wall_clock_time(500)
        left.pipe_input("k5", "k5", 400)
        assert _read(driver) == []
