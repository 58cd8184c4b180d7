"""The rules of `kappaflow transactions` without a broker: which open transactions are hanging
(clients/hanging_transactions.py), which producer an abort at a start offset means, and the errors that
name the field a user got wrong before anything is sent."""

from __future__ import annotations

import pytest

from kappaflow import cli
from kappaflow.cli_transactions import table
from kappaflow.clients.hanging_transactions import (
    COORDINATOR_ABORT_SLACK_MS,
    OpenTransaction,
    TransactionsError,
    abort_spec_at_offset,
    explicit_abort_spec,
    hanging_transactions,
    open_transactions,
)
from kappaflow.clients.txn_messages import (
    AbortSpec,
    PartitionProducers,
    ProducerState,
    TransactionDescription,
)

NOW = 10_000_000
MINUTE = 60_000


def producer(
    pid: int, start: int, last: int = NOW - 20 * MINUTE, epoch: int = 2, coord: int = 4
) -> ProducerState:
    return ProducerState(pid, epoch, last_sequence=9, last_timestamp=last, coordinator_epoch=coord,
                         current_txn_start_offset=start)  # fmt: skip


def describe(pid: int, partitions: set[tuple[str, int]], start: int = NOW - MINUTE, timeout: int = MINUTE,
             state: str = "Ongoing") -> TransactionDescription:  # fmt: skip
    return TransactionDescription(0, f"txn-{pid}", state, timeout, start, pid, 2, frozenset(partitions))


def test_candidates_are_transactions_open_longer_than_the_limit():
    partitions = [
        PartitionProducers(
            "t", 0, 0, None, (producer(1, 40), producer(2, -1), producer(3, 50, last=NOW - MINUTE))
        ),
        PartitionProducers("t", 1, 0, None, (producer(1, 7),)),
    ]
    found = open_transactions(partitions, NOW, 15 * MINUTE)
    assert [(t.partition, t.producer.producer_id) for t in found] == [(0, 1), (1, 1)]
    assert [t.producer.producer_id for t in open_transactions(partitions, NOW, 0)] == [1, 3, 1]


def test_a_transaction_the_coordinator_runs_on_that_partition_within_its_timeout_is_not_hanging():
    candidate = OpenTransaction("t", 0, producer(1, 40))
    described = {"txn-1": describe(1, {("t", 0)})}
    assert hanging_transactions([candidate], {1: "txn-1"}, described, NOW) == []


@pytest.mark.parametrize(
    ("ids", "descriptions", "reason"),
    [
        ({}, {}, "no coordinator lists a transactional id"),
        ({1: "txn-1"}, {"txn-1": None}, "does not know transactional id 'txn-1'"),
        ({1: "txn-1"}, {"txn-1": describe(1, {("t", 1)})}, "does not include this partition"),
        (
            {1: "txn-1"},
            {"txn-1": describe(1, set(), state="CompleteCommit")},
            "(CompleteCommit) does not include",
        ),
        ({1: "txn-1"}, {"txn-1": describe(9, {("t", 0)})}, "now has producer id 9"),
        (
            {1: "txn-1"},
            {
                "txn-1": describe(
                    1,
                    {("t", 0)},
                    start=NOW - 2 * MINUTE - COORDINATOR_ABORT_SLACK_MS - 1000,
                    timeout=2 * MINUTE,
                )
            },
            "past its 120 s timeout",
        ),
    ],
)
def test_a_transaction_no_coordinator_will_end_is_hanging_with_the_reason(ids, descriptions, reason):
    candidate = OpenTransaction("t", 0, producer(1, 40))
    (found,) = hanging_transactions([candidate], ids, descriptions, NOW)
    assert found.open == candidate and reason in found.reason
    assert found.transactional_id == ids.get(1)


def test_abort_at_a_start_offset_takes_that_producers_epochs():
    partition = PartitionProducers("t", 3, 0, None, (producer(1, 40, epoch=5, coord=8), producer(2, 90)))
    assert abort_spec_at_offset(partition, 40) == AbortSpec("t", 3, 1, 5, 8)
    never_completed_here = PartitionProducers("t", 3, 0, None, (producer(1, 40, coord=-1),))
    assert abort_spec_at_offset(never_completed_here, 40).coordinator_epoch == 0


def test_abort_at_an_offset_no_transaction_starts_at_names_the_offsets_that_do():
    partition = PartitionProducers("t", 3, 0, None, (producer(1, 40), producer(2, 90), producer(3, -1)))
    with pytest.raises(TransactionsError, match=r"--start-offset 41: .* on t-3; .* start at: 40, 90"):
        abort_spec_at_offset(partition, 41)
    idle = PartitionProducers("t", 3, 0, None, (producer(3, -1),))
    with pytest.raises(TransactionsError, match="none \\(no transaction is open there\\)"):
        abort_spec_at_offset(idle, 0)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ((-1, 1, 0, 0), "--partition"),
        ((0, -5, 0, 0), "--producer-id"),
        ((0, 1, 40000, 0), "--producer-epoch"),
        ((0, 1, 0, -2), "--coordinator-epoch"),
    ],
)
def test_an_explicit_abort_with_an_impossible_figure_names_the_field(args, field):
    with pytest.raises(TransactionsError, match=f"^{field}"):
        explicit_abort_spec("t", *args)


def test_tables_pad_columns_to_their_widest_cell():
    assert table(["A", "Long"], [[1, None], ["wide", 2]]).splitlines() == [
        "A     Long",
        "1     None",
        "wide  2",
    ]


ABORT = ["abort", "--topic", "t", "--partition", "0"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (ABORT, "missing: --producer-id, --producer-epoch, --coordinator-epoch"),
        ([*ABORT, "--producer-id", "1"], "missing: --producer-epoch, --coordinator-epoch"),
        ([*ABORT, "--start-offset", "3", "--producer-id", "1"], "--start-offset finds the producer itself"),
        ([*ABORT, "--start-offset", "-1"], "--start-offset: expected an offset >= 0, got -1"),
        (["find-hanging", "--partition", "1"], "--partition needs exactly one --topic"),
        (["find-hanging", "--max-transaction-timeout-minutes", "-1"], "--max-transaction-timeout-minutes"),
    ],
)
def test_wrong_input_fails_before_any_broker_is_asked(argv, message, capsys):
    # an address nothing listens on: reaching it would be a different error
    code = cli.main(["transactions", *argv, "--bootstrap-server", "127.0.0.1:9"])
    assert code == 2
    assert message in capsys.readouterr().err


def test_an_unreachable_broker_is_named(capsys):
    code = cli.main(["transactions", "list", "--bootstrap-server", "127.0.0.1:9", "--timeout", "1", "--json"])
    assert code == 2
    assert "cannot reach Kafka at bootstrap.servers=127.0.0.1:9" in capsys.readouterr().err
