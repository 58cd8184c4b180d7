"""`topology.optimization`: the rewrites `StreamsBuilder.build(props)` applies, as Java's
`InternalStreamsBuilder.optimizeTopology` does, in Java's order.

kappaflow compiles the DSL eagerly, so where Java rewrites its logical graph before writing the topology,
these rewrite the compiled `Topology` itself, to the same result: the same nodes, stores and internal
topics Java's optimized build has, so `describe()` and the internal topic names stay Java's.

- `reuse.ktable.source.topics`: a materialized `builder.table(topic)` store takes `topic` as its changelog
  (no `-changelog` topic; restored from the input, up to the committed input offset).
- `merge.repartition.topics`: the repartitions below one key change share a topic (`dsl.merge_repartitions`).
- `single.store.self.join` (KIP-862): a stream joined with itself keeps one window store (`dsl.self_join`).
"""

from __future__ import annotations

from collections.abc import Set

from kappaflow.dsl.graph import InternalBuilder
from kappaflow.dsl.merge_repartitions import merge_repartition_topics
from kappaflow.dsl.self_join import rewrite_self_join
from kappaflow.state.builders import KeyValueStoreBuilder
from kappaflow.topology.naming import freeze_before_optimization
from kappaflow_contract.optimization import (
    MERGE_REPARTITION_TOPICS,
    REUSE_KTABLE_SOURCE_TOPICS,
    SINGLE_STORE_SELF_JOIN,
)


def optimize(internal: InternalBuilder, rewrites: Set[str]) -> None:
    """Apply the rewrites named (`kappaflow_contract.optimization`); applying one twice changes nothing."""
    if rewrites:
        freeze_before_optimization(internal.topology)
    if REUSE_KTABLE_SOURCE_TOPICS in rewrites:
        reuse_ktable_source_topics(internal)
    if MERGE_REPARTITION_TOPICS in rewrites:
        merge_repartition_topics(internal)
    if SINGLE_STORE_SELF_JOIN in rewrites:
        for join in internal.self_joins:
            rewrite_self_join(internal.topology, join)


def reuse_ktable_source_topics(internal: InternalBuilder) -> None:
    """Each source table's store is logged to its source topic. A table nothing materialized has no store
    in Java (kappaflow keeps an undescribed, unlogged one for old values): it is left alone, as Java's
    `TableSourceNode` only connects a store it adds."""
    topology = internal.topology
    for store, topic in internal.table_sources:
        builder = topology.stores[store]
        if not isinstance(builder, KeyValueStoreBuilder):
            # a versioned store's changelog holds its own rows (state.versioned), not the topic's records:
            # restored from the topic it would be corrupt, so it keeps its changelog (Java reuses the topic)
            continue
        if not getattr(builder, "described", True):
            continue
        builder.with_logging_disabled()
        topology.connect_source_store_and_topic(store, topic)
