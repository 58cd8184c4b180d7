"""`InFlightWindow` (kappaflow.tasks.async_window): which call starts, which result leaves, and the commit
watermark, for each ordering, driven without any executor."""

from __future__ import annotations

import pytest

from kappaflow import Ordering
from kappaflow.tasks.async_window import InFlightWindow

P0, P1 = ("in", 0), ("in", 1)


def started(window: InFlightWindow) -> list[int]:
    return [e.offset for e in window.startable()]


def released(window: InFlightWindow) -> list[int]:
    return [e.offset for e in window.take_released()]


def test_per_key_runs_one_call_per_key_and_releases_in_key_order():
    window = InFlightWindow(Ordering.PER_KEY, 10, release_in_offset_order=False)
    seqs = {o: window.admit(P0, o, key, None).seq for o, key in [(0, "a"), (1, "b"), (2, "a"), (3, "a")]}
    assert started(window) == [0, 1]  # a's second and third wait behind its first
    assert window.complete(seqs[1], "b0")
    assert released(window) == [1]  # other keys leave as they complete
    assert window.watermark(P0) == 0  # offset 0 still held: commits stop there
    window.complete(seqs[0], "a0")
    assert started(window) == [2] and released(window) == [0]
    assert window.watermark(P0) == 2
    window.complete(seqs[2], "a2")
    assert started(window) == [3] and released(window) == [2]
    window.complete(seqs[3], "a3")
    assert released(window) == [3] and window.watermark(P0) is None and window.accepted == 0


def test_per_partition_releases_the_completed_prefix_in_offset_order():
    window = InFlightWindow(Ordering.PER_PARTITION, 10, release_in_offset_order=False)
    seqs = [window.admit(P0, o, "same", None).seq for o in range(4)]
    assert started(window) == [0, 1, 2, 3]  # concurrent, even for one key
    window.complete(seqs[2], None)
    window.complete(seqs[1], None)
    assert released(window) == []
    window.complete(seqs[0], None)
    assert released(window) == [0, 1, 2] and window.watermark(P0) == 3


def test_none_releases_in_completion_order_and_partitions_have_their_own_watermark():
    window = InFlightWindow(Ordering.NONE, 10, release_in_offset_order=False)
    a, b, c = (window.admit(tp, o, "k", None).seq for tp, o in [(P0, 5), (P1, 7), (P0, 6)])
    started(window)
    window.complete(c, None)
    window.complete(b, None)
    assert released(window) == [6, 7]
    assert window.watermark(P0) == 5 and window.watermark(P1) is None
    window.complete(a, None)
    assert released(window) == [5] and window.watermark(P0) is None


def test_exactly_once_holds_results_behind_the_oldest_record_of_their_partition():
    """Under exactly_once_v2 nothing leaves above the watermark: a commit's outputs are exactly those
    of the offsets it commits."""
    window = InFlightWindow(Ordering.NONE, 10, release_in_offset_order=True)
    seqs = [window.admit(P0, o, f"k{o}", None).seq for o in range(3)]
    started(window)
    window.complete(seqs[2], None)
    window.complete(seqs[1], None)
    assert released(window) == [] and window.watermark(P0) == 0
    window.complete(seqs[0], None)
    assert released(window) == [0, 1, 2]


def test_max_in_flight_bounds_running_calls_and_accepted_records():
    window = InFlightWindow(Ordering.NONE, 2, release_in_offset_order=False)
    seqs = [window.admit(P0, o, o, None).seq for o in range(3)]  # a fan-out can go past the bound
    assert started(window) == [0, 1] and window.running == 2
    assert window.saturated() and window.free_slots() == 0
    window.complete(seqs[0], None)
    assert started(window) == [2]
    assert released(window) == [0] and window.free_slots() == 0  # 2 still held
    window.complete(seqs[1], None)
    released(window)
    assert window.free_slots() == 1 and not window.saturated()


def test_clear_hands_back_the_running_calls_and_ignores_late_completions():
    window = InFlightWindow(Ordering.PER_KEY, 4, release_in_offset_order=False)
    first = window.admit(P0, 0, "a", None).seq
    window.admit(P0, 1, "a", None)
    started(window)
    assert [e.offset for e in window.clear()] == [0]  # the waiting one never started
    assert not window.complete(first, "late") and released(window) == [] and window.accepted == 0
    assert window.watermark(P0) is None


def test_bad_bound():
    with pytest.raises(ValueError, match="max_in_flight"):
        InFlightWindow(Ordering.NONE, 0, release_in_offset_order=False)


def test_input_pauses_when_full_with_a_batch_queued_and_resumes_at_half_a_batch():
    from kappaflow.runner.backpressure import input_paused

    assert not input_paused(False, saturated=True, buffered=999, batch=1000)  # room to fill: keep fetching
    assert not input_paused(False, saturated=False, buffered=5000, batch=1000)  # the nodes take them now
    assert input_paused(False, saturated=True, buffered=1000, batch=1000)
    assert input_paused(True, saturated=False, buffered=500, batch=1000)  # no flapping per record
    assert not input_paused(True, saturated=True, buffered=499, batch=1000)
