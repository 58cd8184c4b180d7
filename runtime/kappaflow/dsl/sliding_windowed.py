"""Sliding-window aggregations: `windowed_by(SlidingWindows...)`, Kafka Streams' algorithm (KIP-450).

A sliding window of time difference D is `[start, start + D]`, both ends inclusive, and only windows
that the records themselves define exist: each record r has a *left* window `[r - D, r]` and, when a
later record falls within `[r + 1, r + 1 + D]`, a *right* window `[r + 1, r + 1 + D]`. Records earlier
than D share the window `[0, D]` (no window starts before 0). A record updates every existing window
containing it - newest window first, as Java's processReverse walks a backward fetch - and creates its
own left window and, when needed, its own and its predecessor's right windows, each emitted at
max(record time, window's previous max). Windows that are closed
(end < stream time - grace: the end is inclusive) are not updated; a record all of whose windows are
closed is dropped as late.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Generic

from kappaflow.api.record import Record
from kappaflow.api.serdes import Long, Serde
from kappaflow.api.windowed_serdes import TimeWindowedSerde
from kappaflow.api.windows import Window, Windowed
from kappaflow.dsl.change import Change
from kappaflow.dsl.emit import EmitStrategy, WindowEmitMixin, sliding_window_emitter, with_emitter
from kappaflow.dsl.graph import InternalBuilder, window_store_builder
from kappaflow.dsl.ktable import KTable
from kappaflow.dsl.options import Materialized
from kappaflow.dsl.stream_processors import drop_record
from kappaflow.dsl.table_processors import _Stateful
from kappaflow.dsl.typevars import VA, K, V
from kappaflow.dsl.windows import SlidingWindows
from kappaflow.state.timestamped import ValueAndTimestamp

log = logging.getLogger(__name__)
VAT = ValueAndTimestamp[Any]


class KStreamSlidingWindowAggregateProcessor(WindowEmitMixin, _Stateful):
    def __init__(
        self,
        windows: SlidingWindows,
        store_name: str,
        send_old_values: Callable[[], bool],
        label: str,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
    ) -> None:
        super().__init__(store_name, send_old_values, label)
        self.windows = windows
        self.diff = windows.time_difference_ms
        self.initializer = initializer
        self.aggregator = aggregator
        self.observed_stream_time = -1

    def process(self, record: Record[Any, Any]) -> None:
        key, value, ts = record.key, record.value, record.timestamp
        if key is None or value is None:
            drop_record(self.context, "null-key-or-value", self.label)
            return
        self.observed_stream_time = max(self.observed_stream_time, ts)
        close_time = self.observed_stream_time - self.windows.grace_ms
        if ts + 1 + self.diff <= close_time:
            log.debug("skipping record for expired windows: key=%r ts=%d in %s", key, ts, self.label)
            drop_record(self.context, "late", self.label)
            return
        if ts < self.diff:
            self._process_early(record, close_time)
        else:
            self._process_in_order(record, close_time)
        self._emit_closed(record, close_time)

    # ----------------------------------------------------------------- window updates
    def _update(self, record: Record[Any, Any], start: int, current: VAT | None, close_time: int) -> None:
        end = start + self.diff
        if end < close_time:  # sliding windows include their end: closed only once stream time passes it
            log.debug("skipping record for expired window [%d,%d] in %s", start, end, self.label)
            drop_record(self.context, "late", self.label)
            return
        ts = record.timestamp
        old = None if current is None else current.value
        new = self.aggregator(record.key, record.value, old)
        timestamp = ts if current is None else max(ts, current.timestamp)
        self.store.put(record.key, ValueAndTimestamp(new, timestamp), start)
        change = Change(new, old if self.send_old() else None)
        windowed = Windowed(record.key, Window(start, end))
        self._forward_update(Record(windowed, change, timestamp, record.headers))

    def _fresh(self, ts: int) -> VAT | None:
        return ValueAndTimestamp.make(self.initializer(), ts)

    def _create_right_window(self, record: Record[Any, Any], right: VAT) -> None:
        """The new record's right window holds exactly what the window it found to its right held."""
        start = record.timestamp + 1
        self.store.put(record.key, ValueAndTimestamp(right.value, right.timestamp), start)
        windowed = Windowed(record.key, Window(start, start + self.diff))
        self._forward_update(Record(windowed, Change(right.value, None), right.timestamp, record.headers))

    def _process_in_order(self, record: Record[Any, Any], close_time: int) -> None:
        """Java's processReverse: the key's windows newest first, so existing windows are updated (and
        their updates forwarded) from the latest start down, stopping at the first window that ends
        before the record - the window that holds the record's predecessor."""
        key, ts, diff = record.key, record.timestamp, self.diff
        starts: set[int] = set()
        left_agg: VAT | None = None
        right_agg: VAT | None = None
        left_created = right_created = False
        previous: int | None = None
        for start, current in list(self.store.backward_fetch(key, max(0, ts - 2 * diff), ts + 1)):
            starts.add(start)
            end = start + diff
            if start == ts + 1:
                right_created = True
            elif end > ts:
                if right_agg is None:
                    right_agg = current
                self._update(record, start, current, close_time)
            elif end == ts:
                left_created = True
                self._update(record, start, current, close_time)
                if current.timestamp >= ts:
                    return  # a record at ts already made every window this one needs
                previous = current.timestamp
            else:
                left_agg, previous = current, current.timestamp
                break
        self._create_windows(
            record, close_time, starts, left_agg, right_agg, left_created, right_created, previous
        )

    def _create_windows(
        self,
        record: Record[Any, Any],
        close_time: int,
        starts: set[int],
        left_agg: VAT | None,
        right_agg: VAT | None,
        left_created: bool,
        right_created: bool,
        previous: int | None,
    ) -> None:
        """The previous record's right window, the record's left window and its right window, as needed."""
        ts, diff = record.timestamp, self.diff
        if previous is not None:
            previous_right = previous + 1
            if previous_right not in starts and previous_right + diff >= ts:
                self._update(record, previous_right, self._fresh(ts), close_time)
        if not left_created:
            if previous is not None and ts - diff <= previous and left_agg is not None:
                base = ValueAndTimestamp.make(left_agg.value, ts)
            else:
                base = self._fresh(ts)
            self._update(record, ts - diff, base, close_time)
        if not right_created and right_agg is not None and right_agg.timestamp > ts:
            self._create_right_window(record, right_agg)

    def _process_early(self, record: Record[Any, Any], close_time: int) -> None:
        """Records before D all live in the window [0, D]; their right windows are created as usual."""
        key, ts = record.key, record.timestamp
        combined: VAT | None = None
        combined_found = False
        right_agg: VAT | None = None
        right_created = False
        starts: set[int] = set()
        previous: int | None = None
        for start, current in list(self.store.fetch(key, 0, ts + 1)):
            starts.add(start)
            if start == 0:
                combined, combined_found = current, True
                if current.timestamp < ts:
                    previous = current.timestamp
            elif start <= ts:
                right_agg = current
                self._update(record, start, current, close_time)
            else:  # start == ts + 1
                right_created = True
        if right_agg is None and combined is not None and combined.timestamp > ts:
            right_agg = combined
        if not right_created and right_agg is not None and right_agg.timestamp > ts:
            self._create_right_window(record, right_agg)
        if previous is not None and (previous + 1) not in starts:
            self._update(record, previous + 1, self._fresh(ts), close_time)
        self._update(record, 0, combined if combined_found else self._fresh(ts), close_time)


