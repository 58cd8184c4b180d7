"""The group consumer's read_committed fetch held behind a hanging transaction on an input partition.

Under exactly_once_v2 the stream thread's consumer reads read_committed: on a partition where a
transaction is open it stops at the last stable offset, normally for at most a commit interval of the
upstream writer (a repartition topic) or `transaction.timeout.ms`. Held longer, at the same offset, with
records past it, the transaction is hanging (runner/open_transactions.py) and the task would stand still
in silence: this watch reports it as the changelog reader does for restorations - a warning naming the
partition and offset with the commands to abort the transaction, and `hanging-transaction-partitions`
with `reader="input"`. Only partitions of RUNNING tasks are watched: a restoring task's input is paused.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaException, TopicPartition

from kappaflow.api.metrics import Metrics
from kappaflow.runner.open_transactions import OpenTransactionWatch, remedy

log = logging.getLogger(__name__)

HighWatermarks = Callable[[list[tuple[str, int]]], dict[tuple[str, int], tuple[int, int]]]
CHECK_INTERVAL_S = 5.0
LOG_INTERVAL_S = 30.0


def held_by_open_transaction(position: int, stable_end: int, high_watermark: int) -> bool:
    """A read_committed consumer is held on a partition when it has read everything stable (its position
    at the last stable offset) and the log goes on past it (records of a transaction still open)."""
    return 0 <= stable_end <= position < high_watermark


class HeldInputs:
    """Watches the input partitions of running tasks for a fetch held by a hanging transaction."""

    def __init__(self, high_watermarks: HighWatermarks, metrics: Metrics, limit_s: float) -> None:
        """`high_watermarks`: (log start, high watermark) per partition, read_uncommitted."""
        self._high_watermarks = high_watermarks
        self._metrics = metrics
        self._watch = OpenTransactionWatch(limit_s)
        self._last_check = self._last_log = 0.0
        metrics.set_gauge("hanging-transaction-partitions", 0, reader="input")

    def due(self, now: float) -> bool:
        """Whether a check is due at `now` (time.monotonic()): one every CHECK_INTERVAL_S. The stream
        thread asks every loop iteration, so this is all it pays between checks - not even the listing
        of its inputs."""
        return now - self._last_check >= CHECK_INTERVAL_S

    def check(self, consumer: Consumer, partitions: list[tuple[str, int]], now: float) -> None:
        """Observe `partitions` (the running tasks' inputs) at `now` (time.monotonic()); the next
        check is due CHECK_INTERVAL_S later."""
        self._last_check = now
        try:
            positions = consumer.position([TopicPartition(t, p) for t, p in partitions])
            stable = {
                # asked, not cached: librdkafka's cached high is the high watermark even under
                # read_committed; a ListOffsets of this read_committed consumer answers the stable end
                tp: consumer.get_watermark_offsets(TopicPartition(*tp), timeout=5)
                for tp in partitions
            }
            highs = self._high_watermarks(partitions) if partitions else {}
        except KafkaException as exc:  # the broker is away: the next check asks again
            log.debug("checking inputs for hanging transactions: %s", exc)
            return
        watched = set()
        for tp, position in self._positions(consumer, positions, highs).items():
            stable_end = stable[tp][1] if stable[tp] is not None else -1
            if held_by_open_transaction(position, stable_end, highs[tp][1]):
                self._watch.held(tp, position, highs[tp][1], now)
                watched.add(tp)
        for tp in [tp for tp in self._watch.watched() if tp not in watched]:
            if self._watch.released(tp):
                log.warning("%s-%d: no longer held by a hanging transaction", *tp)
        self._publish(now)

    @staticmethod
    def _positions(
        consumer: Consumer, positions: list[TopicPartition], highs: dict[tuple[str, int], tuple[int, int]]
    ) -> dict[tuple[str, int], int]:
        """Where each partition's reading stands. librdkafka's position is known only once a record was
        consumed, and a fetch held from its first offset consumes none: such a partition stands at the
        group's committed offset, or at the log start when there is none."""
        found = {(tp.topic, tp.partition): int(tp.offset) for tp in positions}
        unknown = [TopicPartition(t, p) for (t, p), offset in found.items() if offset < 0]
        if unknown:
            for tp in consumer.committed(unknown, timeout=5):
                key = (tp.topic, tp.partition)
                found[key] = int(tp.offset) if tp.offset >= 0 else highs[key][0]
        return found

    def _publish(self, now: float) -> None:
        hanging = self._watch.check(now)
        self._metrics.set_gauge("hanging-transaction-partitions", len(hanging), reader="input")
        if not hanging or now - self._last_log < LOG_INTERVAL_S:
            return
        self._last_log = now
        for held in hanging:
            topic, partition, offset = held.topic, held.partition, held.offset
            log.warning(
                "input %s-%d is held at offset %d below its high watermark %d for %.0f s, past the %.0f s a "
                "transaction may stay open (kappaflow.hanging.transaction.ms): a transaction open there is "
                "hanging and no timeout will end it. %s",
                topic, partition, offset, held.high_watermark, held.held_s, self._watch.limit_s,
                remedy(topic, partition, offset),
            )  # fmt: skip
