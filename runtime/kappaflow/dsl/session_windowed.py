"""Session-windowed aggregations: `windowed_by(SessionWindows...)` -> `count/reduce/aggregate(..., merger)`.

Kafka Streams' KStreamSessionWindowAggregate, record for record: a record at t finds the key's sessions
overlapping [t - gap, t + gap], merges them (with `merger`) into one session spanning all of them and t,
and, when the merged session differs from [t, t], removes the merged sessions - forwarding a tombstone
for each, at its end time - before writing and forwarding the new session at its end time. A record
whose merged session ended before `observed stream time - grace - gap` is late: dropped and counted
(Java's window close time for sessions: a session may still grow by a record up to `gap` after its end).
Every update and retraction carries the session's end as its timestamp, also when it reaches the
downstream through the record cache (Java's SessionCacheFlushListener).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Generic

from kappaflow.api.processor import ProcessorContext
from kappaflow.api.record import Record
from kappaflow.api.serdes import Long, Serde
from kappaflow.api.windowed_serdes import SessionWindowedSerde
from kappaflow.api.windows import Window, Windowed
from kappaflow.dsl.change import Change
from kappaflow.dsl.emit import EmitStrategy, SessionCloseEmitter, WindowEmitMixin, with_emitter
from kappaflow.dsl.graph import InternalBuilder, reject_ttl_on_windowed
from kappaflow.dsl.ktable import KTable
from kappaflow.dsl.options import Materialized
from kappaflow.dsl.stream_processors import drop_record
from kappaflow.dsl.table_processors import TupleForwarder, _Stateful
from kappaflow.dsl.typevars import VA, K, V
from kappaflow.dsl.windows import SessionWindows
from kappaflow.state.session_store import SessionStoreBuilder
from kappaflow.state.window_store import window_bytes_supplier

log = logging.getLogger(__name__)


class KStreamSessionWindowAggregateProcessor(WindowEmitMixin, _Stateful):
    def __init__(
        self,
        windows: SessionWindows,
        store_name: str,
        send_old_values: Callable[[], bool],
        label: str,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        merger: Callable[[Any, Any, Any], Any],
    ) -> None:
        super().__init__(store_name, send_old_values, label)
        self.windows = windows
        self.initializer = initializer
        self.aggregator = aggregator
        self.merger = merger
        self.observed_stream_time = -1

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.forwarder = TupleForwarder(self.store, context, self.send_old(), stamp=_session_end)

    def process(self, record: Record[Any, Any]) -> None:
        key, value, ts = record.key, record.value, record.timestamp
        if key is None:
            drop_record(self.context, "null-key", self.label)
            return
        self.observed_stream_time = max(self.observed_stream_time, ts)
        close_time = self.observed_stream_time - self.windows.grace_ms - self.windows.gap_ms
        gap = self.windows.gap_ms
        merged = list(self.store.find_sessions(key, ts - gap, ts + gap))
        aggregate = self.initializer()
        start, end = ts, ts
        for session, session_value in merged:
            aggregate = self.merger(key, aggregate, session_value)
            start, end = min(start, session.window.start), max(end, session.window.end)
        if end < close_time:
            log.debug("skipping record for expired session: key=%r ts=%d in %s", key, ts, self.label)
            drop_record(self.context, "late", self.label)
            self._emit_closed(record, close_time)
            return
        send_old = self.send_old()
        if (start, end) != (ts, ts):
            for session, session_value in merged:
                self.store.remove(session)
                change = Change(None, session_value if send_old else None)
                self._forward_update(Record(session, change, session.window.end, record.headers))
        aggregate = self.aggregator(key, value, aggregate)
        windowed = Windowed(key, Window(start, end))
        self.store.put(windowed, aggregate)
        self._forward_update(Record(windowed, Change(aggregate, None), end, record.headers))
        self._emit_closed(record, close_time)


def _session_end(key: Windowed[Any]) -> int:
    return key.window.end


def _count_add(key: Any, value: Any, aggregate: int) -> int:
    return aggregate + 1


def _count_merge(key: Any, left: int, right: int) -> int:
    return left + right


class SessionWindowedKStream(Generic[K, V]):
    def __init__(self, grouped: Any, windows: SessionWindows) -> None:
        self._grouped = grouped
        self._builder: InternalBuilder = grouped._builder
        self.windows = windows
        self._emit = EmitStrategy.on_window_update()

    def emit_strategy(self, strategy: EmitStrategy) -> SessionWindowedKStream[K, V]:
        """KIP-825: `EmitStrategy.on_window_close()` forwards each session once, when it closes."""
        self._emit = strategy
        return self

    def _aggregate(
        self,
        prefix: str,
        materialized: Materialized | str | None,
        default_value_serde: Serde[Any] | None,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        merger: Callable[[Any, Any, Any], Any],
    ) -> KTable[Windowed[K], Any]:
        grouped, builder, windows = self._grouped, self._builder, self.windows
        mat = Materialized.of(materialized)
        # Java names the store (MaterializedInternal) before the processor
        store_name = mat.name or builder.new_name("KSTREAM-AGGREGATE-STATE-STORE-")
        node = builder.new_name(prefix)
        parent = grouped.node
        if grouped.repartition_required:
            parent = builder.add_repartition(
                parent, grouped.grouped_name or store_name, grouped.key_serde, grouped.value_serde,
            )  # fmt: skip
        key_serde = mat.key_serde or grouped.key_serde
        value_serde = mat.value_serde or default_value_serde
        table: KTable[Windowed[K], Any] = KTable(
            builder, node, SessionWindowedSerde(key_serde), value_serde, store_name, parent=None
        )
        # suppress(until_window_closes) waits gap + grace past a session's end (Java's GraphGraceSearchUtil):
        # until then a record may still extend the session
        table.window_grace_ms = windows.grace_ms + windows.gap_ms
        send_old = table.send_old_values_enabled
        emitter = SessionCloseEmitter if self._emit.on_close else None
        builder.topology.add_processor(
            node,
            lambda: with_emitter(
                KStreamSessionWindowAggregateProcessor(
                    windows, store_name, send_old, node, initializer, aggregator, merger
                ),
                emitter,
            ),
            parent,
        )
        reject_ttl_on_windowed(mat, store_name)
        retention = windows.gap_ms + windows.grace_ms
        if mat.retention_ms is not None:
            retention = max(retention, mat.retention_ms)
        store = SessionStoreBuilder(
            window_bytes_supplier(store_name, mat.store_type != "memory"), key_serde, value_serde, retention
        )
        store.caching_enabled = mat.caching and emitter is None  # nothing flushes forward
        store.logging_enabled = mat.logging
        store.extra_log_config = dict(mat.log_config)
        builder.topology.add_state_store(store, node)
        return table

    def count(self, materialized: Materialized | str | None = None) -> KTable[Windowed[K], int]:
        return self._aggregate(
            "KSTREAM-AGGREGATE-", materialized, Long(), lambda: 0, _count_add, _count_merge
        )

    def reduce(
        self, reducer: Callable[[V, V], V], materialized: Materialized | str | None = None
    ) -> KTable[Windowed[K], V]:
        def add(key: Any, value: Any, aggregate: Any) -> Any:
            return value if aggregate is None else reducer(aggregate, value)

        def merge(key: Any, left: Any, right: Any) -> Any:
            return right if left is None else reducer(left, right)

        return self._aggregate(
            "KSTREAM-REDUCE-", materialized, self._grouped.value_serde, lambda: None, add, merge
        )

    def aggregate(
        self,
        initializer: Callable[[], VA],
        aggregator: Callable[[K, V, VA], VA],
        merger: Callable[[K, VA, VA], VA],
        materialized: Materialized | str | None = None,
    ) -> KTable[Windowed[K], VA]:
        return self._aggregate("KSTREAM-AGGREGATE-", materialized, None, initializer, aggregator, merger)
