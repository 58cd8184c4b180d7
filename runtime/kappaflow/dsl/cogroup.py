"""`cogroup`: several grouped streams aggregated into one table, as Kafka Streams' CogroupedKStream.

`stream_a.group_by_key().cogroup(agg_a).cogroup(stream_b.group_by_key(), agg_b).aggregate(init)`: one
aggregate processor per input stream, each with its own aggregator, all writing one shared store (so
they run in one task and the inputs must be co-partitioned; re-keyed inputs are repartitioned first),
merged into one output. Emit rules are those of `aggregate`: with caching, one update per key per
commit; timestamps are the max of the aggregate's and the record's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kappaflow.api.errors import TopologyError
from kappaflow.dsl.builder import InternalBuilder
from kappaflow.dsl.joins import _PassThrough, copartition
from kappaflow.dsl.ktable import KTable
from kappaflow.dsl.options import Materialized
from kappaflow.dsl.table_processors import KStreamAggregateProcessor


class CogroupedKStream:
    def __init__(self, first: Any, aggregator: Callable[[Any, Any, Any], Any]) -> None:
        self._builder: InternalBuilder = first._builder
        self._inputs: list[tuple[Any, Callable[[Any, Any, Any], Any]]] = [(first, aggregator)]

    def cogroup(self, grouped: Any, aggregator: Callable[[Any, Any, Any], Any]) -> CogroupedKStream:
        if grouped._builder is not self._builder:
            raise TopologyError("cannot cogroup streams from different StreamsBuilders")
        if any(g is grouped for g, _ in self._inputs):
            raise TopologyError("cogroup: this grouped stream is already part of the cogroup")
        self._inputs.append((grouped, aggregator))
        return self

    def aggregate(
        self, initializer: Callable[[], Any], materialized: Materialized | str | None = None
    ) -> KTable:
        builder = self._builder
        mat = Materialized.of(materialized)
        store_name = mat.name or builder.new_name("COGROUPKSTREAM-AGGREGATE-STATE-STORE-")
        key_serde = mat.key_serde or next((g.key_serde for g, _ in self._inputs if g.key_serde), None)
        parents: list[tuple[str, Callable[[Any, Any, Any], Any]]] = []
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
        table = KTable(builder, merge, key_serde, mat.value_serde, store_name, parent=None)
        send_old = table.send_old_values_enabled
        aggregates = []
        for parent, aggregator in parents:
            name = builder.new_name("COGROUPKSTREAM-AGGREGATE-")

            def make(name: str = name, aggregator: Callable[[Any, Any, Any], Any] = aggregator) -> Any:
                return KStreamAggregateProcessor(
                    store_name, send_old, name, initializer=initializer, aggregator=aggregator
                )

            builder.topology.add_processor(name, make, parent)
            aggregates.append(name)
        builder.topology.add_state_store(
            builder.kv_store_builder(mat, store_name, key_serde, mat.value_serde), *aggregates
        )
        builder.topology.add_processor(merge, _PassThrough, *aggregates)
        return table
