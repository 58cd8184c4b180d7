"""Node specifications: what a Topology is made of, before any task instantiates it.

A spec holds suppliers, never processor instances, so each task builds its own processors and a Topology
can be described, serialized to JSON for the operator, or run on Spark without creating runtime state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kappaflow.api.offset_reset import AutoOffsetReset
from kappaflow.api.processor import ProcessorSupplier
from kappaflow.api.serdes import Serde
from kappaflow.api.time import TimestampExtractor

# Chooses the output topic of a dynamic sink: (key, value, record context topic) -> topic name.
TopicNameExtractor = Callable[[Any, Any, str], str]
# Chooses a partition: (topic, key, value, partition count) -> partition, or None for the default.
StreamPartitioner = Callable[[str, Any, Any, int], int | None]


@dataclass
class SourceSpec:
    name: str
    topics: list[str]
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    timestamp_extractor: TimestampExtractor | None = None
    children: list[str] = field(default_factory=list)
    kind: str = "source"
    # KIP-1106: where a partition without a committed offset starts; None follows auto.offset.reset
    offset_reset: AutoOffsetReset | None = None

    @property
    def parents(self) -> list[str]:
        return []


@dataclass
class ProcessorSpec:
    name: str
    supplier: ProcessorSupplier
    parents: list[str]
    stores: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    kind: str = "processor"


@dataclass
class SinkSpec:
    name: str
    topic: str | TopicNameExtractor
    parents: list[str]
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    partitioner: StreamPartitioner | None = None
    kind: str = "sink"

    @property
    def children(self) -> list[str]:
        return []


NodeSpec = SourceSpec | ProcessorSpec | SinkSpec


@dataclass
class InternalTopicSpec:
    """A topic the application owns. `name` has no application-id prefix; the runtime adds it."""

    name: str
    kind: str  # "repartition" or "changelog" (foreign-key joins' topics are repartition topics)
    partitions: int | None = None
    config: dict[str, str] = field(default_factory=dict)


@dataclass
class GlobalStoreSpec:
    store_name: str
    source: SourceSpec
    processor: ProcessorSpec
    # how many nodes the topology held when the store was added: Java numbers sub-topologies and global
    # stores together, in the order their first node was added, and describe() prints those numbers
    position: int = 0


@dataclass
class SubTopology:
    """A connected part of the graph; it runs as one task per partition of its source topics."""

    id: int
    nodes: list[NodeSpec]
    source_topics: list[str]
    sink_topics: list[str]
    stores: list[str]
    repartition_sources: list[str] = field(default_factory=list)
