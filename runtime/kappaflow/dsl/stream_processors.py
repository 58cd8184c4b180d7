"""Processors behind the stateless KStream operations.

Each is a tiny class with the user function bound at construction: its `process` is the reference, one
Python call for the function and one for `forward`. Key-changing mappers return `(key, value)` tuples.
With kappaflow's native core each also compiles to a stage (`fuse_native`, kappaflow.tasks.fusion): the
same steps in Rust, where only the user's function is a Python call. There is no third implementation.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

from kappaflow.api.errors import StreamsError
from kappaflow.api.processor import Processor, ProcessorContext
from kappaflow.api.record import Record
from kappaflow.tasks.fusion import Fusable, Stage
from kappaflow.tasks.native import NativeCore, StatelessPlan

AnyRecord = Record[Any, Any]


class _Base:
    context: ProcessorContext

    def init(self, context: ProcessorContext) -> None:
        self.context = context

    def close(self) -> None:
        return None


class FilterProcessor(_Base, Fusable):
    def __init__(self, predicate: Callable[[Any, Any], bool], negate: bool) -> None:
        self.predicate = predicate
        self.negate = negate

    def process(self, record: AnyRecord) -> None:
        if bool(self.predicate(record.key, record.value)) != self.negate:
            self.context.forward(record)

    def fuse_native(self, downstream: Stage, node: str, core: NativeCore) -> Stage:
        return native_stage(core, "filter", self.predicate, self.negate, node, self.context, downstream)


def _pair(result: Any, op: str) -> tuple[Any, Any]:
    if not isinstance(result, tuple) or len(result) != 2:
        raise StreamsError(f"{op}: the mapper must return a (key, value) tuple, got {result!r:.80}")
    return result


def native_stage(
    core: NativeCore,
    kind: str,
    callback: Callable[..., Any],
    flag: bool,
    node: str,
    context: Any,
    downstream: Stage,
) -> Stage:
    """A stateless processor's stage compiled by the native core (its `fuse_native`)."""
    return core.StatelessStage(StatelessPlan(kind, callback, flag, node, context, downstream, _pair))


class MapProcessor(_Base, Fusable):
    def __init__(self, mapper: Callable[[Any, Any], tuple[Any, Any]]) -> None:
        self.mapper = mapper

    def process(self, record: AnyRecord) -> None:
        key, value = _pair(self.mapper(record.key, record.value), "map")
        self.context.forward(Record(key, value, record.timestamp, record.headers))

    def fuse_native(self, downstream: Stage, node: str, core: NativeCore) -> Stage:
        return native_stage(core, "map", self.mapper, False, node, self.context, downstream)


class MapValuesProcessor(_Base, Fusable):
    def __init__(self, mapper: Callable[..., Any], with_key: bool) -> None:
        self.mapper = mapper
        self.with_key = with_key

    def process(self, record: AnyRecord) -> None:
        value = self.mapper(record.key, record.value) if self.with_key else self.mapper(record.value)
        out = Record(record.key, value, record.timestamp, record.headers)
        self.context.forward(out)

    def fuse_native(self, downstream: Stage, node: str, core: NativeCore) -> Stage:
        return native_stage(core, "map_values", self.mapper, self.with_key, node, self.context, downstream)


class FlatMapProcessor(_Base, Fusable):
    def __init__(self, mapper: Callable[[Any, Any], Iterable[tuple[Any, Any]]]) -> None:
        self.mapper = mapper

    def process(self, record: AnyRecord) -> None:
        for result in self.mapper(record.key, record.value) or ():
            key, value = _pair(result, "flat_map")
            self.context.forward(Record(key, value, record.timestamp, record.headers))

    def fuse_native(self, downstream: Stage, node: str, core: NativeCore) -> Stage:
        return native_stage(core, "flat_map", self.mapper, False, node, self.context, downstream)


class FlatMapValuesProcessor(_Base, Fusable):
    def __init__(self, mapper: Callable[..., Iterable[Any]], with_key: bool) -> None:
        self.mapper = mapper
        self.with_key = with_key

    def process(self, record: AnyRecord) -> None:
        key = record.key
        values = self.mapper(key, record.value) if self.with_key else self.mapper(record.value)
        if not values:
            return
        timestamp, headers = record.timestamp, record.headers
        forward = self.context.forward
        for value in values:
            forward(Record(key, value, timestamp, headers))

    def fuse_native(self, downstream: Stage, node: str, core: NativeCore) -> Stage:
        return native_stage(
            core, "flat_map_values", self.mapper, self.with_key, node, self.context, downstream
        )


