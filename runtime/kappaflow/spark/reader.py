"""Reading a Spark task's offset ranges of its input with librdkafka (the `kafka-client` reader).

Spark's Kafka source hands Python one Row object per record, which costs more than running the topology
on it; each reprocessing task reads its ranges here with the runtime's own client instead, and turns the
consumed batches into the runtime's queued tuples with the native core's message reader where it is
installed (the same reader the stream threads use).
"""

from __future__ import annotations

import bisect
import operator
import time
from collections.abc import Generator
from typing import Any

from kappaflow.api.errors import StreamsError
from kappaflow.api.record import Headers
from kappaflow.clients.rdkafka_log import with_logger
from kappaflow.tasks.drain import RawTuple
from kappaflow.tasks.native import MessageRuns

# One range is read front to back, and only the range: the fetcher stays a few small fetches ahead of
# the reader, so the last one runs little past the range's end. 16 MB fetches and a 256 MB queue fetched
# 1.4-2.4x each 250k-record range of bench/reprocess.py's input (the fetcher ran on to the partition's
# end while the reader caught up), and once the queue held librdkafka's default 100k messages
# (queued.min.messages) the fetcher waited fetch.queue.backoff.ms, 1 s by default, before asking again.
# Here the queue is bounded by bytes alone and the fetcher asks again 1 ms after the reader made room:
# reading 1M records in four ranges took 0.8-1.0 s and 1.0-1.1 CPU s against 1.2-2.4 s and 1.2-1.4 s,
# fetching 1.1-1.3x of each range (bench/process_cpu.py's numbers in docs/performance-history.md).
_READ_TUNING: dict[str, Any] = {
    "fetch.max.bytes": 1024 * 1024,
    "max.partition.fetch.bytes": 256 * 1024,
    "queued.max.messages.kbytes": 1024,
    "queued.min.messages": 10_000_000,
    "fetch.queue.backoff.ms": 1,
    "fetch.wait.max.ms": 10,
}
_READ_BATCH = 50_000


def read_range(
    settings: dict[str, Any], topic: str, partition: int, start: int, end: int, native: bool = True
) -> list[RawTuple]:
    """Records [start, end) of one partition, read with librdkafka (the `kafka-client` reader), all at once:
    what a task reading several inputs needs, to order them by timestamp (read_batches)."""
    batches = read_batches(settings, topic, partition, start, end, native)
    return [record for batch in batches for record in batch]


def read_batches(
    settings: dict[str, Any], topic: str, partition: int, start: int, end: int, native: bool = True
) -> Generator[list[RawTuple], None, None]:
    """Records [start, end) of one partition, read with librdkafka, in the batches consumed (at most
    `_READ_BATCH` records each, none empty): a task reading one range processes each before the next is
    read, so its memory does not grow with the range (executor.run_task).

    Spark's Kafka source hands Python one Row object per record, which costs more than running the
    topology on it; reading the same range here with the runtime's own client is several times cheaper.
    With read_committed, transaction markers occupy offsets that are never delivered, so the loop stops
    at the first position at or past `end`, not at a record count. The consumer is closed when the
    iteration ends or the generator is closed.
    """
    from confluent_kafka import Consumer, TopicPartition

    if end <= start:
        return
    consumer = Consumer(
        with_logger({**settings, **_READ_TUNING, "enable.partition.eof": True, "enable.auto.commit": False})
    )
    reader = _native_reader(native)
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        position = start
        deadline = time.monotonic() + 300
        while position < end:
            # consume() returns when it has the count asked for or at the timeout: asking for what is
            # left (markers aside) keeps the last call from idling a whole timeout on a short batch.
            messages: list[Any] = consumer.consume(max(1, min(_READ_BATCH, end - position)), 0.5)
            records: list[RawTuple] = []
            if reader is not None:
                position = _read_natively(reader, messages, records, position, end)
            else:
                position = _read_in_python(messages, records, position, end, f"{topic}-{partition}")
            if records:
                yield records
            elif not messages and time.monotonic() > deadline:
                raise StreamsError(f"reading {topic}-{partition}: stuck at {position} before {end}")
    finally:
        consumer.close()


def _read_in_python(messages: list[Any], records: list[RawTuple], position: int, end: int, tp: str) -> int:
    """read_batches' loop body without the native core: confluent-kafka's accessors per message. Returns
    the new position; records at or past `end` are left out."""
    from confluent_kafka import KafkaError

    for msg in messages:
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                position = max(position, msg.offset())
                continue
            raise StreamsError(f"reading {tp} failed: {err}")
        offset = msg.offset()
        position = offset + 1
        if offset >= end:
            break
        headers = msg.headers()  # queued as the runtime's routing queues them: a plain tuple
        records.append((offset, msg.timestamp()[1], msg.key(), msg.value(), Headers(headers or ())))
    return position


def _read_natively(
    reader: MessageRuns, messages: list[Any], records: list[RawTuple], position: int, end: int
) -> int:
    """read_batches' loop body through the native core's message reader: one call turns the batch into
    RawTuples (per message, confluent-kafka's accessors from Python were 6% of a word count's worker
    samples). Returns the new position; records at or past `end` are left out."""
    from confluent_kafka import KafkaError

    runs, error = reader(messages)
    if error is not None:
        raise error
    for _tp, run in runs:
        if run[-1][0] >= end:
            run = run[: bisect.bisect_left(run, end, key=_FIRST)]
        records.extend(run)
    if records and records[-1][0] >= position:
        position = records[-1][0] + 1
    # The partition's end (EOF) follows its last record in a batch: its offset is the position when
    # transaction markers (never delivered) occupy the last offsets of the range.
    for msg in reversed(messages):
        err = msg.error()
        if err is None:
            break
        if err.code() == KafkaError._PARTITION_EOF:
            position = max(position, msg.offset())
    return position


def _range_read_error(err: Any) -> None:
    """The native reader's error callback: the partition's end is expected (read_batches reads its offset),
    anything else fails the read."""
    from confluent_kafka import KafkaError

    if err.code() != KafkaError._PARTITION_EOF:
        raise StreamsError(f"reading a range failed: {err}")


_NATIVE_READERS: dict[bool, MessageRuns | None] = {}


def _native_reader(enabled: bool) -> MessageRuns | None:
    """The native core's message reader for read_batches (one per worker process), or None: no core, or
    `kappaflow.native.enabled=false` in the job's config."""
    if enabled not in _NATIVE_READERS:
        from kappaflow.runner.routing import message_reader
        from kappaflow.tasks.native import core

        installed = core(enabled)
        _NATIVE_READERS[enabled] = None if installed is None else message_reader(installed, _range_read_error)
    return _NATIVE_READERS[enabled]


_FIRST = operator.itemgetter(0)  # of a RawTuple: its offset