def _count_add(key: Any, value: Any, aggregate: int | None) -> int:
    return (aggregate or 0) + 1


class SlidingWindowedKStream(Generic[K, V]):
    def __init__(self, grouped: Any, windows: SlidingWindows) -> None:
        self._grouped = grouped
        self._builder: InternalBuilder = grouped._builder
        self.windows = windows
        self._emit = EmitStrategy.on_window_update()

    def emit_strategy(self, strategy: EmitStrategy) -> SlidingWindowedKStream[K, V]:
        """KIP-825: `EmitStrategy.on_window_close()` forwards each window once, when it closes."""
        self._emit = strategy
        return self

    def _aggregate(
        self,
        prefix: str,
        materialized: Materialized | str | None,
        default_value_serde: Serde[Any] | None,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
    ) -> KTable[Windowed[K], Any]:
        grouped, builder, windows = self._grouped, self._builder, self.windows
        mat = Materialized.of(materialized)
        # Java names the store (MaterializedInternal) before the processor
        store_name = mat.name or builder.new_name("KSTREAM-AGGREGATE-STATE-STORE-")
        node = builder.new_name(prefix)
        parent = grouped.node
        if grouped.repartition_required:
            base = grouped.grouped_name or store_name
            parent = builder.add_repartition(parent, base, grouped.key_serde, grouped.value_serde)
        key_serde = mat.key_serde or grouped.key_serde
        value_serde = mat.value_serde or default_value_serde
        diff = windows.time_difference_ms
        table: KTable[Windowed[K], Any] = KTable(
            builder, node, TimeWindowedSerde(key_serde, diff), value_serde, store_name, parent=None
        )
        table.window_grace_ms = windows.grace_ms
        send_old = table.send_old_values_enabled
        emitter = (lambda: sliding_window_emitter(diff)) if self._emit.on_close else None
        builder.topology.add_processor(
            node,
            lambda: with_emitter(
                KStreamSlidingWindowAggregateProcessor(
                    windows, store_name, send_old, node, initializer, aggregator
                ),
                emitter,
            ),
            parent,
        )
        # Java keeps sliding windows for 2 * D + grace: a record may still create a window D before it
        store = window_store_builder(
            mat, store_name, key_serde, value_serde, diff, 2 * diff + windows.grace_ms
        )
        store.caching_enabled = store.caching_enabled and emitter is None  # nothing flushes forward
        builder.topology.add_state_store(store, node)
        return table

    def count(self, materialized: Materialized | str | None = None) -> KTable[Windowed[K], int]:
        return self._aggregate("KSTREAM-AGGREGATE-", materialized, Long(), lambda: 0, _count_add)

    def reduce(
        self, reducer: Callable[[V, V], V], materialized: Materialized | str | None = None
    ) -> KTable[Windowed[K], V]:
        def add(key: Any, value: Any, aggregate: Any) -> Any:
            return value if aggregate is None else reducer(aggregate, value)

        return self._aggregate("KSTREAM-REDUCE-", materialized, self._grouped.value_serde, lambda: None, add)

    def aggregate(
        self,
        initializer: Callable[[], VA],
        aggregator: Callable[[K, V, VA], VA],
        materialized: Materialized | str | None = None,
    ) -> KTable[Windowed[K], VA]:
        return self._aggregate("KSTREAM-AGGREGATE-", materialized, None, initializer, aggregator)
