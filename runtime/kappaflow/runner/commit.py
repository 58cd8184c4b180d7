"""The commit protocol of both processing guarantees, as Kafka Streams runs it.

at_least_once:
  1. flush every task's stores (the record cache forwards and logs its dirty entries),
  2. flush the producer, so changelog and sink records are acknowledged,
  3. commit the consumed offsets, synchronously,
  4. checkpoint each store at the changelog offset Kafka acknowledged.
exactly_once_v2: 1. add the consumed offsets to the transaction (with the consumer's group metadata,
which fences zombies of an older generation), 2. meanwhile flush the stores (into the transaction:
the offsets' round trips overlap it; flushing produces, it consumes nothing, so the offsets are known
before), 3. flush the producer, 4. commit the transaction, 5. checkpoint (transactional stores apply
the commit's writes only now).

A commit either completes or raises a typed error and changes nothing local: TaskMigratedError when the
group moved on (at_least_once) or the producer was fenced (ProducerFencedError), TransactionAbortedError
when the transaction cannot commit. The tasks then keep their uncommitted offsets and stores untouched,
for the stream thread to close dirty and redo.
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from kappaflow.api.errors import TaskMigratedError
from kappaflow.api.metrics import Metrics
from kappaflow.runner.producer import StreamsProducer
from kappaflow.runner.retry import is_unreachable, retry_unreachable
from kappaflow.tasks.task import StreamTask

log = logging.getLogger(__name__)

# Offset-commit errors that mean "this member's generation is over": a rebalance, not a failure.
GENERATION_OVER = {
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError.FENCED_INSTANCE_ID,
    KafkaError._STATE,
}


def _unreachable_not_migrated(exc: BaseException) -> bool:
    code = exc.args[0].code() if isinstance(exc, KafkaException) and exc.args else None
    return code not in GENERATION_OVER and is_unreachable(exc)


class Committer:
    """Commits a set of tasks through the producer it is handed and the group consumer of the moment."""

    def __init__(self, producer: StreamsProducer, metrics: Metrics, api_timeout_s: float = 60.0) -> None:
        self._producer = producer
        self._metrics = metrics
        self._api_timeout_s = api_timeout_s

    def commit(self, tasks: list[StreamTask], consumer: Consumer) -> dict[tuple[str, int], int]:
        """Commit `tasks` (those with something to commit); return the input offsets committed."""
        started = time.perf_counter()
        offsets: dict[tuple[str, int], int] = {}
        if self._producer.exactly_once:
            for task in tasks:
                offsets.update(task.committable_offsets())
            tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]

            def flush_stores() -> None:
                for task in tasks:
                    task.prepare_commit()

            self._producer.commit(tps, consumer.consumer_group_metadata() if tps else None, flush_stores)
        else:
            for task in tasks:
                offsets.update(task.prepare_commit())
            tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
            # No task with something to commit produced nothing since the last commit, which flushed
            # what came before: a due commit of an idle thread waits on no acknowledgement.
            if tasks:
                self._producer.flush()
            if tps:
                self._commit_offsets(consumer, tps)
        written = self._producer.acknowledged
        for task in tasks:
            task.post_commit(written)
        if tasks:
            elapsed_ms = (time.perf_counter() - started) * 1000.0
            self._metrics.increment("commit-total")
            self._metrics.increment("commit-seconds-total", elapsed_ms / 1000.0)
            self._metrics.set_gauge("commit-latency-ms", elapsed_ms)
        return offsets

    def _commit_offsets(self, consumer: Consumer, tps: list[TopicPartition]) -> None:
        def commit() -> None:
            consumer.commit(offsets=tps, asynchronous=False)

        try:
            retry_unreachable("committing offsets", commit, self._api_timeout_s, _unreachable_not_migrated)
        except KafkaException as exc:
            if exc.args[0].code() in GENERATION_OVER:
                raise TaskMigratedError(f"offset commit refused, the group moved on: {exc}") from exc
            raise
