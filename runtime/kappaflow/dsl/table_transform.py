"""`KTable.transform_values`: a `ValueTransformerWithKey` over a table, as Kafka Streams'
`KTableTransformValues`.

The transformer sees every update, null values included (a tombstone is transformed too, and a null
result deletes). Materialized, the result is written to its store and old values come from that store;
unmaterialized, old values are recomputed by transforming the parent's old value and lookups (joins)
transform the parent's current value with a transformer of their own. The transformer's context refuses
`forward`: a table's value is its only output.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from kappaflow.api.errors import StreamsError
from kappaflow.api.processor import (
    Cancellable,
    ProcessorContext,
    PunctuationType,
    TaskId,
    ValueTransformerWithKey,
)
from kappaflow.api.record import Headers, Record, RecordMetadata
from kappaflow.dsl.change import Change
from kappaflow.dsl.table_processors import _Stateful
from kappaflow.state.api import RecordContext
from kappaflow.state.timestamped import ValueAndTimestamp

if TYPE_CHECKING:
    from kappaflow.api.config import StreamsConfig

TransformerSupplier = Callable[[], ValueTransformerWithKey[Any, Any, Any]]


class ForwardingDisabledContext:
    """The task's context, minus `forward`, plus the old-style record accessors (`topic()` ...
    `headers()`, Java's `processor.ProcessorContext`): what a value transformer is given. The processor
    hands it each record before transforming; a value getter's transformer reads the task's record."""

    def __init__(self, inner: ProcessorContext) -> None:
        self._inner = inner
        self._record: Record[Any, Any] | None = None

    def use_record(self, record: Record[Any, Any] | None) -> None:
        """The record being transformed (None outside one)."""
        self._record = record

    def topic(self) -> str | None:
        metadata = self._inner.record_metadata()
        return metadata.topic if metadata is not None and metadata.topic else None

    def partition(self) -> int:
        metadata = self._inner.record_metadata()
        return metadata.partition if metadata is not None and metadata.topic else -1

    def offset(self) -> int:
        metadata = self._inner.record_metadata()
        return metadata.offset if metadata is not None and metadata.topic else -1

    def timestamp(self) -> int:
        if self._record is not None:
            return self._record.timestamp
        current = self._task_record()
        return -1 if current is None else current.timestamp

    def headers(self) -> Headers:
        if self._record is not None:
            return self._record.headers
        current = self._task_record()
        return Headers() if current is None else current.headers

    def _task_record(self) -> RecordContext | None:
        """The task's current record context (a value getter runs inside another node's record)."""
        read = getattr(self._inner, "record_context", None)
        return read() if callable(read) else None

    @property
    def application_id(self) -> str:
        return self._inner.application_id

    @property
    def task_id(self) -> TaskId:
        return self._inner.task_id

    @property
    def app_config(self) -> StreamsConfig:
        return self._inner.app_config

    def forward(self, record: Record[Any, Any], child: str | None = None) -> None:
        raise StreamsError("a ValueTransformerWithKey may not forward: its result is the table's value")

    def schedule(
        self, interval: timedelta | int, punctuation_type: PunctuationType, callback: Callable[[int], None]
    ) -> Cancellable:
        return self._inner.schedule(interval, punctuation_type, callback)

    def get_state_store(self, name: str) -> Any:
        return self._inner.get_state_store(name)

    def record_metadata(self) -> RecordMetadata | None:
        return self._inner.record_metadata()

    def current_stream_time_ms(self) -> int:
        return self._inner.current_stream_time_ms()

    def current_system_time_ms(self) -> int:
        return self._inner.current_system_time_ms()

    def commit(self) -> None:
        self._inner.commit()


class KTableTransformValuesProcessor(_Stateful):
    def __init__(
        self,
        transformer: ValueTransformerWithKey[Any, Any, Any],
        store_name: str | None,
        send_old_values: Callable[[], bool],
        label: str,
    ) -> None:
        super().__init__(store_name, send_old_values, label)
        self.transformer = transformer

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.transformer_context = ForwardingDisabledContext(context)
        self.transformer.init(self.transformer_context)

    def process(self, record: Record[Any, Change[Any]]) -> None:
        change = record.value
        self.transformer_context.use_record(record)
        new = self.transformer.transform(record.key, change.new_value)
        if self.store_name is not None:
            previous = self.store.get(record.key) if self.send_old() else None
            old = None if previous is None else previous.value
        else:
            old = self.transformer.transform(record.key, change.old_value) if self.send_old() else None
        self.transformer_context.use_record(None)
        self._emit(record, new, old, record.timestamp)

    def close(self) -> None:
        self.transformer.close()


def transformed_lookup(
    supplier: TransformerSupplier,
    context: ProcessorContext,
    lookup: Callable[[Any], ValueAndTimestamp[Any] | None],
) -> Callable[[Any], ValueAndTimestamp[Any] | None]:
    """A value getter over an unmaterialized transform: the parent's value, transformed by a
    transformer of the getter's own (Java's KTableTransformValuesGetter; -1 for an unknown time)."""
    transformer = supplier()
    transformer.init(ForwardingDisabledContext(context))

    def get(key: Any) -> ValueAndTimestamp[Any] | None:
        found = lookup(key)
        value = transformer.transform(key, None if found is None else found.value)
        return ValueAndTimestamp.make(value, -1 if found is None else found.timestamp)

    return get
