"""`cogroup`: several grouped streams aggregated into one table, as Kafka Streams' CogroupedKStream.

`stream_a.group_by_key().cogroup(agg_a).cogroup(stream_b.group_by_key(), agg_b).aggregate(init)`: one
aggregate processor per input stream, each with its own aggregator, all writing one shared store (so
they run in one task and the inputs must be co-partitioned; re-keyed inputs are repartitioned first),
merged into one output. Emit rules are those of `aggregate`: with caching, one update per key per
commit; timestamps are the max of the aggregate's and the record's. `windowed_by(time | sliding |
session windows)` does the same with each input's window aggregate processor over one window store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, overload

from kappaflow.api.errors import TopologyError
from kappaflow.api.serdes import Serde
from kappaflow.api.windowed_serdes import SessionWindowedSerde, TimeWindowedSerde
from kappaflow.api.windows import Windowed
from kappaflow.dsl.graph import InternalBuilder, window_store_builder
from kappaflow.dsl.joins import _PassThrough, copartition
from kappaflow.dsl.ktable import KTable
from kappaflow.dsl.options import Materialized
from kappaflow.dsl.session_windowed import KStreamSessionWindowAggregateProcessor
from kappaflow.dsl.sliding_windowed import KStreamSlidingWindowAggregateProcessor
from kappaflow.dsl.table_processors import KStreamAggregateProcessor
from kappaflow.dsl.typevars import VA, K
from kappaflow.dsl.windowed import KStreamWindowAggregateProcessor
from kappaflow.dsl.windows import SessionWindows, SlidingWindows, TimeWindows
from kappaflow.state.session_store import SessionStoreBuilder
from kappaflow.state.window_store import window_bytes_supplier

Aggregator = Callable[[Any, Any, Any], Any]

if TYPE_CHECKING:
    from kappaflow.dsl.grouped import KGroupedStream


class CogroupedKStream(Generic[K, VA]):
    def __init__(self, first: KGroupedStream[K, Any], aggregator: Callable[[K, Any, VA], VA]) -> None:
        self._builder: InternalBuilder = first._builder
        self._inputs: list[tuple[KGroupedStream[K, Any], Aggregator]] = [(first, aggregator)]

    def cogroup(
        self, grouped: KGroupedStream[K, Any], aggregator: Callable[[K, Any, VA], VA]
    ) -> CogroupedKStream[K, VA]:
        if grouped._builder is not self._builder:
            raise TopologyError("cannot cogroup streams from different StreamsBuilders")
        if any(g is grouped for g, _ in self._inputs):
            raise TopologyError("cogroup: this grouped stream is already part of the cogroup")
        self._inputs.append((grouped, aggregator))
        return self

    @overload
    def windowed_by(self, windows: TimeWindows | SlidingWindows) -> TimeWindowedCogroupedKStream[K, VA]: ...

    @overload
    def windowed_by(self, windows: SessionWindows) -> SessionWindowedCogroupedKStream[K, VA]: ...

    def windowed_by(
        self, windows: TimeWindows | SlidingWindows | SessionWindows
    ) -> TimeWindowedCogroupedKStream[K, VA] | SessionWindowedCogroupedKStream[K, VA]:
        """Java's `CogroupedKStream.windowedBy`: time and sliding windows aggregate with an initializer,
        session windows also with a merger."""
        if isinstance(windows, SessionWindows):
            return SessionWindowedCogroupedKStream(self, windows)
        if isinstance(windows, TimeWindows | SlidingWindows):
            return TimeWindowedCogroupedKStream(self, windows)
        raise TopologyError(
            f"cogroup windowed_by: expected Time-, Sliding- or SessionWindows, got {windows!r}"
        )

    def aggregate(
        self, initializer: Callable[[], VA], materialized: Materialized | str | None = None
    ) -> KTable[K, VA]:
        mat = Materialized.of(materialized)

        def processor(store: str, send_old: Callable[[], bool], name: str, aggregator: Aggregator) -> Any:
            return KStreamAggregateProcessor(
                store, send_old, name, initializer=initializer, aggregator=aggregator
            )

        def store(store_name: str, key_serde: Serde[Any] | None) -> Any:
            return self._builder.kv_store_builder(mat, store_name, key_serde, mat.value_serde)

        return self.build(mat, lambda key_serde: key_serde, processor, store)

    def build(
        self,
        mat: Materialized,
        result_key_serde: Callable[[Serde[Any] | None], Serde[Any] | None],
        processor: Callable[[str, Callable[[], bool], str, Aggregator], Any],
        store: Callable[[str, Serde[Any] | None], Any],
    ) -> KTable[Any, Any]:
        """One aggregate processor per input (each with its aggregator and its own stream time, as in
        Java's CogroupedStreamAggregateBuilder), all writing one store, merged into one output."""
        builder = self._builder
        store_name = mat.name or builder.new_name("COGROUPKSTREAM-AGGREGATE-STATE-STORE-")
        key_serde = mat.key_serde or next((g.key_serde for g, _ in self._inputs if g.key_serde), None)
        parents: list[tuple[str, Aggregator]] = []
        for grouped, aggregator in self._inputs:
            node = grouped.node
            if grouped.repartition_required:
                base = grouped.grouped_name or f"{store_name}-{node}"
                serde = key_serde or grouped.key_serde
                named = grouped.grouped_name is not None
                node = builder.add_repartition(node, base, serde, grouped.value_serde, user_named=named)
            parents.append((node, aggregator))
        copartition(builder, *(node for node, _ in parents))
        merge = builder.new_name("COGROUPKSTREAM-MERGE-")
        table: KTable[Any, Any] = KTable(
            builder, merge, result_key_serde(key_serde), mat.value_serde, store_name, parent=None
        )
        send_old = table.send_old_values_enabled
        aggregates = []
        for parent, aggregator in parents:
            name = builder.new_name("COGROUPKSTREAM-AGGREGATE-")

            def make(name: str = name, aggregator: Aggregator = aggregator) -> Any:
                return processor(store_name, send_old, name, aggregator)

            builder.topology.add_processor(name, make, parent)
            aggregates.append(name)
        builder.topology.add_state_store(store(store_name, key_serde), *aggregates)
        builder.topology.add_processor(merge, _PassThrough, *aggregates)
        return table


class TimeWindowedCogroupedKStream(Generic[K, VA]):
    """A cogroup cut into time or sliding windows: `aggregate(initializer)` -> a windowed KTable."""

    def __init__(self, cogrouped: CogroupedKStream[K, VA], windows: TimeWindows | SlidingWindows) -> None:
        self._cogrouped = cogrouped
        self.windows = windows

    def aggregate(
        self, initializer: Callable[[], VA], materialized: Materialized | str | None = None
    ) -> KTable[Windowed[K], VA]:
        windows, mat = self.windows, Materialized.of(materialized)
        if isinstance(windows, SlidingWindows):
            size, retention = windows.time_difference_ms, 2 * windows.time_difference_ms + windows.grace_ms

            def processor(store: str, send_old: Callable[[], bool], name: str, aggregator: Aggregator) -> Any:
                return KStreamSlidingWindowAggregateProcessor(
                    windows, store, send_old, name, initializer, aggregator
                )
        else:
            size, retention = windows.size_ms, windows.size_ms + windows.grace_ms

            def processor(store: str, send_old: Callable[[], bool], name: str, aggregator: Aggregator) -> Any:
                return KStreamWindowAggregateProcessor(
                    windows, store, send_old, name, initializer=initializer, aggregator=aggregator
                )

        def store(store_name: str, key_serde: Serde[Any] | None) -> Any:
            return window_store_builder(mat, store_name, key_serde, mat.value_serde, size, retention)

        table = self._cogrouped.build(
            mat, lambda key_serde: TimeWindowedSerde(key_serde, size), processor, store
        )
        table.window_grace_ms = windows.grace_ms
        return table


class SessionWindowedCogroupedKStream(Generic[K, VA]):
    """A cogroup cut into session windows: `aggregate(initializer, merger)` -> a session-windowed KTable."""

    def __init__(self, cogrouped: CogroupedKStream[K, VA], windows: SessionWindows) -> None:
        self._cogrouped = cogrouped
        self.windows = windows

    def aggregate(
        self,
        initializer: Callable[[], VA],
        merger: Callable[[K, VA, VA], VA],
        materialized: Materialized | str | None = None,
    ) -> KTable[Windowed[K], VA]:
        windows, mat = self.windows, Materialized.of(materialized)

        def processor(store: str, send_old: Callable[[], bool], name: str, aggregator: Aggregator) -> Any:
            return KStreamSessionWindowAggregateProcessor(
                windows, store, send_old, name, initializer, aggregator, merger
            )

        def store(store_name: str, key_serde: Serde[Any] | None) -> Any:
            return session_store_builder(mat, store_name, key_serde, mat.value_serde, windows)

        table = self._cogrouped.build(mat, SessionWindowedSerde, processor, store)
        table.window_grace_ms = windows.grace_ms
        return table


def session_store_builder(
    mat: Materialized,
    store_name: str,
    key_serde: Serde[Any] | None,
    value_serde: Serde[Any] | None,
    windows: SessionWindows,
) -> SessionStoreBuilder:
    """A DSL session store: retention gap + grace, or more if Materialized.with_retention says so."""
    retention = windows.gap_ms + windows.grace_ms
    if mat.retention_ms is not None:
        retention = max(retention, mat.retention_ms)
    store = SessionStoreBuilder(
        window_bytes_supplier(store_name, mat.store_type != "memory"), key_serde, value_serde, retention
    )
    store.caching_enabled = mat.caching
    store.logging_enabled = mat.logging
    store.extra_log_config = dict(mat.log_config)
    return store
