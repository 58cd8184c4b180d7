"""Runtime nodes: a task's instantiated processors, wired parent to child.

Sources deserialize, processors run user code, sinks serialize and hand records to the collector. The
wiring is plain object references so forwarding a record costs a few attribute lookups per hop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kappaflow.api.errors import (
    DeserializationError,
    SchemaRegistryUnavailableError,
    SerializationError,
    StreamsError,
)
from kappaflow.api.processor import Processor
from kappaflow.api.record import Headers, Record
from kappaflow.api.serdes import Serde, is_utf8
from kappaflow.api.time import ConsumedRecord, TimestampExtractor, record_timestamp
from kappaflow.topology.nodes import SinkSpec, SourceSpec, StreamPartitioner, TopicNameExtractor

if TYPE_CHECKING:
    from kappaflow.tasks.context import ProcessorContextImpl

UNSET: Any = object()
"""A key not deserialized yet: tells a failing key from a failing value."""


class ProcessorNode:
    __slots__ = ("children", "children_by_name", "fused", "handle", "name", "processor")

    def __init__(self, name: str, processor: Processor[Any, Any] | None) -> None:
        self.name = name
        self.processor = processor
        self.children: list[ProcessorNode] = []
        self.children_by_name: dict[str, ProcessorNode] = {}
        # what forward() calls: the processor's own process() (one Python frame less per hop), or
        # this node's process() for sources and sinks
        self.handle: Any = processor.process if processor is not None else self.process
        # the node compiled with its successors (kappaflow.tasks.fusion), called with the record's parts
        self.fused: Any = None

    def unfuse(self) -> None:
        """Back to the generic path (before a task's processors are initialized again, over new stores)."""
        self.fused = None
        self.handle = self.processor.process if self.processor is not None else self.process

    def add_child(self, child: ProcessorNode) -> None:
        self.children.append(child)
        self.children_by_name[child.name] = child

    def init(self, context: ProcessorContextImpl) -> None:
        if self.processor is not None:
            previous = context.current_node
            context.current_node = self
            try:
                self.processor.init(context)
            finally:
                context.current_node = previous

    def process(self, record: Record[Any, Any]) -> None:
        self.processor.process(record)  # type: ignore[union-attr]

    def close(self) -> None:
        if self.processor is not None:
            self.processor.close()


class SourceNode(ProcessorNode):
    __slots__ = (
        "context",
        "key_deserializer",
        "key_serde",
        "timestamp_extractor",
        "topics",
        "value_deserializer",
        "value_serde",
    )

    def __init__(
        self,
        spec: SourceSpec,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        timestamp_extractor: TimestampExtractor | None,
    ) -> None:
        super().__init__(spec.name, None)
        self.topics = spec.topics
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.key_deserializer = key_serde.deserialize
        self.value_deserializer = value_serde.deserialize
        self.timestamp_extractor = timestamp_extractor or record_timestamp

    def deserialize(
        self,
        topic: str,
        partition: int,
        offset: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
    ) -> ConsumedRecord:
        k, v = self.deserialize_key_value(topic, partition, offset, key, value)
        return ConsumedRecord(topic, partition, offset, timestamp, k, v, headers)

    def deserialize_key_value(
        self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None
    ) -> tuple[Any, Any]:
        """The record's key and value, or a DeserializationError naming the record and the serde."""
        k: Any = UNSET
        try:
            k = self.key_deserializer(topic, key)
            v = self.value_deserializer(topic, value)
        except SchemaRegistryUnavailableError:
            raise
        except Exception as exc:
            raise self.deserialization_error(exc, k is UNSET, topic, partition, offset) from exc
        return k, v

    def deserialization_error(
        self, exc: Exception, in_key: bool, topic: str, partition: int, offset: int
    ) -> DeserializationError:
        """The error for a key (`in_key`) or value the serde could not read, naming record and serde."""
        which, serde = ("key", self.key_serde) if in_key else ("value", self.value_serde)
        error = DeserializationError(
            f"cannot deserialize the {which} of record {topic}-{partition}@{offset} with {serde!r}: {exc}",
            topic=topic,
            partition=partition,
            offset=offset,
        )
        error.__cause__ = exc
        return error

    def process(self, record: Record[Any, Any]) -> None:
        # the task makes this node current before calling, so forward() reaches its children
        self.context.forward(record)

    def bind(self, context: ProcessorContextImpl) -> None:
        self.context = context


class SinkNode(ProcessorNode):
    __slots__ = (
        "context",
        "key_serde",
        "key_serializer",
        "key_utf8",
        "missing_serde",
        "partitioner",
        "send",
        "static_topic",
        "topic",
        "topic_resolver",
        "value_serde",
        "value_serializer",
        "value_utf8",
    )

    def __init__(
        self,
        spec: SinkSpec,
        topic_resolver: Any,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
    ) -> None:
        super().__init__(spec.name, None)
        self.topic: str | TopicNameExtractor = spec.topic
        self.topic_resolver = topic_resolver
        # a fixed topic is resolved (application-id prefix for internal topics) once, not per record
        self.static_topic: str | None = topic_resolver(spec.topic) if isinstance(spec.topic, str) else None
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.missing_serde = "key" if key_serde is None else "value" if value_serde is None else ""
        # bound once: the per-record path makes no attribute lookups through serdes or the collector
        self.key_serializer: Any = key_serde.serialize if key_serde is not None else None
        self.value_serializer: Any = value_serde.serialize if value_serde is not None else None
        self.key_utf8 = is_utf8(key_serde)  # String serdes: str.encode inline, no serde call
        self.value_utf8 = is_utf8(value_serde)
        self.partitioner: StreamPartitioner | None = spec.partitioner

    def bind(self, context: ProcessorContextImpl) -> None:
        self.context = context
        self.send = context.collector.send

    def process(self, record: Record[Any, Any]) -> None:
        topic = self.static_topic
        if topic is None:
            extractor: Any = self.topic
            topic = self.topic_resolver(
                extractor(record.key, record.value, self.context.record_context().topic)
            )
        if self.missing_serde:
            which = self.missing_serde
            raise StreamsError(
                f"sink '{self.name}' writing to '{topic}' has no {which} serde: pass one in Produced "
                f"(to(..., {which}_serde=...)) or set default.{which}.serde"
            )
        key: Any = record.key
        value: Any = record.value
        try:
            key = key.encode() if self.key_utf8 and type(key) is str else self.key_serializer(topic, key)
            if self.value_utf8 and type(value) is str:
                value = value.encode()
            else:
                value = self.value_serializer(topic, value)
        except SerializationError as exc:
            raise SerializationError(f"sink '{self.name}': {exc}") from exc
        timestamp = record.timestamp
        if timestamp < 0:
            raise StreamsError(f"sink '{self.name}': record has negative timestamp {timestamp}")
        if self.partitioner is None:
            self.send(topic, key, value, record.headers, timestamp, None)
        else:
            self.send(topic, key, value, record.headers, timestamp, self._partition(topic, record))

    def _partition(self, topic: str, record: Record[Any, Any]) -> int | None:
        """The custom partitioner's choice; None (the producer's murmur2) when the count is unknown."""
        assert self.partitioner is not None
        count = self.context.collector.partition_count(topic)
        return self.partitioner(topic, record.key, record.value, count) if count else None
