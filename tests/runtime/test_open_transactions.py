"""The decision behind the hanging-transaction report (runner/open_transactions.py), on its own."""

from __future__ import annotations

from kappaflow.runner.open_transactions import BROKER_ABORT_SLACK_S, OpenTransactionWatch, hanging_after_s

TP = ("app-counts-changelog", 3)


def test_a_read_held_at_one_offset_past_the_limit_is_hanging_and_released_when_it_moves():
    watch = OpenTransactionWatch(limit_s=20.0)
    watch.held(TP, 40, 57, now=100.0)  # first seen: an open transaction, normal
    assert watch.check(now=119.0) == []  # within the limit
    watch.held(TP, 40, 57, now=119.5)  # told again at the same offset: the clock keeps running
    [held] = watch.check(now=121.0)
    assert (held.topic, held.partition, held.offset, held.high_watermark) == (*TP, 40, 57)
    assert round(held.held_s) == 21
    assert watch.hanging() == [held]
    assert watch.released(TP) is True  # records arrived: it moved on
    assert watch.hanging() == [] and watch.released(TP) is False


def test_a_new_stable_offset_restarts_the_clock():
    watch = OpenTransactionWatch(limit_s=20.0)
    watch.held(TP, 40, 57, now=100.0)
    watch.held(TP, 45, 60, now=118.0)  # a transaction ended, another is open above it
    assert watch.check(now=137.0) == []
    [held] = watch.check(now=139.0)
    assert (held.offset, held.high_watermark) == (45, 60)


def test_the_limit_is_the_transaction_timeout_plus_the_brokers_check_unless_configured():
    assert hanging_after_s(0, 10000) == 10.0 + BROKER_ABORT_SLACK_S
    assert hanging_after_s(2500, 10000) == 2.5


def test_an_input_is_held_only_at_its_stable_end_with_records_past_it():
    from kappaflow.runner.held_inputs import held_by_open_transaction

    assert held_by_open_transaction(position=40, stable_end=40, high_watermark=57)  # open transaction
    assert not held_by_open_transaction(40, 40, 40)  # read to the end: idle, not held
    assert not held_by_open_transaction(30, 40, 57)  # stable records still to read: behind, not held
    assert not held_by_open_transaction(-1001, 40, 57)  # no position yet
    assert not held_by_open_transaction(40, -1001, 57)  # no stable end known yet
