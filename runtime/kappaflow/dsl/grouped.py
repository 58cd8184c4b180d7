"""Grouped streams: `count`, `reduce` and `aggregate` into a KTable (`KGroupedTable` lives with `KTable`).

The repartition decision is made here, when the aggregation is added: a stream re-keyed since its last
repartition gets a `<name>-repartition` topic, named after the grouping or the store as Kafka Streams
names it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, overload

from kappaflow.api.serdes import Long, Serde
from kappaflow.dsl.cogroup import CogroupedKStream
from kappaflow.dsl.graph import InternalBuilder
from kappaflow.dsl.ktable import KTable, aggregate_table
from kappaflow.dsl.options import Materialized
from kappaflow.dsl.session_windowed import SessionWindowedKStream
from kappaflow.dsl.sliding_windowed import SlidingWindowedKStream
from kappaflow.dsl.table_processors import KStreamAggregateProcessor, count_add, count_initial
from kappaflow.dsl.typevars import VA, K, V
from kappaflow.dsl.windowed import TimeWindowedKStream
from kappaflow.dsl.windows import SessionWindows, SlidingWindows, TimeWindows


class KGroupedStream(Generic[K, V]):
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
        node = builder.new_name(prefix)
        store_name = mat.name or builder.new_name("KSTREAM-AGGREGATE-STATE-STORE-")
        parent = self.node
        if self.repartition_required:
            base = self.grouped_name or store_name
            parent = builder.add_repartition(
                parent,
                base,
                self.key_serde,
                self.value_serde,
                user_named=self.grouped_name is not None or mat.name is not None,
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
