"""The stream thread's commit schedule and poll bound (runner/commit_timing.py): pure decisions."""

from __future__ import annotations

import pytest

from kappaflow.runner.commit_timing import MIN_PROCESSING_SHARE, next_commit_due, poll_wait


def test_a_thread_that_keeps_up_counts_the_interval_from_the_commits_start() -> None:
    # a 20 ms commit at t=10.0 under 100 ms commits: the next is due at 10.1, not 10.12
    assert next_commit_due(10.0, 10.0, 10.02, 0.1, caught_up=True, scheduled=True) == pytest.approx(10.1)
    # at_least_once: a 40 ms commit does not stretch the 30 s period
    assert next_commit_due(100.0, 100.0, 100.04, 30.0, caught_up=True, scheduled=True) == pytest.approx(130.0)


def test_a_commit_longer_than_its_interval_leaves_time_to_process_before_the_next() -> None:
    # a 250 ms commit under 100 ms commits: not due again the moment it ends
    due = next_commit_due(10.0, 10.0, 10.25, 0.1, caught_up=True, scheduled=True)
    assert due == pytest.approx(10.25 + 0.1 * MIN_PROCESSING_SHARE)
    assert due > 10.25


def test_a_commit_of_exactly_the_processing_share_is_on_schedule_either_way() -> None:
    finished = 10.0 + 0.1 * (1 - MIN_PROCESSING_SHARE)
    assert next_commit_due(10.0, 10.0, finished, 0.1, caught_up=True, scheduled=True) == pytest.approx(10.1)


def test_a_thread_that_does_not_keep_up_counts_from_the_commits_end_as_kafka_streams() -> None:
    # busy since the last commit: more frequent commits would take their time out of processing
    assert next_commit_due(10.0, 10.0, 10.02, 0.1, caught_up=False, scheduled=True) == pytest.approx(10.12)
    assert next_commit_due(10.0, 10.0, 10.25, 0.1, caught_up=False, scheduled=True) == pytest.approx(10.35)


def test_a_requested_commit_leaves_the_schedule_as_kafka_streams() -> None:
    # a task's context.commit() at t=20.0, 10 s before the 30 s commit due at 30.0: still due at 30.0,
    # whether the thread kept up or not (Kafka Streams' requested commits do not move lastCommitMs)
    for caught_up in (True, False):
        assert next_commit_due(30.0, 20.0, 20.04, 30.0, caught_up=caught_up, scheduled=False) == 30.0
    # a commit that was not due but ran after the due time (a revocation's) keeps it: the loop's next
    # check sees it due and commits on schedule
    assert next_commit_due(30.0, 30.5, 30.6, 30.0, caught_up=True, scheduled=False) == 30.0


def test_a_poll_waits_poll_ms_when_the_commit_is_further_away() -> None:
    assert poll_wait(0.1, now=5.0, commit_due=5.5, pending=True) == pytest.approx(0.1)


def test_a_poll_stops_waiting_at_the_commits_due_time() -> None:
    assert poll_wait(0.1, now=5.0, commit_due=5.03, pending=True) == pytest.approx(0.03)


def test_a_poll_does_not_wait_once_the_commit_is_due() -> None:
    assert poll_wait(0.1, now=5.2, commit_due=5.1, pending=True) == 0.0
    assert poll_wait(0.1, now=5.1, commit_due=5.1, pending=True) == 0.0


def test_an_idle_thread_with_nothing_to_commit_waits_the_whole_poll() -> None:
    # nothing processed since the last commit: waking for the due time would commit nothing, and with
    # commit.interval.ms=0 the loop would spin
    assert poll_wait(0.1, now=5.0, commit_due=5.03, pending=False) == pytest.approx(0.1)
    assert poll_wait(0.1, now=5.2, commit_due=5.2, pending=False) == pytest.approx(0.1)
