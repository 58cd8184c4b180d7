"""`StreamsBuilder`: the entry point of the DSL. It compiles operations straight into a `Topology`.

Compilation is eager: each DSL call adds its nodes immediately, and decisions that depend on what comes
next (a repartition topic is needed only when a key-changing operation is followed by a stateful one)
are taken when the stateful operation is added, from a flag the stream carries. Node and store names
follow Kafka Streams' `KSTREAM-<OP>-0000000001` scheme so descriptions read the same.

`StreamsBuilder` is the top of the DSL's import graph: it imports `KStream` and `KTable` and hands the
`KStream` class to the `InternalBuilder` (`dsl.graph`) the other DSL types share.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, overload

from kappaflow.api.config import StreamsConfig
from kappaflow.api.serdes import Serde
from kappaflow.api.time import TimestampExtractor
from kappaflow.dsl.graph import InternalBuilder
from kappaflow.dsl.kstream import KStream
from kappaflow.dsl.ktable import GlobalKTable, KTable, versioned_source_table
from kappaflow.dsl.optimize import optimize
from kappaflow.dsl.options import Consumed, Materialized
from kappaflow.dsl.table_processors import KTableSourceProcessor
from kappaflow.dsl.typevars import K, V
from kappaflow.dsl.value_getters import on_demand_store_getter
from kappaflow.topology.naming import CONFIG_KEY as EXPLICIT_NAMING_KEY
from kappaflow.topology.naming import ensure_explicit_naming
from kappaflow.topology.topology import Topology
from kappaflow_contract.optimization import TOPOLOGY_OPTIMIZATION, optimization_rewrites


class StreamsBuilder:
    """Builds a topology with the DSL, as Java's `StreamsBuilder`: `stream`, `table` and `global_table` read
    topics, the returned KStream/KTable operations add processors, and `build()` compiles it all into a
    `Topology`."""

    def __init__(self) -> None:
        self._internal = InternalBuilder(stream_factory=KStream)

    @overload
    def stream(
        self,
        topics: str | list[str],
        *,
        key_serde: Serde[K],
        value_serde: Serde[V],
        timestamp_extractor: TimestampExtractor | None = None,
        consumed: Consumed | None = None,
    ) -> KStream[K, V]: ...

    @overload
    def stream(
        self,
        topics: str | list[str],
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        timestamp_extractor: TimestampExtractor | None = None,
        consumed: Consumed | None = None,
    ) -> KStream[Any, Any]: ...

    def stream(
        self,
        topics: str | list[str],
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        timestamp_extractor: TimestampExtractor | None = None,
        consumed: Consumed | None = None,
    ) -> KStream[Any, Any]:
        """A stream of `topics`; with both serdes given, typed `KStream[K, V]` by them."""
        if consumed is not None:
            key_serde = key_serde or consumed.key_serde
            value_serde = value_serde or consumed.value_serde
            timestamp_extractor = timestamp_extractor or consumed.timestamp_extractor
        topic_list = [topics] if isinstance(topics, str) else list(topics)
        name = self._internal.name_or_new(consumed.name if consumed else None, "KSTREAM-SOURCE-")
        self._internal.topology.add_source(
            name,
            *topic_list,
            key_serde=key_serde,
            value_serde=value_serde,
            timestamp_extractor=timestamp_extractor,
            offset_reset=consumed.offset_reset if consumed else None,
        )
        return KStream(self._internal, name, key_serde, value_serde, repartition_required=False)

    @overload
    def table(
        self,
        topic: str,
        *,
        key_serde: Serde[K],
        value_serde: Serde[V],
        materialized: Materialized | str | None = None,
        timestamp_extractor: TimestampExtractor | None = None,
        consumed: Consumed | None = None,
    ) -> KTable[K, V]: ...

    @overload
    def table(
        self,
        topic: str,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        materialized: Materialized | str | None = None,
        timestamp_extractor: TimestampExtractor | None = None,
        consumed: Consumed | None = None,
    ) -> KTable[Any, Any]: ...

    def table(
        self,
        topic: str,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        materialized: Materialized | str | None = None,
        timestamp_extractor: TimestampExtractor | None = None,
        consumed: Consumed | None = None,
    ) -> KTable[Any, Any]:
        """A table of `topic`; with both serdes given, typed `KTable[K, V]` by them. `consumed` gives the
        serdes, timestamp extractor, source name and offset reset policy (KIP-1106) as in Java."""
        internal = self._internal
        if consumed is not None:
            key_serde = key_serde or consumed.key_serde
            value_serde = value_serde or consumed.value_serde
            timestamp_extractor = timestamp_extractor or consumed.timestamp_extractor
        mat = Materialized.of(materialized)
        store_name = mat.name or internal.new_name(f"{topic}-STATE-STORE-")
        source = internal.name_or_new(consumed.name if consumed else None, "KSTREAM-SOURCE-")
        internal.topology.add_source(
            source,
            topic,
            key_serde=key_serde,
            value_serde=value_serde,
            timestamp_extractor=timestamp_extractor,
            offset_reset=consumed.offset_reset if consumed else None,
        )
        processor = internal.new_name("KTABLE-SOURCE-")
        if mat.versioned is not None:
            internal.table_sources.append((mat.versioned.name, topic))
            return versioned_source_table(internal, processor, source, mat, key_serde, value_serde)
        internal.table_sources.append((store_name, topic))
        builder = internal.kv_store_builder(mat, store_name, key_serde, value_serde)
        getter = None if mat.name is not None else on_demand_store_getter(builder)
        table: KTable[Any, Any] = KTable(
            internal, processor, key_serde, value_serde, store_name, parent=None, getter=getter
        )
        table.materialized = mat.name is not None
        internal.topology.add_processor(
            processor,
            lambda: KTableSourceProcessor(store_name, table.send_old_values_enabled, processor),
            source,
        )
        internal.topology.add_state_store(builder, processor)
        return table

    def global_table(
        self,
        topic: str,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        materialized: Materialized | str | None = None,
    ) -> GlobalKTable[Any, Any]:
        """A GlobalKTable of `topic`: every instance reads all of its partitions into a local store (no
        co-partitioning needed to join with it)."""
        internal = self._internal
        mat = Materialized.of(materialized)
        store_name = mat.name or internal.new_name(f"{topic}-STATE-STORE-")
        source = internal.new_name("KSTREAM-SOURCE-")
        processor = internal.new_name("KTABLE-SOURCE-")
        builder = internal.kv_store_builder(mat, store_name, key_serde, value_serde)
        builder.with_logging_disabled()
        builder.caching_enabled = False
        internal.topology.add_global_store(
            builder,
            source,
            topic,
            processor,
            lambda: KTableSourceProcessor(store_name, lambda: False, processor),
            key_serde=key_serde,
            value_serde=value_serde,
        )
        return GlobalKTable(store_name, key_serde, value_serde)

    def add_state_store(self, builder: Any) -> StreamsBuilder:
        """Add a store for `KStream.process(supplier, store_name)` to use."""
        self._internal.topology.add_state_store(builder)
        return self

    def build(self, props: Mapping[str, Any] | StreamsConfig | None = None) -> Topology:
        """Compile what was built into a `Topology` (sub-topologies, stores, internal topics), ready for
        `KafkaStreams`, the `TopologyTestDriver` or Spark reprocessing.

        `props` (Java's `build(Properties)`) carries the build-time settings: `topology.optimization`
        rewrites the topology as Java's does (`dsl.optimize`), and with
        `ensure.explicit.internal.resource.naming=true` (KIP-1111) a topology with a generated internal
        topic or store name is refused, with an error naming each one."""
        topology = self._internal.topology
        if props is not None:
            config = props if isinstance(props, StreamsConfig) else StreamsConfig(dict(props))
            optimize(self._internal, optimization_rewrites(config.get(TOPOLOGY_OPTIMIZATION)))
            if config.get_bool(EXPLICIT_NAMING_KEY):
                ensure_explicit_naming(topology)
        return topology
