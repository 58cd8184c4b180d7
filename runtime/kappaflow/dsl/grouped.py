"""Grouped and cogrouped streams: `count`, `reduce` and `aggregate` into a KTable (`KGroupedTable` lives
with `KTable`).

The repartition decision is made here, when the aggregation is added: a stream re-keyed since its last
repartition gets a `<name>-repartition` topic, named after the grouping or the store as Kafka Streams
names it.

`cogroup`: several grouped streams aggregated into one table, as Kafka Streams' CogroupedKStream.
`stream_a.group_by_key().cogroup(agg_a).cogroup(stream_b.group_by_key(), agg_b).aggregate(init)`: one
aggregate processor per input stream, each with its own aggregator, all writing one shared store (so
they run in one task and the inputs must be co-partitioned; re-keyed inputs are repartitioned first),
merged into one output. Emit rules are those of `aggregate`: with caching, one update per key per
commit; timestamps are the max of the aggregate's and the record's. `windowed_by(time | sliding |
session windows)` does the same with each input's window aggregate processor over one window store.

A grouped stream starts a cogroup and a cogroup takes more grouped streams, so both live here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, overload

from kappaflow.api.errors import TopologyError
from kappaflow.api.serdes import Long, Serde
from kappaflow.api.windowed_serdes import SessionWindowedSerde, TimeWindowedSerde
from kappaflow.api.windows import Windowed
from kappaflow.dsl.graph import InternalBuilder, reject_ttl_on_windowed, window_store_builder
from kappaflow.dsl.joins import _PassThrough, copartition
from kappaflow.dsl.ktable import KTable, aggregate_table
from kappaflow.dsl.options import Materialized
from kappaflow.dsl.session_windowed import KStreamSessionWindowAggregateProcessor, SessionWindowedKStream
from kappaflow.dsl.sliding_windowed import KStreamSlidingWindowAggregateProcessor, SlidingWindowedKStream
from kappaflow.dsl.table_processors import KStreamAggregateProcessor, count_add, count_initial
from kappaflow.dsl.typevars import VA, K, V
from kappaflow.dsl.windowed import KStreamWindowAggregateProcessor, TimeWindowedKStream
from kappaflow.dsl.windows import SessionWindows, SlidingWindows, TimeWindows
from kappaflow.state.session_store import SessionStoreBuilder
from kappaflow.state.window_store import window_bytes_supplier

Aggregator = Callable[[Any, Any, Any], Any]


class KGroupedStream(Generic[K, V]):
    """A stream grouped by key, from `group_by_key` or `group_by`: aggregate it (`count`, `reduce`,
    `aggregate`), window it (`windowed_by`) or combine it with other grouped streams (`cogroup`)."""

    def __init__(
        self,
        builder: InternalBuilder,
        node: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        repartition_required: bool,
        grouped_name: str | None,
    ) -> None:
        self._builder = builder
        self.node = node
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.repartition_required = repartition_required
        self.grouped_name = grouped_name

    def _aggregate(
        self,
        prefix: str,
        materialized: Materialized | str | None,
        default_value_serde: Serde[Any] | None,
        make: Callable[[str, Callable[[], bool], str], Any],
    ) -> KTable[K, Any]:
        builder = self._builder
        mat = Materialized.of(materialized)
        # Java names the store (MaterializedInternal) before the processor, after the operation
        # (`KSTREAM-REDUCE-STATE-STORE-` for a reduce)
        store_name = mat.name or builder.new_name(f"{prefix}STATE-STORE-")
        node = builder.new_name(prefix)
        parent = self.node
        if self.repartition_required:
            base = self.grouped_name or store_name
            parent = builder.add_repartition(
                parent,
                base,
                self.key_serde,
                self.value_serde,
            )
        return aggregate_table(
            builder,
            node,
            parent,
            mat,
            store_name,
            mat.key_serde or self.key_serde,
            mat.value_serde or default_value_serde,
            make,
        )

    def count(self, materialized: Materialized | str | None = None) -> KTable[K, int]:
        """Count records per key (records with a null key or value are dropped, as in Kafka Streams)."""
        return self._aggregate(
            "KSTREAM-AGGREGATE-",
            materialized,
            Long(),
            lambda store, send_old, label: KStreamAggregateProcessor(
                store, send_old, label, initializer=count_initial, aggregator=count_add
            ),
        )

    def reduce(
        self, reducer: Callable[[V, V], V], materialized: Materialized | str | None = None
    ) -> KTable[K, V]:
        """A table with the running combination of each key's values: `reducer(aggregate, value)`; the first
        value is the start."""
        return self._aggregate(
            "KSTREAM-REDUCE-",
            materialized,
            self.value_serde,
            lambda store, send_old, label: KStreamAggregateProcessor(store, send_old, label, reducer=reducer),
        )

    def aggregate(
        self,
        initializer: Callable[[], VA],
        aggregator: Callable[[K, V, VA], VA],
        materialized: Materialized | str | None = None,
    ) -> KTable[K, VA]:
        """A table with each key's aggregate: starts at `initializer()` and folds each record in with
        `aggregator(key, value, aggregate)`."""
        return self._aggregate(
            "KSTREAM-AGGREGATE-",
            materialized,
            None,
            lambda store, send_old, label: KStreamAggregateProcessor(
                store, send_old, label, initializer=initializer, aggregator=aggregator
            ),
        )

    def cogroup(self, aggregator: Callable[[K, V, VA], VA]) -> CogroupedKStream[K, VA]:
        """Start a cogroup: `.cogroup(other_grouped, aggregator)...aggregate(initializer)`."""
        return CogroupedKStream(self, aggregator)

    @overload
    def windowed_by(self, windows: TimeWindows) -> TimeWindowedKStream[K, V]: ...

    @overload
    def windowed_by(self, windows: SessionWindows) -> SessionWindowedKStream[K, V]: ...

    @overload
    def windowed_by(self, windows: SlidingWindows) -> SlidingWindowedKStream[K, V]: ...

    def windowed_by(
        self, windows: TimeWindows | SessionWindows | SlidingWindows
    ) -> TimeWindowedKStream[K, V] | SessionWindowedKStream[K, V] | SlidingWindowedKStream[K, V]:
        """`windowed_by(TimeWindows | SlidingWindows | SessionWindows)` -> a windowed stream."""
        if isinstance(windows, TimeWindows):
            return TimeWindowedKStream(self, windows)
        if isinstance(windows, SessionWindows):
            return SessionWindowedKStream(self, windows)
        if isinstance(windows, SlidingWindows):
            return SlidingWindowedKStream(self, windows)
        raise TypeError(f"windowed_by: unsupported windows {windows!r}")


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
                base = grouped.grouped_name or store_name  # Java: one topic per store
                serde = key_serde or grouped.key_serde
                node = builder.add_repartition(node, base, serde, grouped.value_serde)
            parents.append((node, aggregator))
        copartition(builder, *(node for node, _ in parents))
        # Java's CogroupedStreamAggregateBuilder: one aggregate per input, then the merge, numbered in order
        names = [builder.new_name("COGROUPKSTREAM-AGGREGATE-") for _ in parents]
        merge = builder.new_name("COGROUPKSTREAM-MERGE-")
        table: KTable[Any, Any] = KTable(
            builder, merge, result_key_serde(key_serde), mat.value_serde, store_name, parent=None
        )
        send_old = table.send_old_values_enabled
        aggregates = []
        for name, (parent, aggregator) in zip(names, parents, strict=True):

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
    reject_ttl_on_windowed(mat, store_name)
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
