"""Reading held back by a transaction left open too long: when waiting stops being normal.

Under exactly_once_v2 a read_committed reader (the restore consumer, the group consumer) stops at a
partition's last stable offset while a transaction is open below its high watermark. That is normal for
up to `transaction.timeout.ms`, after which the broker's transaction coordinator aborts the transaction
(it checks every `transaction.abort.timed.out.transaction.cleanup.interval.ms`, 10 s by default). A
reader held for longer is behind a *hanging* transaction: one whose coordinator no longer knows it is open
on that partition, which no producer and no timeout will ever end - in issue 29, a single combined KRaft
node that completed transactions after a crash without writing their markers (tests/harness/
kafka_split.py). Only the partition's leader can be told to end it: KIP-664's abort (the Admin API's
WriteTxnMarkers: `kappaflow transactions abort`, or Kafka's `kafka-transactions.sh abort`;
docs/cli.md "kappaflow transactions").

This module is the pure decision - which partitions are held, since when, and which of them have been
held past the limit; the changelog reader observes and logs, the metrics publish it.
"""

from __future__ import annotations

from dataclasses import dataclass

# What the broker adds to transaction.timeout.ms before it aborts a timed-out transaction: its check
# interval (transaction.abort.timed.out.transaction.cleanup.interval.ms, 10 s by default) and a margin.
BROKER_ABORT_SLACK_S = 15.0


@dataclass(frozen=True, slots=True)
class HeldPartition:
    """A partition whose reading is held at `offset` (its last stable offset) below `high_watermark`."""

    topic: str
    partition: int
    offset: int
    high_watermark: int
    held_s: float


def remedy(topic: str, partition: int, offset: int) -> str:
    """The commands that find and abort the transaction holding `topic`-`partition` at `offset`, as the
    warnings name them (the transaction's first offset is the offset the reader is held at)."""
    return (
        f"Its producer: `kappaflow transactions describe-producers --topic {topic} --partition {partition}`; "
        f"abort it with `kappaflow transactions abort --topic {topic} --partition {partition} --start-offset "
        f"{offset}` (or Kafka's kafka-transactions.sh, same arguments; docs/operations.md)"
    )


def hanging_after_s(configured_ms: int, transaction_timeout_ms: int) -> float:
    """How long a held read is normal: `kappaflow.hanging.transaction.ms` when set, else the producers'
    transaction timeout plus the broker's abort check."""
    if configured_ms > 0:
        return configured_ms / 1000.0
    return transaction_timeout_ms / 1000.0 + BROKER_ABORT_SLACK_S


class OpenTransactionWatch:
    """Per partition: since when reading has been held at the same stable offset below the high
    watermark. A partition held longer than `limit_s` is hanging."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self._since: dict[tuple[str, int], tuple[int, float]] = {}
        self._ends: dict[tuple[str, int], int] = {}
        self._last: dict[tuple[str, int], HeldPartition] = {}

    def held(self, tp: tuple[str, int], offset: int, high_watermark: int, now: float) -> None:
        """Reading `tp` reached its stable end at `offset` below `high_watermark` at `now` (a reader
        is told so once per end reached). A new offset restarts the clock (a transaction ended,
        another one may be open)."""
        first = self._since.get(tp)
        if first is None or first[0] != offset:
            self._since[tp] = (offset, now)
            self._ends[tp] = high_watermark
            self._last.pop(tp, None)

    def check(self, now: float) -> list[HeldPartition]:
        """The partitions held longer than the limit at `now` (the rest are within what the broker's
        transaction timeout allows)."""
        for tp, (offset, since) in self._since.items():
            if now - since > self.limit_s:
                self._last[tp] = HeldPartition(tp[0], tp[1], offset, self._ends[tp], now - since)
        return self.hanging()

    def released(self, tp: tuple[str, int]) -> bool:
        """Reading `tp` moved on (or stopped): forget it; True if it had been hanging."""
        self._since.pop(tp, None)
        self._ends.pop(tp, None)
        return self._last.pop(tp, None) is not None

    def watched(self) -> list[tuple[str, int]]:
        """The partitions held at the moment (past the limit or not yet)."""
        return list(self._since)

    def hanging(self) -> list[HeldPartition]:
        """The partitions held past the limit, as last observed."""
        return sorted(self._last.values(), key=lambda h: (h.topic, h.partition))
