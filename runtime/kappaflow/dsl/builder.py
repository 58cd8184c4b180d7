"""`StreamsBuilder`: the entry point of the DSL. It compiles operations straight into a `Topology`.

Compilation is eager: each DSL call adds its nodes immediately, and decisions that depend on what comes
next (a repartition topic is needed only when a key-changing operation is followed by a stateful one)
are taken when the stateful operation is added, from a flag the stream carries. Node and store names
follow Kafka Streams' `KSTREAM-<OP>-0000000001` scheme so descriptions read the same.

`StreamsBuilder` is the top of the DSL's import graph: it imports `KStream` and `KTable` and hands the
`KStream` class to the `InternalBuilder` (`dsl.graph`) the other DSL types share.
"""

from __future__ import annotations

from typing import Any, overload

from kappaflow.api.errors import TopologyError
from kappaflow.api.serdes import Serde
from kappaflow.api.time import TimestampExtractor
from kappaflow.dsl.graph import InternalBuilder
from kappaflow.dsl.kstream import KStream
from kappaflow.dsl.ktable import GlobalKTable, KTable
from kappaflow.dsl.options import Consumed, Materialized
from kappaflow.dsl.table_processors import KTableSourceProcessor
from kappaflow.dsl.typevars import K, V
from kappaflow.dsl.value_getters import on_demand_store_getter
from kappaflow.dsl.versioned_table import KTableVersionedSourceProcessor, versioned_getter
from kappaflow.state.builders import Stores
from kappaflow.topology.topology import Topology


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
        name = (consumed.name if consumed else None) or self._internal.new_name("KSTREAM-SOURCE-")
        self._internal.topology.add_source(
            name,
            *topic_list,
            key_serde=key_serde,
            value_serde=value_serde,
            timestamp_extractor=timestamp_extractor,
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
    ) -> KTable[Any, Any]: ...

    def table(
        self,
        topic: str,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        materialized: Materialized | str | None = None,
        timestamp_extractor: TimestampExtractor | None = None,
    ) -> KTable[Any, Any]:
        """A table of `topic`; with both serdes given, typed `KTable[K, V]` by them."""
        internal = self._internal
        mat = Materialized.of(materialized)
        store_name = mat.name or internal.new_name(f"{topic}-STATE-STORE-")
        source = internal.new_name("KSTREAM-SOURCE-")
        internal.topology.add_source(
            source,
            topic,
            key_serde=key_serde,
            value_serde=value_serde,
            timestamp_extractor=timestamp_extractor,
        )
        processor = internal.new_name("KTABLE-SOURCE-")
        if mat.versioned is not None:
            return _versioned_table(internal, processor, source, mat, key_serde, value_serde)
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

    def build(self) -> Topology:
        """Compile what was built into a `Topology` (sub-topologies, stores, internal topics), ready for
        `KafkaStreams`, the `TopologyTestDriver` or Spark reprocessing."""
        return self._internal.topology


def _versioned_table(
    internal: InternalBuilder,
    processor: str,
    source: str,
    mat: Materialized,
    key_serde: Serde[Any] | None,
    value_serde: Serde[Any] | None,
) -> KTable[Any, Any]:
    """A source table in a versioned store (KIP-914): no cache, as-of lookups for stream joins."""
    assert mat.versioned is not None
    if mat.ttl is not None:
        raise TopologyError(
            f"table '{mat.versioned.name}': a versioned store keeps history by its retention; "
            "Materialized.with_ttl applies to plain key-value stores"
        )
    name = mat.versioned.name
    table: KTable[Any, Any] = KTable(
        internal, processor, key_serde, value_serde, name, parent=None, getter=versioned_getter(name)
    )
    table.versioned = True
    internal.topology.add_processor(
        processor, lambda: KTableVersionedSourceProcessor(name, processor), source
    )
    store = Stores.versioned_key_value_store_builder(
        mat.versioned, mat.key_serde or key_serde, mat.value_serde or value_serde
    )
    if not mat.logging:
        store.with_logging_disabled()
    store.extra_log_config = dict(mat.log_config)
    internal.topology.add_state_store(store, processor)
    return table
