"""Windowed aggregations: `KGroupedStream.windowed_by(TimeWindows...)` -> `count/reduce/aggregate`.

The result is a KTable keyed by `Windowed(key, Window(start, end))`, backed by a window store. Kafka
Streams' rules, record for record: a record updates every window that contains it unless the window is
closed (`window end <= observed stream time - grace`), in which case it is dropped for that window,
counted in `dropped-records-total{reason=late}` and logged at debug level; the result's timestamp is the
max of the record's and the window aggregate's; with caching, updates to a window collapse per commit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Generic

from kappaflow.api.record import Record
from kappaflow.api.serdes import Long, Serde
from kappaflow.api.windowed_serdes import TimeWindowedSerde
from kappaflow.api.windows import Windowed
from kappaflow.dsl.change import Change
from kappaflow.dsl.emit import EmitStrategy, WindowEmitMixin, time_window_emitter, with_emitter
from kappaflow.dsl.graph import InternalBuilder, window_store_builder
from kappaflow.dsl.ktable import KTable
from kappaflow.dsl.options import Materialized
from kappaflow.dsl.stream_processors import drop_record
from kappaflow.dsl.table_processors import _Stateful
from kappaflow.dsl.typevars import VA, K, V
from kappaflow.dsl.windows import TimeWindows
from kappaflow.state.timestamped import ValueAndTimestamp

log = logging.getLogger(__name__)


class KStreamWindowAggregateProcessor(WindowEmitMixin, _Stateful):
    def __init__(
        self,
        windows: TimeWindows,
        store_name: str,
        send_old_values: Callable[[], bool],
        label: str,
        initializer: Callable[[], Any] | None = None,
        aggregator: Callable[[Any, Any, Any], Any] | None = None,
        reducer: Callable[[Any, Any], Any] | None = None,
    ) -> None:
        super().__init__(store_name, send_old_values, label)
        self.windows = windows
        self.initializer = initializer
        self.aggregator = aggregator
        self.reducer = reducer
        self.observed_stream_time = -1

    def process(self, record: Record[Any, Any]) -> None:
        key, value, ts = record.key, record.value, record.timestamp
        if key is None:
            log.debug("skipping record with null key in %s", self.label)
            drop_record(self.context, "null-key", self.label)
            return
        if self.reducer is not None and value is None:
            drop_record(self.context, "null-value", self.label)
            return
        self.observed_stream_time = max(self.observed_stream_time, ts)
        close_time = self.observed_stream_time - self.windows.grace_ms
        for start, window in self.windows.windows_for(ts).items():
            if window.end <= close_time:
                log.debug(
                    "skipping record for expired window: key=%r ts=%d window=[%d,%d) close=%d in %s",
                    key, ts, window.start, window.end, close_time, self.label,
                )  # fmt: skip
                drop_record(self.context, "late", self.label)
                continue
            previous: ValueAndTimestamp[Any] | None = self.store.fetch(key, start)
            old = None if previous is None else previous.value
            if previous is None:
                timestamp = ts
                if self.reducer is not None:
                    new = value
                else:
                    new = self.aggregator(key, value, self.initializer())  # type: ignore[misc]
            else:
                timestamp = max(ts, previous.timestamp)
                if self.reducer is not None:
                    new = self.reducer(old, value)
                else:
                    new = self.aggregator(key, value, old)  # type: ignore[misc]
            self.store.put(key, ValueAndTimestamp(new, timestamp), start)
            change = Change(new, old if self.send_old() else None)
            self._forward_update(Record(Windowed(key, window), change, timestamp, record.headers))
        self._emit_closed(record, close_time)


def _count_add(key: Any, value: Any, aggregate: int) -> int:
    return aggregate + 1


def _zero() -> int:
    return 0


class TimeWindowedKStream(Generic[K, V]):
    """A grouped stream cut into time windows; aggregations return a windowed KTable."""

    def __init__(self, grouped: Any, windows: TimeWindows) -> None:
        self._grouped = grouped
        self._builder: InternalBuilder = grouped._builder
        self.windows = windows
        self._emit = EmitStrategy.on_window_update()

    def emit_strategy(self, strategy: EmitStrategy) -> TimeWindowedKStream[K, V]:
        """KIP-825: `EmitStrategy.on_window_close()` forwards each window once, when it closes."""
        self._emit = strategy
        return self

    def _aggregate(
        self,
        prefix: str,
        materialized: Materialized | str | None,
        default_value_serde: Serde[Any] | None,
        make: Callable[[str, Callable[[], bool], str], Any],
    ) -> KTable[Windowed[K], Any]:
        grouped = self._grouped
        builder = self._builder
        mat = Materialized.of(materialized)
        # Java names the store (MaterializedInternal) before the processor
        store_name = mat.name or builder.new_name("KSTREAM-AGGREGATE-STATE-STORE-")
        node = builder.new_name(prefix)
        parent = grouped.node
        if grouped.repartition_required:
            parent = builder.add_repartition(
                parent,
                grouped.grouped_name or store_name,
                grouped.key_serde,
                grouped.value_serde,
            )
        key_serde = mat.key_serde or grouped.key_serde
        value_serde = mat.value_serde or default_value_serde
        size = self.windows.size_ms
        table: KTable[Windowed[K], Any] = KTable(
            builder, node, TimeWindowedSerde(key_serde, size), value_serde, store_name, parent=None
        )
        table.window_grace_ms = self.windows.grace_ms
        send_old = table.send_old_values_enabled
        emitter = (lambda: time_window_emitter(size)) if self._emit.on_close else None
        builder.topology.add_processor(
            node, lambda: with_emitter(make(store_name, send_old, node), emitter), parent
        )
        store = window_store_builder(
            mat, store_name, key_serde, value_serde, size, size + self.windows.grace_ms
        )
        store.caching_enabled = store.caching_enabled and emitter is None  # nothing flushes forward
        builder.topology.add_state_store(store, node)
        return table

    def count(self, materialized: Materialized | str | None = None) -> KTable[Windowed[K], int]:
        windows = self.windows
        return self._aggregate(
            "KSTREAM-AGGREGATE-",
            materialized,
            Long(),
            lambda store, send_old, label: KStreamWindowAggregateProcessor(
                windows, store, send_old, label, initializer=_zero, aggregator=_count_add
            ),
        )

    def reduce(
        self, reducer: Callable[[V, V], V], materialized: Materialized | str | None = None
    ) -> KTable[Windowed[K], V]:
        windows = self.windows
        return self._aggregate(
            "KSTREAM-REDUCE-",
            materialized,
            self._grouped.value_serde,
            lambda store, send_old, label: KStreamWindowAggregateProcessor(
                windows, store, send_old, label, reducer=reducer
            ),
        )

    def aggregate(
        self,
        initializer: Callable[[], VA],
        aggregator: Callable[[K, V, VA], VA],
        materialized: Materialized | str | None = None,
    ) -> KTable[Windowed[K], VA]:
        windows = self.windows
        return self._aggregate(
            "KSTREAM-AGGREGATE-",
            materialized,
            None,
            lambda store, send_old, label: KStreamWindowAggregateProcessor(
                windows, store, send_old, label, initializer=initializer, aggregator=aggregator
            ),
        )
