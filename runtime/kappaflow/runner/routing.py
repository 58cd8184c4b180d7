"""From consumed messages to task input: confluent-kafka `Message`s become queued tuples per partition."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from confluent_kafka import KafkaError

from kappaflow.api.errors import StreamsError
from kappaflow.api.record import Headers
from kappaflow.tasks.drain import RawTuple

log = logging.getLogger(__name__)


class ConsumerFailedError(StreamsError):
    """The group consumer failed fatally (e.g. a static member fenced by another with its
    group.instance.id after a broker restart): it must be replaced, and the group rejoined."""


def raw_records_by_partition(messages: list[Any]) -> Iterator[tuple[tuple[str, int], list[RawTuple]]]:
    """Yield `((topic, partition), records)` for each run of one partition in a `consume()` batch.

    librdkafka hands a batch over in runs of one partition, so grouping by runs keeps per-partition order
    and costs one queue lookup per run instead of one per message. Each record is a plain
    `(offset, timestamp, key, value, headers)` tuple (`RawTuple`). Consumer errors are logged and
    skipped, fatal ones raised as ConsumerFailedError."""
    current: tuple[str, int] = ("", -1)
    batch: list[RawTuple] = []
    append = batch.append
    for msg in messages:
        err = msg.error()
        if err is not None:
            consumer_error(err)
            continue
        tp = (msg.topic(), msg.partition())
        if tp != current:
            if batch:
                yield current, batch
            current, batch = tp, []
            append = batch.append
        headers = msg.headers()
        append((msg.offset(), msg.timestamp()[1], msg.key(), msg.value(), Headers(headers or ())))
    if batch:
        yield current, batch


def consumer_error(err: KafkaError) -> None:
    """A consumed message that carries an error: a fatal one fails the consumer, the rest are logged
    (librdkafka retries them) and the message skipped."""
    if err.fatal() or err.code() == KafkaError._FATAL:
        raise ConsumerFailedError(f"the consumer failed fatally: {err}")
    log.warning("consumer error: %s", err)
