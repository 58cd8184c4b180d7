"""Operator fusion: a task's chains of built-in processors compiled by kappaflow's native core.

The generic path moves a record from node to node as a `Record`, through `forward()`, making each node
current on the way: it is the reference, and the only path without the native core. For the built-in
stateless processors (filter, map, flat_map, select_key, peek, ...), fixed-topic sinks and a cached
stream aggregation that is all overhead: their callbacks take a key and a value, never the node or the
record. So once a task's processors are initialized and the native core is in use, each such node is
compiled into a *stage*, a callable `(key, value, timestamp, headers)` that calls the next stage directly
(in Rust when it is native too): no `Record` per hop, no current-node bookkeeping. User callbacks are
called exactly as `process` calls them, in the same order. There is no Python-compiled stage: measured
against the generic path and the native one, it did not earn a third implementation of every operator
(docs/record-path.md has the numbers).

What must not change is kept by the stages themselves:
- an exception names the deepest node it came from: a stage sets `context.failed_node` to its own name
  when nothing deeper did (what `forward()` does), so the processing error and handler see the same node;
- a node the fusion does not compile (user processors, joins, branches, merges, ...) is reached through
  a *boundary* stage that builds the `Record`, makes that node current and calls it as `forward()` would;
- every compiled node keeps a `handle` (a `Record` adapter over its stage), so a generic parent (a table
  flush, a branch, a merge) reaches the same code.

A built-in processor takes part by being `Fusable` and defining `fuse_native(downstream, node_name, core)
-> Stage | None` next to its `process` (None: not in this configuration, e.g. an aggregation whose store
has no cache); a subclass that overrides `process` without its own `fuse_native` stays generic.
`kappaflow.fusion.enabled=false` (or `kappaflow.native.enabled=false`) keeps every node generic, which
the tests use to compare both paths.
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

    def fuse_native(self, downstream: Stage, node: str, core: NativeCore) -> Stage | None:
        """The stage doing what `process` does, compiled by kappaflow's native core, calling
        `downstream` where `process` would forward (None: stays generic)."""
        return None


def fusable(processor: object) -> bool:
    """Whether `processor.fuse_native` compiles exactly its `process`: both defined by its own class."""
    own = vars(type(processor))
    return isinstance(processor, Fusable) and "fuse_native" in own and "process" in own


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
            # as forward(): the node left current names the error
            failed = context.current_node
            if context.failed_node is None and failed is not None:
                context.failed_node = failed.name
            context.current_node = previous
            raise
        context.current_node = previous

    return deliver


def sink_stage(sink: SinkNode, core: NativeCore) -> Stage | None:
    """SinkNode.process for a fixed topic without a partitioner, compiled by the native core (a topic
    extractor or a partitioner stays on the generic path)."""
    topic = sink.static_topic
    if topic is None or sink.missing_serde or sink.partitioner is not None:
        return None  # a dynamic topic needs the record; a missing serde fails there, with its message
    plan = SinkPlan(
        topic=topic,
        node=sink.name,
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


def _adapter(stage: Stage) -> Callable[[Record[Any, Any]], None]:
    def handle(record: Record[Any, Any]) -> None:
        stage(record.key, record.value, record.timestamp, record.headers)

    return handle


def guarded(
    stage: Stage,
    node: ProcessorNode,
    context: FailureContext,
    node_failed: Callable[[Exception, ProcessorNode], None],
) -> Stage:
    """`stage` (the child `node`'s) with the processing handler at its own level, as `forward()` calls
    each child under a handler that may CONTINUE (Java's ProcessorNode): a failure of that node loses
    only its output, so its parent goes on (a flat_map with its next value, a fan-out with the next
    child)."""

    def guard(key: Any, value: Any, timestamp: int, headers: Headers) -> None:
        try:
            stage(key, value, timestamp, headers)
        except Exception as exc:
            node_failed(exc, node)  # raises when the handler fails the task
            context.failed_node = None

    return guard


def fuse_nodes(
    nodes: list[ProcessorNode],
    context: FailureContext,
    core: NativeCore | None,
    node_failed: Callable[[Exception, ProcessorNode], None] | None = None,
) -> int:
    """Compile every node the native core can (its processors already initialized); return how many
    were. Each compiled node gets `fused` (its stage) and a `handle` that runs it; the others keep
    theirs. Without the core nothing is compiled: every node runs its generic `process`. With
    `node_failed` (a processing handler that may CONTINUE), every child stage is `guarded`."""
    if core is None:
        return 0
    stages: dict[int, Stage | None] = {}

    def compile_node(node: ProcessorNode) -> Stage | None:
        if id(node) in stages:
            return stages[id(node)]
        stage: Stage | None = None
        if isinstance(node, SinkNode):
            stage = sink_stage(node, core)
        elif isinstance(node.processor, Fusable) and fusable(node.processor):
            children = [(compile_node(c) or boundary(c, context), c) for c in node.children]
            downstream = fan_out(
                [
                    stage if node_failed is None else guarded(stage, c, context, node_failed)
                    for stage, c in children
                ]
            )
            stage = node.processor.fuse_native(downstream, node.name, core)
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
