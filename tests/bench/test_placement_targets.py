"""bench/placement.py's pure part: which of the issue's targets apply to an event and how a figure is
judged. A verdict that judged the wrong figure or bound would print "met" beside a stall that is not."""

from __future__ import annotations

import pytest
from bench.placement import FEW_S, SESSION_S, Figure, print_table, targets, verdict


def test_a_kill_is_judged_by_the_session_timeout_and_the_standbys_lag() -> None:
    (stall_label, stall_what, stall_bound), (restored_label, restored_what, restored_bound) = targets(
        "kill -9 pod-1", keys=60_000, rate=300.0
    )
    assert (stall_what, stall_bound) == ("stall", SESSION_S + FEW_S)
    assert (restored_what, restored_bound) == ("restored", 600.0)  # two seconds of the whole input
    assert "session" in stall_label and "standby" in restored_label


def test_scaling_and_restarts_are_judged_by_two_seconds_and_no_full_restore() -> None:
    for event in ("scale-out 3 -> 4", "scale-in 4 -> 3", "rolling restart of 3", "restart pod-1 (its state)"):
        assert [(what, bound) for _label, what, bound in targets(event, keys=60_000, rate=300.0)] == [
            ("stall", 2.0),
            ("restored", 5000.0),  # one task's state: 60k keys over 12 partitions
        ]


def test_a_verdict_reads_the_figure_its_target_names() -> None:
    figure = Figure("scale-out 3 -> 4", stall=1.4, restored=17_500)
    assert verdict(figure, "stall", 2.0) == "met"
    assert verdict(figure, "restored", 5000.0) == "NOT met"
    assert verdict(Figure("x", stall=2.0, restored=0), "stall", 2.0) == "met"  # the bound itself is met
    assert verdict(None, "stall", 2.0) == "n/a"


def test_the_table_puts_both_sides_of_an_event_on_one_row(capsys: pytest.CaptureFixture[str]) -> None:
    results = {
        "kappaflow": [Figure("kill -9 pod-1", 7.0, 0)],
        "java": [Figure("kill -9 pod-1", 12.5, 800)],
    }
    print_table(results, keys=60_000, rate=300.0)
    lines = capsys.readouterr().out.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("kill -9 pod-1"))
    kill, restore = lines[row], lines[row + 1]
    assert "7.0 s / 0" in kill and "12.5 s / 800" in kill
    assert kill.endswith(" met    NOT met")  # the stall: 7.0 s is within 11 s, 12.5 s is not
    assert restore.endswith(" met    NOT met")  # restored: 0 is within 600 records, 800 is not
