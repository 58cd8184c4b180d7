"""How far a task's input partitions lag behind the broker, for Kafka Streams' idle-task rule.

A task reading several partitions (a join) must not run ahead on one of them while records with earlier
timestamps wait on the broker for another (KIP-695, `max.task.idle.ms`). The task decides
(`StreamTask.ready_to_process`); this answers its one question - "is there fetchable data on this
partition that has not reached me yet?" - from librdkafka's local state, with no request per record.
"""

from __future__ import annotations

import logging

from confluent_kafka import Consumer, KafkaException, TopicPartition

from kappaflow.api.metrics import Metrics

log = logging.getLogger(__name__)

COMMITTED_TIMEOUT_S = 5.0
LAG_INTERVAL_S = 10.0


class FetchedLag:
    """`lag(topic, partition)`: records on the broker past the consumer's position, or None if unknown.

    The high watermark is the one the last fetch response carried. Under read_committed it is still the
    high watermark, not the last stable offset (librdkafka keeps the LSO but exposes it only in its
    statistics): records of a transaction still open count as lag, so a task may wait for them - at most
    until the writer's next commit (a commit interval for a repartition topic), and a transaction held
    open past its timeout is reported by runner/held_inputs.py. Java counts from the LSO and does not
    wait there. The position is librdkafka's application position, which steps over transaction
    markers; before the first record of an assignment it is invalid, so the group's committed offset
    (fetched once per partition and assignment) or the log start stands in for it."""

    def __init__(self, consumer: Consumer) -> None:
        self._consumer = consumer
        self._start: dict[tuple[str, int], int] = {}

    def reset(self) -> None:
        """Forget start offsets: called on every assignment change."""
        self._start.clear()

    def __call__(self, topic: str, partition: int) -> int | None:
        tp = TopicPartition(topic, partition)
        try:
            low, high = self._consumer.get_watermark_offsets(tp, cached=True)
            position = self._consumer.position([tp])[0].offset
        except KafkaException:
            return None
        if high < 0:
            return None  # no fetch response yet
        if position < 0:
            position = self._start_offset(topic, partition, low)
            if position < 0:
                return None
        return max(0, high - position)

    def _start_offset(self, topic: str, partition: int, low: int) -> int:
        key = (topic, partition)
        start = self._start.get(key)
        if start is None:
            try:
                committed = self._consumer.committed([TopicPartition(topic, partition)], COMMITTED_TIMEOUT_S)
                start = committed[0].offset
            except KafkaException as exc:
                log.debug("committed offset of %s-%s unavailable: %s", topic, partition, exc)
                return -1
            self._start[key] = start
        return start if start >= 0 else low


def report_consumer_lag(consumer: Consumer, assigned: list[tuple[str, int]], metrics: Metrics) -> None:
    """The `consumer-lag` gauge per assigned partition, from watermarks the fetches already carried."""
    try:
        positions = consumer.position([TopicPartition(t, p) for t, p in assigned])
    except KafkaException as exc:  # e.g. a broker restart: the next report will do
        log.debug("consumer lag not reported: %s", exc)
        return
    for tp in positions:
        try:
            _low, high = consumer.get_watermark_offsets(tp, cached=True)
        except KafkaException:
            continue
        if tp.offset >= 0:
            metrics.set_gauge(
                "consumer-lag", max(0, high - tp.offset), topic=tp.topic, partition=str(tp.partition)
            )
