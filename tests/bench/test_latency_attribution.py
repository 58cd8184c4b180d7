"""bench/latency.py's pure part: which output answers which input occurrence, and the percentiles. A
latency bench that attributed outputs wrongly would print numbers that look plausible and mean nothing."""

from __future__ import annotations

import math

import pytest
from bench.latency import commit_cuts, occurrence_latencies, percentile, summarize


def test_an_update_answers_every_occurrence_it_counts_and_only_those():
    occurrences = {"a": [100.0, 110.0, 120.0], "b": [105.0]}
    # a cache flush emits a=2 at 150 (answering the first two), then a=3 at 400; b never appears
    outputs = [("a", 3, 400.0), ("a", 2, 150.0)]  # seen order is by time, not by list order
    latencies = occurrence_latencies(occurrences, outputs)
    assert latencies == {"a": [50.0, 40.0, 280.0], "b": [None]}


def test_a_count_that_jumps_answers_every_occurrence_below_it_at_once():
    occurrences = {"w": [0.0, 1.0, 2.0, 3.0]}
    assert occurrence_latencies(occurrences, [("w", 4, 10.0), ("w", 4, 20.0)]) == {"w": [10.0, 9.0, 8.0, 7.0]}


def test_percentile_is_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert (
        percentile(values, 0.5) == 50.0 and percentile(values, 0.99) == 99.0 and percentile(values, 1) == 100
    )
    assert percentile([7.0], 0.99) == 7.0
    with pytest.raises(ValueError):
        percentile([], 0.5)


def test_only_the_window_counts_and_unanswered_records_are_reported():
    occurrences = {"a": [0.0, 1000.0, 1500.0, 3000.0]}
    row = summarize("kappaflow", "at_least_once", 10, occurrences, [("a", 2, 1100.0)], (900.0, 2000.0))
    assert (row.measured, row.unanswered) == (2, 1)  # 1000 answered after 100 ms, 1500 never
    assert row.p50_ms == row.p99_ms == row.max_ms == 100.0
    empty = summarize("java", "exactly_once_v2", 10, occurrences, [], (900.0, 2000.0))
    assert empty.unanswered == 2 and math.isnan(empty.p99_ms)


def test_commit_cuts_group_a_commits_updates_and_name_the_input_it_left_out():
    # two commits 30 s apart; the first reflects a's first two occurrences and b's first, leaving a's
    # third (appended 40 ms before the first update was seen) and b's second to the next
    occurrences = {"a": [1000.0, 29_000.0, 29_960.0], "b": [500.0, 29_990.0]}
    outputs = [("a", 2, 30_000.0), ("b", 1, 30_003.0), ("a", 3, 60_001.0), ("b", 2, 60_004.0)]
    first, second = commit_cuts(occurrences, outputs)
    assert (first.seen_ms, first.spread_ms, first.newest_in_ms, first.oldest_out_ms) == (
        30_000.0, 3.0, 29_000.0, 29_960.0,
    )  # fmt: skip
    assert second.seen_ms == 60_001.0 and second.newest_in_ms == 29_990.0 and math.isnan(second.oldest_out_ms)
