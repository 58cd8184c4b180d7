"""The stream thread's ratio metrics (runner/loop_ratios.py): each phase's share of one iteration, with a
fake clock so the numbers are exact and no test depends on speed."""

from __future__ import annotations

from kappaflow.api.metrics import Metrics
from kappaflow.runner.http import prometheus_text
from kappaflow.runner.loop_ratios import PHASES, LoopRatios


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_each_phase_is_its_share_of_the_iteration_and_the_next_iteration_starts_from_zero() -> None:
    clock, metrics = FakeClock(), Metrics()
    ratios = LoopRatios(metrics, clock)
    start = clock.now
    clock.now += 10.0
    ratios.record(start, poll=2.0, restore=0.0, process=6.0, punctuate=0.0, commit=1.0)
    assert ratios.ratios() == {
        "poll": 0.2,
        "restore": 0.0,
        "process": 0.6,
        "punctuate": 0.0,
        "commit": 0.1,
    }
    assert metrics.gauge("process-ratio") == 0.6 and metrics.gauge("poll-ratio") == 0.2
    text = prometheus_text(metrics)
    for phase in PHASES:
        assert f"# TYPE kappaflow_{phase}_ratio gauge" in text
    assert "kappaflow_process_ratio 0.6" in text

    start = clock.now  # the last iteration's split only, as Java's Value stat
    clock.now += 4.0
    ratios.record(start, poll=0.0, restore=0.0, process=0.0, punctuate=4.0, commit=0.0)
    assert ratios.ratios()["punctuate"] == 1.0 and ratios.ratios()["process"] == 0.0
    assert metrics.gauge("punctuate-ratio") == 1.0 and metrics.gauge("process-ratio") == 0.0


def test_no_gauge_before_the_first_iteration_and_an_instant_iteration_has_zero_ratios() -> None:
    clock, metrics = FakeClock(), Metrics()
    ratios = LoopRatios(metrics, clock)
    assert metrics.gauge("poll-ratio") is None and "poll-ratio" not in metrics.gauges()
    assert set(ratios.ratios().values()) == {0.0}
    ratios.record(clock.now, poll=0.0, restore=0.0, process=0.0, punctuate=0.0, commit=0.0)
    assert {metrics.gauge(f"{phase}-ratio") for phase in PHASES} == {0.0}


def test_a_read_sees_the_last_finished_iteration_and_a_new_thread_replaces_the_old_one() -> None:
    """The gauges are computed when read: one scrape after many iterations sees the last of them, and a
    stream thread replaced by a new one (same registry) stops feeding them."""
    clock, metrics = FakeClock(), Metrics()
    old = LoopRatios(metrics, clock)
    for process in (1.0, 2.0, 3.0):
        start = clock.now
        clock.now += 4.0
        old.record(start, poll=0.0, restore=0.0, process=process, punctuate=0.0, commit=0.0)
    assert metrics.gauges()["process-ratio"] == {(): 0.75}

    new = LoopRatios(metrics, clock)
    start = clock.now
    clock.now += 2.0
    new.record(start, poll=1.0, restore=0.0, process=0.0, punctuate=0.0, commit=0.0)
    old.record(start, poll=0.0, restore=0.0, process=2.0, punctuate=0.0, commit=0.0)
    assert metrics.gauge("poll-ratio") == 0.5 and metrics.gauge("process-ratio") == 0.0
