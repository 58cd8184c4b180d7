"""Runtime nodes: a task's instantiated processors, wired parent to child.

Sources deserialize, processors run user code, sinks serialize and hand records to the collector. The
wiring is plain object references so forwarding a record costs a few attribute lookups per hop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kappaflow.api.errors import DeserializationError, SerializationError, StreamsError
from kappaflow.api.processor import Processor
from kappaflow.api.record import Headers, Record
from kappaflow.api.serdes import Serde
from kappaflow.api.time import ConsumedRecord, TimestampExtractor, record_timestamp
from kappaflow.topology.nodes import SinkSpec, SourceSpec, StreamPartitioner, TopicNameExtractor

if TYPE_CHECKING:
    from kappaflow.tasks.context import ProcessorContextImpl


class ProcessorNode:
    __slots__ = ("children", "children_by_name", "name", "processor")

    def __init__(self, name: str, processor: Processor[Any, Any] | None) -> None:
        self.name = name
        self.processor = processor
        self.children: list[ProcessorNode] = []
        self.children_by_name: dict[str, ProcessorNode] = {}

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
    __slots__ = ("context", "key_serde", "timestamp_extractor", "topics", "value_serde")

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
        try:
            k = self.key_serde.deserialize(topic, key)
        except Exception as exc:
            raise DeserializationError(
                f"cannot deserialize the key of record {topic}-{partition}@{offset} with "
                f"{self.key_serde!r}: {exc}",
                topic=topic,
                partition=partition,
                offset=offset,
            ) from exc
        try:
            v = self.value_serde.deserialize(topic, value)
        except Exception as exc:
            raise DeserializationError(
                f"cannot deserialize the value of record {topic}-{partition}@{offset} with "
                f"{self.value_serde!r}: {exc}",
                topic=topic,
                partition=partition,
                offset=offset,
            ) from exc
        return ConsumedRecord(topic, partition, offset, timestamp, k, v, headers)

    def process(self, record: Record[Any, Any]) -> None:
        # the task makes this node current before calling, so forward() reaches its children
        self.context.forward(record)

    def bind(self, context: ProcessorContextImpl) -> None:
        self.context = context


class SinkNode(ProcessorNode):
    __slots__ = ("context", "key_serde", "partitioner", "topic", "topic_resolver", "value_serde")

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
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.partitioner: StreamPartitioner | None = spec.partitioner

    def bind(self, context: ProcessorContextImpl) -> None:
        self.context = context

    def process(self, record: Record[Any, Any]) -> None:
        context = self.context
        if isinstance(self.topic, str):
            topic = self.topic_resolver(self.topic)
        else:
            topic = self.topic_resolver(self.topic(record.key, record.value, context.record_context().topic))
        if self.key_serde is None or self.value_serde is None:
            which = "key" if self.key_serde is None else "value"
            raise StreamsError(
                f"sink '{self.name}' writing to '{topic}' has no {which} serde: pass one in Produced "
                f"(to(..., {which}_serde=...)) or set default.{which}.serde"
            )
        try:
            key = self.key_serde.serialize(topic, record.key)
            value = self.value_serde.serialize(topic, record.value)
        except SerializationError as exc:
            raise SerializationError(f"sink '{self.name}': {exc}") from exc
        partition = None
        if self.partitioner is not None:
            count = context.collector.partition_count(topic)
            if count:
                partition = self.partitioner(topic, record.key, record.value, count)
        timestamp = record.timestamp
        if timestamp < 0:
            raise StreamsError(f"sink '{self.name}': record has negative timestamp {timestamp}")
        context.collector.send(topic, key, value, record.headers, timestamp, partition)
