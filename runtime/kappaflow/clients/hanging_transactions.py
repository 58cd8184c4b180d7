"""Which open transactions are hanging, and what aborting one takes: the pure rules of KIP-664's tooling.

A partition's leader knows which producers have a transaction open on it (DescribeProducers), the
transaction coordinator knows which transactions it is running and on which partitions
(ListTransactions, DescribeTransactions). A transaction is *hanging* on a partition when the leader
has it open but the coordinator will never end it there: the coordinator completed it without writing
that partition's marker (issue 29: a partition without a leader taken for a deleted one), or lost it.
Then nothing ends it and every read_committed reader of the partition stops at its first offset.

An open transaction is a candidate once it has been open longer than any transaction may run
(`--max-transaction-timeout-minutes`, the broker's `transaction.max.timeout.ms` being 15 minutes by
default): younger ones may still be committed or timed out by the coordinator. Its age is measured from
the producer's last write to the partition, as Kafka's tool does (the leader keeps no start time). A
candidate is hanging when
- no transactional id has its producer id (the coordinator has forgotten it), or the coordinator does
  not know the transactional id;
- the coordinator's current transaction for it does not include the partition (it is not the one open
  there: that one was completed without this partition's marker);
- or the coordinator's transaction has run past its own timeout plus the broker's abort check, which
  a coordinator aborts on its own (a transaction it keeps is not being ended).

Aborting one is writing an abort marker on the partition (WriteTxnMarkers to its leader) with the
producer id, the producer epoch and the coordinator epoch that the leader reports for that producer;
a marker with an older producer epoch or coordinator epoch is refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kappaflow.api.errors import StreamsError
from kappaflow.clients.txn_messages import (
    AbortSpec,
    PartitionProducers,
    ProducerState,
    TransactionDescription,
)

# A coordinator checks for timed-out transactions every 10 s by default: past timeout + this, it is not
# going to end the transaction (runner/open_transactions.py uses the same slack).
COORDINATOR_ABORT_SLACK_MS = 15_000


class TransactionsError(StreamsError):
    """A `kappaflow transactions` command cannot do what was asked; the message names the field."""


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    """A transaction a partition's leader has open: its producer, as DescribeProducers reports it."""

    topic: str
    partition: int
    producer: ProducerState

    def age_ms(self, now_ms: int) -> int:
        return now_ms - self.producer.last_timestamp


@dataclass(frozen=True, slots=True)
class HangingTransaction:
    """An open transaction no coordinator will end, with why it is taken for hanging."""

    open: OpenTransaction
    transactional_id: str | None
    reason: str


def open_transactions(partitions: Iterable[PartitionProducers], now_ms: int,
                      older_than_ms: int) -> list[OpenTransaction]:  # fmt: skip
    """The transactions open on `partitions` for longer than `older_than_ms`: the candidates."""
    found = [
        OpenTransaction(p.topic, p.partition, producer)
        for p in partitions
        for producer in p.producers
        if producer.current_txn_start_offset >= 0
    ]
    return [t for t in found if t.age_ms(now_ms) > older_than_ms]


def hanging_transactions(candidates: Sequence[OpenTransaction], transactional_ids: Mapping[int, str],
                         descriptions: Mapping[str, TransactionDescription | None],
                         now_ms: int) -> list[HangingTransaction]:  # fmt: skip
    """The candidates the coordinator will not end (module docstring). `transactional_ids`: producer id
    -> transactional id from ListTransactions; `descriptions`: transactional id -> DescribeTransactions'
    answer, None when the coordinator does not know it."""
    hanging: list[HangingTransaction] = []
    for candidate in candidates:
        txn_id = transactional_ids.get(candidate.producer.producer_id)
        reason = _why_hanging(candidate, txn_id, descriptions.get(txn_id) if txn_id else None, now_ms)
        if reason is not None:
            hanging.append(HangingTransaction(candidate, txn_id, reason))
    return sorted(hanging, key=lambda h: (h.open.topic, h.open.partition, h.open.producer.producer_id))


def _why_hanging(candidate: OpenTransaction, txn_id: str | None, description: TransactionDescription | None,
                 now_ms: int) -> str | None:  # fmt: skip
    if txn_id is None:
        return "no coordinator lists a transactional id for its producer id"
    if description is None:
        return f"the coordinator does not know transactional id '{txn_id}'"
    if description.producer_id != candidate.producer.producer_id:
        return (f"transactional id '{txn_id}' now has producer id {description.producer_id}: "
                "its transaction here belongs to a producer id the coordinator gave up")  # fmt: skip
    if (candidate.topic, candidate.partition) not in description.partitions:
        return (f"the coordinator's transaction for '{txn_id}' ({description.state}) does not include "
                "this partition")  # fmt: skip
    started = description.start_time_ms
    if started >= 0 and now_ms - started > description.timeout_ms + COORDINATOR_ABORT_SLACK_MS:
        return (
            f"the coordinator's transaction for '{txn_id}' ({description.state}) has run "
            f"{(now_ms - started) // 1000} s, past its {description.timeout_ms // 1000} s timeout"
        )
    return None


def abort_spec_at_offset(producers: PartitionProducers, start_offset: int) -> AbortSpec:
    """The abort of the transaction that starts at `start_offset` (the offset a read_committed reader is
    held at, as kappaflow's warning names it) on the partition; an error naming what is open there when
    no transaction starts at that offset."""
    where = f"{producers.topic}-{producers.partition}"
    matches = [p for p in producers.producers if p.current_txn_start_offset == start_offset]
    if not matches:
        starts = sorted(
            {p.current_txn_start_offset for p in producers.producers if p.current_txn_start_offset >= 0}
        )
        open_at = ", ".join(map(str, starts)) if starts else "none (no transaction is open there)"
        raise TransactionsError(
            f"--start-offset {start_offset}: no producer has a transaction starting at that offset on "
            f"{where}; open transactions there start at: {open_at}"
        )
    if len(matches) > 1:  # two producers cannot both have the first unstable offset; refuse to guess
        ids = ", ".join(str(p.producer_id) for p in matches)
        raise TransactionsError(f"--start-offset {start_offset}: producers {ids} all start a transaction "
                                f"there on {where}; abort one with --producer-id")  # fmt: skip
    producer = matches[0]
    return explicit_abort_spec(producers.topic, producers.partition, producer.producer_id,
                               producer.producer_epoch, producer.coordinator_epoch)  # fmt: skip


def explicit_abort_spec(topic: str, partition: int, producer_id: int, producer_epoch: int,
                        coordinator_epoch: int) -> AbortSpec:  # fmt: skip
    """An abort from the user's own figures, checked. A coordinator epoch of -1 (DescribeProducers'
    answer when no marker of the producer was written there yet) is sent as 0, the lowest a leader
    accepts, as Kafka's tool does."""
    if partition < 0:
        raise TransactionsError(f"--partition: expected a partition number >= 0, got {partition}")
    if producer_id < 0:
        raise TransactionsError(f"--producer-id: expected a producer id >= 0, got {producer_id}")
    if not 0 <= producer_epoch <= 32767:
        raise TransactionsError(f"--producer-epoch: expected 0-32767 (an int16), got {producer_epoch}")
    if coordinator_epoch < -1:
        raise TransactionsError(f"--coordinator-epoch: expected -1 or more, got {coordinator_epoch}")
    return AbortSpec(topic, partition, producer_id, producer_epoch, max(coordinator_epoch, 0))
