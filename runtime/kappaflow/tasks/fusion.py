"""Operator fusion: a task's chains of built-in processors compiled into plain function calls.

The generic path moves a record from node to node as a `Record`, through `forward()` (or a
`DirectRoute`), making each node current on the way. For the built-in stateless processors (filter,
map, flat_map, select_key, peek, ...), the repartition sink and a cached aggregation that is all
overhead: their callbacks take a key and a value, never the node or the record. So once a task's
processors are initialized, each such node is compiled into a *stage*, a function
`(key, value, timestamp, headers)` that calls the next stage directly: no `Record` per hop, no
current-node bookkeeping. User callbacks are called exactly as before, in the same order.

What must not change is kept by the stages themselves:
- an exception names the deepest node it came from: a stage sets `context.failed_node` to its own name
  when nothing deeper did (what `forward()` does), so the processing error and handler see the same node;
- a node the fusion does not know (user processors, joins, branches, ...) is reached through a
  *boundary* stage that builds the `Record`, makes that node current and calls it as `forward()` would;
- every fused node keeps a `handle` (a `Record` adapter over its stage), so a generic parent (a table
  flush, a branch, a merge) reaches the same code.

A built-in processor takes part by being `Fusable` and defining `fuse(downstream, node_name) -> Stage |
None` next to its `process` (None: not in this configuration, e.g. an aggregation whose store has no
cache); a subclass that overrides `process` without its own `fuse` stays generic. A processor whose stage
kappaflow's native core also compiles (a cached aggregation) defines `fuse_native` too; the task prefers
it when it runs the native core, and both stages are tested to do the same.
`kappaflow.fusion.enabled=false` turns it all off, which the tests use to compare both paths.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from kappaflow.api.errors import SerializationError, StreamsError
from kappaflow.api.record import Headers, Record
from kappaflow.tasks.native import NativeCore, SinkPlan
from kappaflow.tasks.nodes import ProcessorNode, SinkNode

Stage = Callable[[Any, Any, int, Headers], None]
"""A compiled node: called with the key, value, timestamp and headers a `Record` would carry."""


class FailureContext(Protocol):
    failed_node: str | None
    current_node: ProcessorNode | None


class Fusable:
    """A built-in processor that can compile itself into a stage (see the module's docstring)."""

    __slots__ = ()

    def fuse(self, downstream: Stage, node: str) -> Stage | None:
        """The stage doing what `process` does, calling `downstream` where it would forward."""
        return None

    def fuse_native(self, downstream: Stage, node: str, core: NativeCore) -> Stage | None:
        """The same stage compiled by kappaflow's native core, when it has one for this processor
        (tried before `fuse` when the core is in use; None: `fuse` decides)."""
        return None


def fusable(processor: object) -> bool:
    """Whether `processor.fuse` compiles exactly its `process`: both defined by its own class."""
    own = vars(type(processor))
    return isinstance(processor, Fusable) and "fuse" in own and "process" in own


def mark_failed(context: Any, node: str) -> None:
    """On an exception leaving a stage: name this node, unless a deeper one was named already."""
    if context.failed_node is None:
        context.failed_node = node


def _no_children(key: Any, value: Any, timestamp: int, headers: Headers) -> None:
    return None


def fan_out(stages: list[Stage]) -> Stage:
    """One stage for a node's children, called in order (as `forward()` visits them)."""
    if not stages:
        return _no_children
    if len(stages) == 1:
        return stages[0]
    ordered = tuple(stages)

    def each(key: Any, value: Any, timestamp: int, headers: Headers) -> None:
        for stage in ordered:
            stage(key, value, timestamp, headers)

    return each


def boundary(node: ProcessorNode, context: FailureContext) -> Stage:
    """The stage for a node the fusion does not compile: a `Record` to its `handle`, as `forward()`
    delivers it (the node current while it runs, the previous one restored, the node named on error)."""
    handle = node.handle

    def deliver(key: Any, value: Any, timestamp: int, headers: Headers) -> None:
        previous = context.current_node
        context.current_node = node
        try:
            handle(Record(key, value, timestamp, headers))
        except BaseException:
            # as forward(): the node left current names the error (a DirectRoute inside leaves the
            # failing child current)
            failed = context.current_node
            if context.failed_node is None and failed is not None:
                context.failed_node = failed.name
            context.current_node = previous
            raise
        context.current_node = previous

    return deliver


def sink_stage(sink: SinkNode, context: FailureContext, core: NativeCore | None = None) -> Stage | None:
    """SinkNode.process for a fixed topic, compiled (a topic extractor stays on the generic path); by
    the native core when there is one and the sink has no partitioner."""
    topic = sink.static_topic
    if topic is None or sink.missing_serde:
        return None  # a dynamic topic needs the record; a missing serde fails there, with its message
    name = sink.name
    if core is not None and sink.partitioner is None:
        plan = SinkPlan(
            topic=topic,
            node=name,
            send=sink.send,
            key_utf8=sink.key_utf8,
            value_utf8=sink.value_utf8,
            key_serializer=sink.key_serializer,
            value_serializer=sink.value_serializer,
            context=sink.context,
            serialization_error=SerializationError,
            streams_error=StreamsError,
        )
        return core.SinkStage(plan)
    send = sink.send
    key_utf8, value_utf8 = sink.key_utf8, sink.value_utf8
    key_serializer, value_serializer = sink.key_serializer, sink.value_serializer
    partitioner = sink.partitioner
    sink_context = sink.context  # its collector asked per record, as SinkNode._partition does

    def write(key: Any, value: Any, timestamp: int, headers: Headers) -> None:
        try:
            try:
                raw_key = key.encode() if key_utf8 and type(key) is str else key_serializer(topic, key)
                if value_utf8 and type(value) is str:
                    raw_value = value.encode()
                else:
                    raw_value = value_serializer(topic, value)
            except SerializationError as exc:
                raise SerializationError(f"sink '{name}': {exc}") from exc
            if timestamp < 0:
                raise StreamsError(f"sink '{name}': record has negative timestamp {timestamp}")
            if partitioner is None:
                send(topic, raw_key, raw_value, headers, timestamp, None)
            else:
                count = sink_context.collector.partition_count(topic)
                partition = partitioner(topic, key, value, count) if count else None
                send(topic, raw_key, raw_value, headers, timestamp, partition)
        except BaseException:
            if context.failed_node is None:
                context.failed_node = name
            raise

    return write


def _adapter(stage: Stage) -> Callable[[Record[Any, Any]], None]:
    def handle(record: Record[Any, Any]) -> None:
        stage(record.key, record.value, record.timestamp, record.headers)

    return handle


def fuse_nodes(nodes: list[ProcessorNode], context: FailureContext, core: NativeCore | None) -> int:
    """Compile every node that can be (its processors already initialized); return how many were.

    Each compiled node gets `fused` (its stage) and a `handle` that runs it; the others keep theirs.
    With the native core, a processor's `fuse_native` stage is preferred to its `fuse`."""
    stages: dict[int, Stage | None] = {}

    def compile_node(node: ProcessorNode) -> Stage | None:
        if id(node) in stages:
            return stages[id(node)]
        stage: Stage | None = None
        if isinstance(node, SinkNode):
            stage = sink_stage(node, context, core)
        elif isinstance(node.processor, Fusable) and fusable(node.processor):
            downstream = fan_out([compile_node(c) or boundary(c, context) for c in node.children])
            processor = node.processor
            if core is not None:
                stage = processor.fuse_native(downstream, node.name, core)
            if stage is None:
                stage = processor.fuse(downstream, node.name)
        stages[id(node)] = stage
        return stage

    fused = 0
    for node in nodes:
        stage = compile_node(node)
        if stage is not None:
            node.fused = stage
            node.handle = _adapter(stage)
            fused += 1
    return fused
