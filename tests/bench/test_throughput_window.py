"""bench/throughput.py's window readings: the CPU per line and commits printed after each row's rate.
A note left over from one row and printed after the next would attribute one row's CPU to another."""

from __future__ import annotations

from bench.throughput import WINDOW, cpu_seconds, window_cpu, window_note

from bench import throughput


def test_a_kappaflow_row_prints_its_cpu_per_line_and_commits_once() -> None:
    WINDOW.clear()
    window_cpu(cpu_seconds() - 0.5, lines=100_000, commits=12)
    note = window_note("exactly_once_v2")
    # 0.5 s over 100k lines, plus the few microseconds between the two readings
    assert note.startswith(", 5.0") and note.endswith(" us CPU per line, 12 commits in the window")
    assert window_note("exactly_once_v2") == ""  # consumed: the next row prints only its own


def test_a_hand_written_row_prints_cpu_without_commits() -> None:
    WINDOW.clear()
    window_cpu(cpu_seconds(), lines=1000)
    note = window_note("repartition")
    assert note.startswith(", ") and note.endswith(" us CPU per line")


def test_rows_timed_in_another_process_print_nothing() -> None:
    WINDOW.clear()
    window_cpu(cpu_seconds(), lines=1000)  # what the row before left, if it was not printed
    for row in (*throughput.JAVA_RUNS, *throughput.PYTHON_PEER_RUNS):
        assert window_note(row) == ""


def test_cpu_per_line_is_the_process_cpu_over_the_lines() -> None:
    WINDOW.clear()
    start = cpu_seconds()
    total = 0
    for i in range(200_000):  # burn some CPU inside the window
        total += i * i
    window_cpu(start, lines=10)
    spent = cpu_seconds() - start
    assert total > 0
    assert 0 < WINDOW["cpu_us_per_line"] <= spent * 1e6 / 10
