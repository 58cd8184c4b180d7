"""The stream thread's ratio metrics (runner/loop_ratios.py): each phase's share of one iteration, with a
fake clock so the numbers are exact and no test depends on speed."""

from __future__ import annotations

import pytest

from kappaflow.api.metrics import Metrics
from kappaflow.runner.http import prometheus_text
from kappaflow.runner.loop_ratios import PHASES, LoopRatios


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_each_phase_is_its_share_of_the_iteration_and_the_next_iteration_starts_from_zero() -> None:
    clock = FakeClock()
    ratios = LoopRatios(clock)
    ratios.begin()
    ratios.add("poll", 2.0)
    ratios.add("process", 5.0)
    ratios.add("process", 1.0)
    ratios.add("commit", 1.0)
    clock.now += 10.0
    assert ratios.ratios() == {
        "poll": 0.2,
        "restore": 0.0,
        "process": 0.6,
        "punctuate": 0.0,
        "commit": 0.1,
    }
    metrics = Metrics()
    ratios.publish(metrics)
    assert metrics.gauge("process-ratio") == 0.6 and metrics.gauge("poll-ratio") == 0.2
    text = prometheus_text(metrics)
    for phase in PHASES:
        assert f"# TYPE kappaflow_{phase}_ratio gauge" in text
    assert "kappaflow_process_ratio 0.6" in text

    ratios.begin()  # the last iteration's split only, as Java's Value stat
    ratios.add("punctuate", 4.0)
    clock.now += 4.0
    assert ratios.ratios()["punctuate"] == 1.0 and ratios.ratios()["process"] == 0.0


def test_an_instant_iteration_has_zero_ratios_and_unknown_phases_are_refused() -> None:
    clock = FakeClock()
    ratios = LoopRatios(clock)
    ratios.begin()
    assert set(ratios.ratios().values()) == {0.0}
    with pytest.raises(ValueError, match="unknown loop phase 'idle'"):
        ratios.add("idle", 1.0)
