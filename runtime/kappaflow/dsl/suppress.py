"""`KTable.suppress`: Kafka Streams' Suppressed and BufferConfig, and the processor behind them.

- `Suppressed.until_window_closes(BufferConfig.unbounded())` (final results of a windowed table): each
  window's latest result is held until stream time reaches window end + grace, then emitted once;
  tombstones are dropped then (safe: the window's result never existed downstream).
- `Suppressed.until_time_limit(limit, buffer_config)`: each key's latest update is held until stream
  time passes the key's first buffered update time + limit (rate limiting); tombstones are emitted.
A full buffer either emits its oldest entries early (`emit_early_when_full`, time-limit only) or stops
the application (`should_shut_down`), exactly as Java's strict/eager buffer configs. The emitted record
keeps the timestamp and headers of the key's latest update and carries that update's old value (Java's
evictWhile). A lookup into the suppressed table (a join's value getter) answers, for a buffered key, the
value from before its first buffered update - what downstream last saw - and the parent's value for any
other key (Java's `priorValueForBuffered`). Stream time is the processor's own observed maximum.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Protocol

from kappaflow.api.errors import StreamsError, TopologyError
from kappaflow.api.processor import ProcessorContext, to_millis
from kappaflow.api.record import Record
from kappaflow.api.serdes import Serde
from kappaflow.api.windows import Windowed
from kappaflow.dsl.change import Change, ChangeSerde
from kappaflow.state.time_ordered_buffer import BufferedEntry, ChangeCodec
from kappaflow.state.timestamped import ValueAndTimestamp

ValueGetter = Callable[[Any], ValueAndTimestamp[Any] | None]

log = logging.getLogger(__name__)
UNBOUNDED = (1 << 63) - 1


@dataclass(frozen=True)
class BufferConfig:
    """How much a suppression buffer may hold and what happens when it is full."""

    records_limit: int = UNBOUNDED
    bytes_limit: int = UNBOUNDED
    shut_down_when_full: bool = True

    @staticmethod
    def unbounded() -> BufferConfig:
        return BufferConfig()

    @staticmethod
    def max_records(records: int) -> BufferConfig:
        """At most `records` keys; emits the oldest early when full unless `should_shut_down()`."""
        return BufferConfig(records_limit=records, shut_down_when_full=False)

    @staticmethod
    def max_bytes(size: int) -> BufferConfig:
        return BufferConfig(bytes_limit=size, shut_down_when_full=False)

    def with_max_records(self, records: int) -> BufferConfig:
        return replace(self, records_limit=records)

    def with_max_bytes(self, size: int) -> BufferConfig:
        return replace(self, bytes_limit=size)

    def should_shut_down(self) -> BufferConfig:
        """Java's `shutDownWhenFull()`: a full buffer stops the application (nothing emitted early)."""
        return replace(self, shut_down_when_full=True)

    def emit_early_when_full(self) -> BufferConfig:
        return replace(self, shut_down_when_full=False)


@dataclass(frozen=True)
class Suppressed:
    """How `KTable.suppress` holds back updates, as Java's `Suppressed`: only each window's final result
    (`until_window_closes`) or the latest update per key after a time limit (`until_time_limit`)."""

    final_results: bool
    time_limit_ms: int
    buffer: BufferConfig
    name: str | None = None

    @staticmethod
    def until_window_closes(buffer: BufferConfig) -> Suppressed:
        """Emit each window's result once, when the window closes (its end plus grace, in stream time), and
        nothing before."""
        if not buffer.shut_down_when_full:
            raise TopologyError(
                "until_window_closes needs a strict buffer: unbounded() or should_shut_down()"
            )
        return Suppressed(True, 0, buffer)

    @staticmethod
    def until_time_limit(limit: timedelta | int, buffer: BufferConfig) -> Suppressed:
        """Emit the latest update of a key once `limit` of stream time has passed since its first held
        update, holding at most what `buffer` allows."""
        return Suppressed(False, to_millis(limit, "time limit"), buffer)

    def with_name(self, name: str) -> Suppressed:
        """Name the suppression processor (and its buffer's store and changelog)."""
        return replace(self, name=name)


def change_codec(value_serde: Serde[Any] | None) -> Any:
    def factory(default: Serde[Any] | None) -> ChangeCodec:
        serde = ChangeSerde(value_serde or default)

        def encode(change: Change[Any]) -> bytes:
            return serde.serialize("", change) or b""

        def decode(raw: bytes) -> Change[Any]:
            return serde.deserialize("", raw) if raw else Change(None, None)  # type: ignore[return-value]

        return encode, decode

    return factory


class KTableSuppressProcessor:
    context: ProcessorContext

    def __init__(self, suppressed: Suppressed, grace_ms: int, store_name: str, label: str) -> None:
        self.suppressed = suppressed
        self.grace_ms = grace_ms
        self.store_name = store_name
        self.label = label
        self.observed_stream_time = -1

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.buffer = context.get_state_store(self.store_name)

    def _buffer_time(self, record: Record[Any, Any]) -> int:
        if self.suppressed.final_results:
            key = record.key
            if not isinstance(key, Windowed):
                raise StreamsError(
                    f"{self.label}: until_window_closes needs a windowed table, got key {key!r}"
                )
            return key.window.end
        return record.timestamp

    def process(self, record: Record[Any, Any]) -> None:
        self.observed_stream_time = max(self.observed_stream_time, record.timestamp)
        metadata = self.context.record_metadata()
        topic = (metadata.topic or "") if metadata is not None else ""
        self.buffer.put(
            self._buffer_time(record), record.key, record.value, record.timestamp, record.headers, topic
        )
        self._enforce()

    def _enforce(self) -> None:
        wait = self.grace_ms if self.suppressed.final_results else self.suppressed.time_limit_ms
        expiry = self.observed_stream_time - wait
        buffer = self.buffer
        buffer.evict_while(lambda: buffer.min_time() <= expiry, self._emit)
        config = self.suppressed.buffer

        def over() -> bool:
            return bool(buffer.num_records() > config.records_limit or buffer.size_bytes > config.bytes_limit)

        if over():
            if config.shut_down_when_full:
                raise StreamsError(
                    f"suppression buffer '{self.store_name}' exceeded its capacity "
                    f"({buffer.num_records()} records, {buffer.size_bytes} bytes) and is configured to "
                    f"shut down when full"
                )
            buffer.evict_while(over, self._emit)

    def _emit(self, entry: BufferedEntry) -> None:
        change: Change[Any] = entry.change
        if change.new_value is None and self.suppressed.final_results:
            return
        self.context.forward(Record(entry.key, change, entry.record_time, entry.headers))

    def close(self) -> None:
        return None


class _GetterSupplier(Protocol):
    def get(self, context: ProcessorContext) -> ValueGetter: ...


def suppressed_getter(
    parent: _GetterSupplier, buffer_store: str
) -> Callable[[ProcessorContext], ValueGetter]:
    """The suppressed table's value getter: a buffered key's prior value (its time unknown, -1, as in
    Java), else the parent table's value."""

    def bind(context: ProcessorContext) -> ValueGetter:
        buffer = context.get_state_store(buffer_store)
        lookup = parent.get(context)

        def get(key: Any) -> ValueAndTimestamp[Any] | None:
            buffered, prior = buffer.prior_value(key)
            if buffered:
                return ValueAndTimestamp.make(prior, -1)
            return lookup(key)

        return get

    return bind
