"""`RecordFailures`: what a task does with a record that cannot be deserialized or processed.

Kafka Streams hands such a record to a configured handler (`deserialization.exception.handler`,
`processing.exception.handler`): CONTINUE drops it (counted, and sent to the dead-letter topic when one
is set), FAIL stops the application with an error that names the setting that decided. The task's drain
loop only says which record failed and how; the handlers, the error messages, the metrics and the
dead letters are here, in one place.
"""

from __future__ import annotations

from typing import Any

from kappaflow.api.config import StreamsConfig
from kappaflow.api.errors import HandlerResponse, ProcessingError, StreamsError
from kappaflow.api.metrics import Metrics
from kappaflow.api.record import Headers
from kappaflow.state.api import RecordContext
from kappaflow.tasks.collector import RecordCollector
from kappaflow.tasks.drain import RawRecord
from kappaflow.tasks.handlers import (
    DESERIALIZATION_HANDLER,
    PROCESSING_HANDLER,
    SKIP_HINT,
    FailedRecord,
    dead_letter_headers,
    handler_setting,
    log_and_fail,
    resolve_handler,
)


class RecordFailures:
    """One task's failed-record handling: it owns the two resolved handlers, the settings named when
    they fail the application, and the dead-letter topic; it counts dropped records and dead letters
    under the task's labels and sends dead letters through the task's collector."""

    def __init__(
        self, config: StreamsConfig, metrics: Metrics, collector: RecordCollector, labels: dict[str, str]
    ) -> None:
        self.metrics = metrics
        self.collector = collector
        self.labels = labels
        self._deserialization_handler = resolve_handler(
            config.get(DESERIALIZATION_HANDLER), DESERIALIZATION_HANDLER
        )
        self._processing_handler = resolve_handler(config.get(PROCESSING_HANDLER), PROCESSING_HANDLER)
        # the settings that decided, named in the error when a handler fails the application
        self._deserialization_setting = handler_setting(
            DESERIALIZATION_HANDLER, config.get(DESERIALIZATION_HANDLER)
        )
        self._processing_setting = handler_setting(PROCESSING_HANDLER, config.get(PROCESSING_HANDLER))
        self.dead_letter_topic = config.get_str("errors.dead.letter.queue.topic.name")
        self._dead_letters = 0  # dead letters written since the last commit, counted when it succeeds
        if self.dead_letter_topic:
            # at zero from the task's start, so the first dead letters are an increase alerts can see
            dead_letters = {"topic": self.dead_letter_topic, **labels}
            self.metrics.increment("dead-letter-records-total", 0, **dead_letters)

    def deserialization_failed(
        self, error: StreamsError, topic: str, partition: int, raw: RawRecord, source: str
    ) -> None:
        """The deserialization handler's turn on `error` (the source's, naming the record)."""
        failed = FailedRecord(
            topic, partition, raw.offset, raw.timestamp, raw.key, raw.value, raw.headers, source
        )
        self._handle(self._deserialization_handler, self._deserialization_setting, error, failed, raw)

    def processing_failed(
        self, exc: Exception, topic: str, partition: int, raw: RawRecord, node: str
    ) -> None:
        """The processing handler's turn on `exc`, raised in `node` while processing `raw`."""
        error = ProcessingError(
            f"error processing record {topic}-{partition}@{raw.offset} in node '{node}': "
            f"{type(exc).__name__}: {exc}",
            node=node,
            topic=topic,
            partition=partition,
            offset=raw.offset,
        )
        error.__cause__ = exc
        failed = FailedRecord(
            topic, partition, raw.offset, raw.timestamp, raw.key, raw.value, raw.headers, node
        )
        self._handle(self._processing_handler, self._processing_setting, error, failed, raw)

    @property
    def handles_per_node(self) -> bool:
        """Whether a processing failure needs the handler at the node that raised it: any handler but
        the default log_and_fail may answer CONTINUE, and then (Java's ProcessorNode) only that node's
        output is lost - its siblings and the rest of the topology still see the record. With
        log_and_fail every failure ends the task anyway, wherever it is caught."""
        return self._processing_handler is not log_and_fail

    def punctuation_failed(self, exc: Exception, node: str, timestamp: int) -> None:
        """The processing handler's turn on `exc`, raised by a punctuator of `node` (Java's
        StreamTask.punctuate): CONTINUE goes on with the next punctuation; FAIL ends the task."""
        error = ProcessingError(
            f"error in a punctuation of node '{node}' at {timestamp}: {type(exc).__name__}: {exc}", node=node
        )
        error.__cause__ = exc
        failed = FailedRecord("", -1, -1, timestamp, None, None, Headers(), node)
        self._handle(self._processing_handler, self._processing_setting, error, failed, None)

    def flush_error(self, exc: Exception, node: str, record: RecordContext | None) -> ProcessingError:
        """The error for `exc`, raised in `node` while a commit flushed the record caches (a cached table's
        updates going downstream), naming the input record the failing update came from (`record`, the
        cache entry's context: the last record that updated the key) when the store reported it. Only
        log_and_fail gets here: any other handler was asked at the node, where `forward()` runs it around
        each child (`handles_per_node`). So the commit fails, with an error that names the node and the
        record, as a failure while processing a record does."""
        if record is not None and not record.topic:
            record = None  # a punctuation's write: no input record to name
        source = "" if record is None else f" (the cached update from record {_position(record)})"
        error = ProcessingError(
            f"error in node '{node}' while a commit flushed the record cache{source}: "
            f"{type(exc).__name__}: {exc} "
            f"[{self._processing_setting} failed the application; log_and_continue skips such an update]",
            node=node,
            topic=record.topic if record else "",
            partition=record.partition if record else -1,
            offset=record.offset if record else -1,
        )
        error.__cause__ = exc
        return error

    def node_failed(self, exc: Exception, node: str, context: RecordContext, raw: RawRecord | None) -> None:
        """The processing handler's turn on `exc`, raised in `node` below the task's first node (while
        processing `raw`, or in a punctuation or a cache flush when None): see `handles_per_node`."""
        where = (
            f"record {context.topic}-{context.partition}@{context.offset}"
            if context.topic
            else "a punctuation"
        )
        error = ProcessingError(
            f"error processing {where} in node '{node}': {type(exc).__name__}: {exc}",
            node=node,
            topic=context.topic,
            partition=context.partition,
            offset=context.offset,
        )
        error.__cause__ = exc
        key = value = None
        if raw is not None:
            key, value = raw.key, raw.value
        failed = FailedRecord(
            context.topic,
            context.partition,
            context.offset,
            context.timestamp,
            key,
            value,
            context.headers,
            node,
        )
        self._handle(self._processing_handler, self._processing_setting, error, failed, raw)

    def _handle(
        self,
        handler: Any,
        setting: str,
        error: StreamsError,
        failed: FailedRecord,
        raw: RawRecord | None,
    ) -> None:
        response = handler(error, failed)
        if response is not HandlerResponse.CONTINUE:
            error.args = (f"{error} [{setting} failed the application on this record{SKIP_HINT}]",)
            raise error
        self.metrics.increment("dropped-records-total", reason=type(error).__name__, **self.labels)
        if self.dead_letter_topic and raw is not None:  # no source record: nothing to send
            self.collector.send_dead_letter(
                self.dead_letter_topic,
                raw.key,
                raw.value,
                dead_letter_headers(failed, error),
                max(raw.timestamp, 0),
                self._dead_letter_written,
            )

    def _dead_letter_written(self) -> None:
        self._dead_letters += 1

    def committed(self) -> None:
        """The task committed: the dead letters written since (inside the transaction that just
        committed, under exactly_once_v2) are counted now, so the counter never counts a record that a
        failed write or an aborted transaction lost."""
        if self._dead_letters:
            labels = {"topic": self.dead_letter_topic, **self.labels}
            self.metrics.increment("dead-letter-records-total", self._dead_letters, **labels)
            self._dead_letters = 0


def _position(record: RecordContext) -> str:
    """A record's place in its topic as the errors write it: topic-partition@offset."""
    return f"{record.topic}-{record.partition}@{record.offset}"
