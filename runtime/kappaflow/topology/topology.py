"""`Topology`: the Processor API builder and the compiled graph every runtime executes.

The DSL compiles into the same object, so the TopologyTestDriver, the Kafka runtime and Spark all run one
representation. Sub-topologies are the connected components of the graph, where nodes sharing a store
are connected too; repartition topics cut the graph because their sink and source are separate nodes.
"""

from __future__ import annotations

from typing import Any

from kappaflow.api.errors import TopologyError
from kappaflow.api.offset_reset import AutoOffsetReset
from kappaflow.api.processor import ProcessorSupplier
from kappaflow.api.serdes import Serde
from kappaflow.api.time import TimestampExtractor
from kappaflow.state.builders import StoreBuilder
from kappaflow.topology.describe import TopologyDescription
from kappaflow.topology.nodes import (
    GlobalStoreSpec,
    InternalTopicSpec,
    NodeSpec,
    ProcessorSpec,
    SinkSpec,
    SourceSpec,
    StreamPartitioner,
    SubTopology,
    TopicNameExtractor,
)
from kappaflow_contract.topics import changelog_short_name, internal_topic_name


class Topology:
    """A processing graph built by hand (the Processor API) or by `StreamsBuilder.build()`: named sources,
    processors and sinks, the stores they use and the internal topics; split into sub-topologies at
    repartition topics. `describe()` prints what Java's prints.

    It exists so that every runtime (the test driver, the Kafka runner, Spark) executes one
    representation; it owns the specs only, never a client, task or store instance: tasks build those
    from it."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeSpec] = {}
        self.stores: dict[str, StoreBuilder] = {}
        self.global_stores: dict[str, GlobalStoreSpec] = {}
        self.internal_topics: dict[str, InternalTopicSpec] = {}
        self.copartition_groups: list[set[str]] = []
        # store names Java generates and never builds (an unmaterialized foreign-key join's result): they
        # count for KIP-1111's check, as in Java, though kappaflow has no store to describe
        self.unbuilt_store_names: list[str] = []
        # store -> the source topic that is its changelog (`reuse.ktable.source.topics`): no changelog
        # topic of its own, restored from its table's input up to the committed input offset, as Java
        self.source_changelogs: dict[str, str] = {}
        self._topic_sources: dict[str, str] = {}
        self._subtopologies: list[SubTopology] | None = None

    # ----------------------------------------------------------------- Processor API
    def add_source(
        self,
        name: str,
        *topics: str,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        timestamp_extractor: TimestampExtractor | None = None,
        offset_reset: AutoOffsetReset | None = None,
    ) -> Topology:
        """A source node `name` reading `topics` with these serdes (and timestamp extractor); `offset_reset`
        is where partitions never committed start (KIP-1106; None: `auto.offset.reset`)."""
        self._check_new(name)
        if not topics:
            raise TopologyError(f"source '{name}' must name at least one topic")
        for topic in topics:
            if topic in self._topic_sources:
                raise TopologyError(
                    f"topic '{topic}' is already read by source '{self._topic_sources[topic]}'; "
                    f"a topic can be a source of one node only"
                )
        for topic in topics:
            self._topic_sources[topic] = name
        self.nodes[name] = SourceSpec(
            name, list(topics), key_serde, value_serde, timestamp_extractor, offset_reset=offset_reset
        )
        self._changed()
        return self

    def add_processor(self, name: str, supplier: ProcessorSupplier, *parent_names: str) -> Topology:
        """A processor node `name`, created by `supplier()` once per task, fed by the `parent_names` nodes."""
        self._check_new(name)
        if not parent_names:
            raise TopologyError(f"processor '{name}' must have at least one parent")
        self._link(name, parent_names)
        self.nodes[name] = ProcessorSpec(name, supplier, list(parent_names))
        self._changed()
        return self

    def add_sink(
        self,
        name: str,
        topic: str | TopicNameExtractor,
        *parent_names: str,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        partitioner: StreamPartitioner | None = None,
    ) -> Topology:
        """A sink node `name` writing what the `parent_names` nodes forward to `topic` (or the topic a
        `TopicNameExtractor` names)."""
        self._check_new(name)
        if not parent_names:
            raise TopologyError(f"sink '{name}' must have at least one parent")
        self._link(name, parent_names)
        self.nodes[name] = SinkSpec(name, topic, list(parent_names), key_serde, value_serde, partitioner)
        self._changed()
        return self

    def add_state_store(self, builder: StoreBuilder, *processor_names: str) -> Topology:
        """Add the store `builder` builds and connect it to the processors named."""
        if builder.name in self.stores or builder.name in self.global_stores:
            raise TopologyError(f"store '{builder.name}' is already added")
        self.stores[builder.name] = builder
        if processor_names:
            self.connect_processor_and_state_stores_each(processor_names, builder.name)
        self._changed()
        return self

    def connect_processor_and_state_stores(self, processor_name: str, *store_names: str) -> Topology:
        """Let the processor `processor_name` use the stores named (already added)."""
        node = self.nodes.get(processor_name)
        if not isinstance(node, ProcessorSpec):
            raise TopologyError(f"'{processor_name}' is not a processor of this topology")
        for store in store_names:
            if store not in self.stores and store not in self.global_stores:
                raise TopologyError(f"processor '{processor_name}' uses unknown store '{store}'")
            if store not in node.stores:
                node.stores.append(store)
        self._changed()
        return self

    def connect_processor_and_state_stores_each(self, processor_names: tuple[str, ...], store: str) -> None:
        """Connect `store` to each of the processors named."""
        for processor in processor_names:
            self.connect_processor_and_state_stores(processor, store)

    def add_global_store(
        self,
        builder: StoreBuilder,
        source_name: str,
        topic: str,
        processor_name: str,
        supplier: ProcessorSupplier,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        timestamp_extractor: TimestampExtractor | None = None,
    ) -> Topology:
        """A store that every instance fills from all partitions of `topic`, read by any task."""
        if builder.logging_enabled:
            raise TopologyError(
                f"global store '{builder.name}' must have logging disabled: its topic is its log"
            )
        for name in (source_name, processor_name):
            self._check_new(name)
        if topic in self._topic_sources:
            raise TopologyError(f"topic '{topic}' is already read by source '{self._topic_sources[topic]}'")
        self._topic_sources[topic] = source_name
        source = SourceSpec(source_name, [topic], key_serde, value_serde, timestamp_extractor)
        source.children.append(processor_name)
        processor = ProcessorSpec(processor_name, supplier, [source_name], [builder.name])
        self.global_stores[builder.name] = GlobalStoreSpec(
            builder.name, source, processor, position=len(self.nodes)
        )
        self.stores[builder.name] = builder
        self._changed()
        return self

    # ----------------------------------------------------------------- used by the DSL
    def add_internal_topic(self, spec: InternalTopicSpec) -> None:
        """Declare an internal topic (repartition or changelog) the application creates and owns."""
        self.internal_topics[spec.name] = spec
        self._changed()

    def connect_source_store_and_topic(self, store: str, topic: str) -> None:
        """Make the source topic `topic` the changelog of `store` (Java's `connectSourceStoreAndTopic`):
        it is restored from `topic`; the caller disables the store's own logging."""
        if store not in self.stores:
            raise TopologyError(f"unknown store '{store}'")
        self.source_changelogs[store] = topic
        self._changed()

    def add_copartition_group(self, topics: set[str]) -> None:
        """Declare that these topics must have the same partition count (their records join by partition);
        checked at start-up."""
        self.copartition_groups.append(set(topics))

    # ----------------------------------------------------------------- queries
    def _check_new(self, name: str) -> None:
        if not name:
            raise TopologyError("node names must not be empty")
        if name in self.nodes or any(
            name in (g.source.name, g.processor.name) for g in self.global_stores.values()
        ):
            raise TopologyError(f"a node named '{name}' already exists")

    def _link(self, name: str, parent_names: tuple[str, ...]) -> None:
        for parent in parent_names:
            node = self.nodes.get(parent)
            if node is None:
                raise TopologyError(f"'{name}' names unknown parent '{parent}'")
            if isinstance(node, SinkSpec):
                raise TopologyError(f"'{name}' cannot have sink '{parent}' as its parent")
        for parent in parent_names:
            self.nodes[parent].children.append(name)

    def _changed(self) -> None:
        self._subtopologies = None

    def remove_nodes(self, *names: str) -> None:
        """Drop nodes a rewrite replaced (`topology.optimization`): each leaves its parents' children and
        frees the topics it read; the caller re-links their children."""
        for name in names:
            node = self.nodes.pop(name)
            for parent in node.parents:
                if parent in self.nodes and name in self.nodes[parent].children:
                    self.nodes[parent].children.remove(name)
            if isinstance(node, SourceSpec):
                for topic in node.topics:
                    self._topic_sources.pop(topic, None)
        self._changed()

    def changed(self) -> None:
        """A rewrite (`topology.optimization`, dsl.optimize) edited the nodes or stores directly: the
        sub-topologies are computed again."""
        self._changed()

    def global_node_names(self) -> set[str]:
        """The names of the global stores' source and processor nodes."""
        return {n for g in self.global_stores.values() for n in (g.source.name, g.processor.name)}

    def sub_topologies(self) -> list[SubTopology]:
        """The sub-topologies: the parts connected without a topic in between, cut at repartition topics; each
        runs as one task per input partition."""
        if self._subtopologies is None:
            self._subtopologies = self._compute_subtopologies()
        return self._subtopologies

    def _compute_subtopologies(self) -> list[SubTopology]:
        parent: dict[str, str] = {name: name for name in self.nodes}

        def find(x: str) -> str:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        def union(a: str, b: str) -> None:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[rb] = ra

        store_user: dict[str, str] = {}
        for node in self.nodes.values():
            for p in node.parents:
                union(node.name, p)
            if isinstance(node, ProcessorSpec):
                for store in node.stores:
                    if store in self.global_stores:
                        continue
                    if store in store_user:
                        union(node.name, store_user[store])
                    else:
                        store_user[store] = node.name
        groups: dict[str, list[NodeSpec]] = {}
        for node in self.nodes.values():  # insertion order numbers the groups
            groups.setdefault(find(node.name), []).append(node)
        result: list[SubTopology] = []
        for index, members in enumerate(groups.values()):
            sources = [t for n in members if isinstance(n, SourceSpec) for t in n.topics]
            sinks = [n.topic for n in members if isinstance(n, SinkSpec) and isinstance(n.topic, str)]
            stores: list[str] = []
            for n in members:
                if isinstance(n, ProcessorSpec):
                    stores.extend(s for s in n.stores if s not in stores and s not in self.global_stores)
            repartition = [t for t in sources if t in self.internal_topics]
            result.append(SubTopology(index, members, sources, sinks, stores, repartition))
        return result

    def subtopology_for_topic(self, topic: str) -> SubTopology:
        """The sub-topology that reads `topic`."""
        for sub in self.sub_topologies():
            if topic in sub.source_topics:
                return sub
        raise TopologyError(f"no sub-topology reads topic '{topic}'")

    def source_topics(self) -> list[str]:
        """The user's input topics (internal topics excluded, global topics included)."""
        topics = [t for s in self.sub_topologies() for t in s.source_topics if t not in self.internal_topics]
        topics.extend(g.source.topics[0] for g in self.global_stores.values())
        return topics

    def sink_topics(self) -> list[str]:
        """The topics the topology writes to, internal topics excluded."""
        return [t for s in self.sub_topologies() for t in s.sink_topics if t not in self.internal_topics]

    def changelog_topics(self) -> dict[str, InternalTopicSpec]:
        """Changelog topic per logged store: `<store>-changelog` (the runtime prefixes the app id)."""
        result: dict[str, InternalTopicSpec] = {}
        for name, builder in self.stores.items():
            if name in self.global_stores or not builder.logging_enabled or name in self.source_changelogs:
                continue
            config = {"cleanup.policy": "compact"}
            config.update(builder.log_config)
            result[name] = InternalTopicSpec(changelog_short_name(name), "changelog", None, config)
        return result

    def offset_reset_policies(self) -> dict[str, AutoOffsetReset]:
        """The user topics whose source set a reset policy (KIP-1106), by topic."""
        return {
            topic: node.offset_reset
            for node in self.nodes.values()
            if isinstance(node, SourceSpec) and node.offset_reset is not None
            for topic in node.topics
            if topic not in self.internal_topics
        }

    def undescribed_stores(self) -> set[str]:
        """Stores kappaflow keeps where Java has none (see `KeyValueStoreBuilder.described`)."""
        return {name for name, builder in self.stores.items() if not getattr(builder, "described", True)}

    def resolve_topic(self, topic: str, application_id: str) -> str:
        """The full name of `topic`: internal topics get the application id prefix, user topics stay."""
        return internal_topic_name(application_id, topic) if topic in self.internal_topics else topic

    def internal_topic_names(self, application_id: str) -> list[str]:
        """Full names of every internal topic: repartition topics, then the stores' changelogs."""
        names = [internal_topic_name(application_id, t) for t in self.internal_topics]
        return names + [internal_topic_name(application_id, s.name) for s in self.changelog_topics().values()]

    def describe(self) -> TopologyDescription:
        """The topology's description; `str()` of it is Java's `describe()` text."""
        return TopologyDescription(self)
