"""`InternalBuilder`: the topology one `StreamsBuilder` compiles into, and the store builders the DSL's
operators share.

This module sits below every DSL type (`KStream`, `KTable`, grouped and windowed streams), so none of
them depends on another through it. The one place a lower type must make a higher one - a table's
`to_stream()` makes a `KStream`, and `dsl.kstream` imports `dsl.ktable` - goes through `new_stream`:
`StreamsBuilder`, the module above both, hands in the `KStream` class when it creates the builder.
So `kappaflow.dsl` imports nothing in a circle (an import-linter contract checks it). `KStream` is named
here and in `dsl.ktable` in annotations only, under `TYPE_CHECKING`: the typed DSL's one back reference
(a table's `to_stream()` returns a `KStream`), which the contract lists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from kappaflow.api.errors import TopologyError
from kappaflow.api.processor import ProcessorSupplier
from kappaflow.api.serdes import Serde
from kappaflow.dsl.options import Materialized
from kappaflow.dsl.self_join import SelfJoinCandidate
from kappaflow.dsl.stream_processors import NullKeyFilter
from kappaflow.state.builders import KeyValueStoreBuilder, Stores
from kappaflow.state.window_store import WindowStoreBuilder, window_bytes_supplier
from kappaflow.topology.nodes import InternalTopicSpec
from kappaflow.topology.topology import Topology
from kappaflow_contract.topics import repartition_short_name

# Java's graph flags: key-changing operations (`keyChangingOperation(true)`) and value-changing ones
KEY_CHANGING = frozenset({"KSTREAM-MAP-", "KSTREAM-FLATMAP-", "KSTREAM-KEY-SELECT-", "KSTREAM-PROCESSOR-"})
VALUE_CHANGING = frozenset({"KSTREAM-MAPVALUES-", "KSTREAM-FLATMAPVALUES-", "KSTREAM-PROCESSVALUES-"})


@dataclass(frozen=True)
class RepartitionHop:
    """One repartition: `parent` -> null-key filter -> sink -> `topic` -> source."""

    parent: str
    filter: str
    sink: str
    source: str
    topic: str
    key_serde: Serde[Any] | None
    value_serde: Serde[Any] | None


if TYPE_CHECKING:
    from kappaflow.dsl.kstream import KStream

# Java's createRepartitionedSource tells a generated repartition base from a user's name by this pattern
_GENERATED = re.compile(r"KSTREAM.*-[0-9]{10}")


class StreamFactory(Protocol):
    """Makes the `KStream` over a node (the `KStream` class itself is one)."""

    def __call__(
        self,
        builder: InternalBuilder,
        node: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        repartition_required: bool,
    ) -> KStream[Any, Any]: ...


class InternalBuilder:
    """Shared state of one StreamsBuilder: the topology under construction and the name counter."""

    def __init__(self, stream_factory: StreamFactory) -> None:
        self.topology = Topology()
        self._index = 0
        self._stream_factory = stream_factory
        # (store, topic) of every `builder.table`: what `reuse.ktable.source.topics` rewrites
        self.table_sources: list[tuple[str, str]] = []
        # stream-stream joins of a stream with itself: what `single.store.self.join` rewrites
        self.self_joins: list[SelfJoinCandidate] = []
        # what `merge.repartition.topics` reads: the key- and value-changing nodes (Java's graph flags)
        # and the repartitions Java may merge (groupings, joins, to_table; not `repartition()`)
        self.key_changing: set[str] = set()
        self.value_changing: set[str] = set()
        self.optimizable_repartitions: list[RepartitionHop] = []
        self.merge_nodes: list[str] = []  # `KStream.merge` nodes, in creation order (Java's mergeNodes)

    def new_stream(
        self,
        node: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        *,
        repartition_required: bool,
    ) -> KStream[Any, Any]:
        """The stream of records leaving `node` (a table's `to_stream()`)."""
        return self._stream_factory(self, node, key_serde, value_serde, repartition_required)

    def new_name(self, prefix: str) -> str:
        name = f"{prefix}{self._index:010d}"
        self._index += 1
        return name

    def name_or_new(self, name: str | None, prefix: str) -> str:
        """Java's `NamedInternal.orElseGenerateWithPrefix`: a user's name wins, yet a number is used up
        either way, so the generated names after a named operation are Java's too."""
        generated = self.new_name(prefix)
        return name if name else generated

    def add_processor(
        self, prefix: str, supplier: ProcessorSupplier, *parents: str, name: str | None = None
    ) -> str:
        node = self.name_or_new(name, prefix)
        self.topology.add_processor(node, supplier, *parents)
        if prefix in KEY_CHANGING:
            self.key_changing.add(node)
        elif prefix in VALUE_CHANGING:
            self.value_changing.add(node)
        return node

    def kv_store_builder(
        self,
        materialized: Materialized,
        generated_name: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
    ) -> KeyValueStoreBuilder[Any, Any]:
        name = materialized.name or generated_name
        if materialized.store_type == "memory":
            supplier = Stores.in_memory_key_value_store(name)
        else:
            supplier = Stores.persistent_timestamped_key_value_store(name)
        builder = Stores.timestamped_key_value_store_builder(
            supplier, materialized.key_serde or key_serde, materialized.value_serde or value_serde
        )
        builder.caching_enabled = materialized.caching
        builder.ttl = materialized.ttl
        if materialized.logging:
            builder.with_logging_enabled(materialized.log_config)
        else:
            builder.with_logging_disabled()
        return builder

    def add_table_repartition(
        self, parent: str, base_name: str, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None
    ) -> str:
        """A re-grouped table's repartition: sink -> `<base>-repartition` -> source, no null-key filter (the
        table's select processor drops null keys itself), nodes numbered as Java's `KGroupedTableImpl`."""
        topic = self._new_repartition_topic(base_name, None)
        sink, source = self.new_name("KSTREAM-SINK-"), self.new_name("KSTREAM-SOURCE-")
        self.topology.add_sink(sink, topic, parent, key_serde=key_serde, value_serde=value_serde)
        self.topology.add_source(source, topic, key_serde=key_serde, value_serde=value_serde)
        return source

    def add_internal_topic_hop(
        self,
        parents: str | tuple[str, ...],
        topic: str,
        sink: str,
        source: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
    ) -> str:
        """sink -> `topic` -> source with the given names, no filter (a foreign-key join's subscription and
        response topics, as Java builds them); returns the source's name."""
        if topic in self.topology.internal_topics:
            raise TopologyError(f"internal topic '{topic}' already exists: name the join differently")
        config = {"cleanup.policy": "delete", "retention.ms": "-1"}
        self.topology.add_internal_topic(InternalTopicSpec(topic, "repartition", None, config))
        names = (parents,) if isinstance(parents, str) else parents
        self.topology.add_sink(sink, topic, *names, key_serde=key_serde, value_serde=value_serde)
        self.topology.add_source(source, topic, key_serde=key_serde, value_serde=value_serde)
        return source

    def _new_repartition_topic(self, base_name: str, partitions: int | None) -> str:
        topic = repartition_short_name(base_name)
        if topic in self.topology.internal_topics:
            raise TopologyError(
                f"repartition topic '{topic}' already exists: name the grouping or store differently"
            )
        self.topology.add_internal_topic(
            InternalTopicSpec(
                topic, "repartition", partitions, {"cleanup.policy": "delete", "retention.ms": "-1"}
            )
        )
        return topic

    def add_repartition(
        self,
        parent: str,
        base_name: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        *,
        user_named: bool | None = None,
        partitions: int | None = None,
        partitioner: Any = None,
        drop_null_keys: bool = True,
        optimizable: bool = True,
    ) -> str:
        """Insert null-key filter -> sink -> `<base>-repartition` -> source; returns the source's name.
        Nodes are named `<base>-repartition-filter/-sink/-source` unless the base looks generated
        (`KSTREAM...-<10 digits>`, Java's test; `user_named` overrides it for foreign-key joins).
        `drop_null_keys=False` keeps null keys (a left foreign-key join's subscription with a null
        foreign key must travel on, KIP-962); the filter node is then a pass-through. `optimizable`:
        `merge.repartition.topics` may merge it (Java's OptimizableRepartitionNode; not `repartition()`)."""
        topic = self._new_repartition_topic(base_name, partitions)
        # Java's createRepartitionedSource: sink, filter and source numbers are used up in that order, named
        # or not, so the nodes after a repartition are numbered as in Java
        sink, filter_name, source = (
            self.new_name(p) for p in ("KSTREAM-SINK-", "KSTREAM-FILTER-", "KSTREAM-SOURCE-")
        )
        if user_named is None:  # Java's rule: a base that looks generated keeps generated node names
            user_named = _GENERATED.fullmatch(base_name) is None
        if user_named:
            sink, filter_name, source = f"{topic}-sink", f"{topic}-filter", f"{topic}-source"
        self.topology.add_processor(
            filter_name, lambda: NullKeyFilter(filter_name, enabled=drop_null_keys), parent
        )
        self.topology.add_sink(
            sink, topic, filter_name, key_serde=key_serde, value_serde=value_serde, partitioner=partitioner
        )
        self.topology.add_source(source, topic, key_serde=key_serde, value_serde=value_serde)
        if optimizable and drop_null_keys and partitioner is None:
            self.optimizable_repartitions.append(
                RepartitionHop(parent, filter_name, sink, source, topic, key_serde, value_serde)
            )
        return source


def reject_ttl_on_windowed(mat: Materialized, store_name: str) -> None:
    """`Materialized.with_ttl` is for key-value stores: window and session stores expire by retention,
    and silently ignoring the TTL would leave a user believing state expires when it does not."""
    if mat.ttl is not None:
        raise TopologyError(
            f"store '{store_name}': Materialized.with_ttl applies to key-value stores; a windowed store "
            "expires windows by its retention (Materialized.with_retention)"
        )


def window_store_builder(
    mat: Materialized,
    store_name: str,
    key_serde: Serde[Any] | None,
    value_serde: Serde[Any] | None,
    window_size: int,
    minimum_retention: int,
    *,
    retain_duplicates: bool = False,
) -> WindowStoreBuilder:
    """A DSL window store: retention is size + grace unless Materialized.with_retention says more
    (less is an error, as in Kafka Streams: windows would vanish before they close)."""
    reject_ttl_on_windowed(mat, store_name)
    retention = minimum_retention if mat.retention_ms is None else mat.retention_ms
    if retention < minimum_retention:
        raise TopologyError(
            f"store '{store_name}': retention {retention} ms is shorter than window size + grace "
            f"({minimum_retention} ms)"
        )
    builder = WindowStoreBuilder(
        window_bytes_supplier(store_name, mat.store_type != "memory"),
        key_serde,
        value_serde,
        window_size,
        retention,
        retain_duplicates=retain_duplicates,
    )
    builder.caching_enabled = mat.caching
    if mat.logging:
        builder.with_logging_enabled(mat.log_config)
    else:
        builder.with_logging_disabled()
    return builder