class SelectKeyProcessor(_Base, Fusable):
    def __init__(self, selector: Callable[[Any, Any], Any]) -> None:
        self.selector = selector

    def process(self, record: AnyRecord) -> None:
        out = Record(self.selector(record.key, record.value), record.value, record.timestamp, record.headers)
        self.context.forward(out)

    def fuse_native(self, downstream: Stage, node: str, core: NativeCore) -> Stage:
        return native_stage(core, "select_key", self.selector, False, node, self.context, downstream)


class PeekProcessor(_Base, Fusable):
    def __init__(self, action: Callable[[Any, Any], None], forward: bool) -> None:
        self.action = action
        self.forwards = forward

    def process(self, record: AnyRecord) -> None:
        self.action(record.key, record.value)
        if self.forwards:
            self.context.forward(record)

    def fuse_native(self, downstream: Stage, node: str, core: NativeCore) -> Stage:
        return native_stage(core, "peek", self.action, self.forwards, node, self.context, downstream)


class BranchProcessor(_Base):
    """Sends each record to the first branch whose predicate matches, else to the default branch."""

    def __init__(
        self, predicates: list[Callable[[Any, Any], bool]], children: list[str], default: str | None
    ):
        self.predicates = predicates
        self.children = children
        self.default = default

    def process(self, record: AnyRecord) -> None:
        for predicate, child in zip(self.predicates, self.children, strict=True):
            if predicate(record.key, record.value):
                self.context.forward(record, child)
                return
        if self.default is not None:
            self.context.forward(record, self.default)


class PassThroughProcessor(_Base):
    def process(self, record: AnyRecord) -> None:
        self.context.forward(record)


class NullKeyFilter(_Base, Fusable):
    """Before a repartition topic: records with a null key cannot be partitioned, so Kafka Streams
    drops them (counted in dropped-records)."""

    def __init__(self, label: str, *, enabled: bool = True) -> None:
        self.label = label
        self.enabled = enabled

    def process(self, record: AnyRecord) -> None:
        if record.key is None and self.enabled:
            drop_record(self.context, "null-key", self.label)
            return
        self.context.forward(record)

    def fuse_native(self, downstream: Stage, node: str, core: NativeCore) -> Stage:
        if not self.enabled:
            return downstream
        context, label = self.context, self.label

        def drop() -> None:
            drop_record(context, "null-key", label)

        return native_stage(core, "null_key_filter", drop, False, node, context, downstream)


def drop_record(context: ProcessorContext, reason: str, node: str) -> None:
    """Count a record the DSL drops by design (null key, null value, late), as Kafka Streams does."""
    metrics = getattr(context, "metrics", None)
    if metrics is not None:
        metrics.increment("dropped-records-total", reason=reason, task=str(context.task_id), node=node)


class FixedKeyProcessorAdapter(_Base):
    """`process_values`: the user's processor may change values only, so forwarded keys are reset to the
    input record's key (Kafka Streams enforces this with FixedKeyRecord)."""

    def __init__(self, inner: Processor[Any, Any]) -> None:
        self.inner = inner
        self._key: Any = None

    def init(self, context: ProcessorContext) -> None:
        adapter = self

        class _Ctx:
            def __getattr__(self, item: str) -> Any:
                return getattr(context, item)

            def forward(self, record: AnyRecord, child: str | None = None) -> None:
                context.forward(record.with_key(adapter._key), child)

        self.context = context
        self.inner.init(_Ctx())

    def process(self, record: AnyRecord) -> None:
        self._key = record.key
        self.inner.process(record)

    def close(self) -> None:
        self.inner.close()


class CallableProcessorAdapter(_Base):
    """Lets `process` take a plain function `(record, context) -> None` as well as a Processor."""

    def __init__(self, fn: Callable[[AnyRecord, ProcessorContext], None]) -> None:
        self.fn = fn

    def process(self, record: AnyRecord) -> None:
        self.fn(record, self.context)


def takes_key(fn: Callable[..., Any]) -> bool:
    """Value mappers may be `f(value)` or `f(key, value)` (Java's ValueMapperWithKey)."""
    try:
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
        ]
    except (TypeError, ValueError):
        return False
    return len(params) >= 2
