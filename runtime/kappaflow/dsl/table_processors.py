"""Processors behind KTables and aggregations, with Kafka Streams' emit and timestamp rules.

Tables pass `Change(new, old)` between processors. A materialized table or aggregate writes to its store
and forwards through a `TupleForwarder`: immediately without caching, or when the record cache flushes
with caching, which is what makes cached tables emit one update per key per commit. Aggregates take the
maximum timestamp of the aggregate and the record; null keys and null values are dropped and counted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from kappaflow.api.errors import StreamsError
from kappaflow.api.processor import ProcessorContext
from kappaflow.api.record import Record
from kappaflow.dsl.change import Change
from kappaflow.dsl.stream_processors import drop_record, native_stage
from kappaflow.state.api import RecordContext
from kappaflow.state.flushed_batch import FlushedBatch
from kappaflow.state.kv_layers import MeteredKeyValueStore
from kappaflow.state.timestamped import ValueAndTimestamp
from kappaflow.state.versioned import (
    PUT_RETURN_CODE_NOT_PUT,
    PUT_RETURN_CODE_VALID_TO_UNDEFINED,
    VersionedKeyValueStore,
)
from kappaflow.tasks.fusion import Fusable, Stage
from kappaflow.tasks.native import AggregatePlan, NativeCore

if TYPE_CHECKING:
    from kappaflow.tasks.nodes import ProcessorNode

log = logging.getLogger(__name__)
_NEW_VALUE = attrgetter("new_value")  # KTableToStreamProcessor's stage: a Change to its new value
AnyRecord = Record[Any, Any]


@dataclass(frozen=True, slots=True)
class TableFlushPlan:
    """What a native stage takes a table's batched flush with (`take_flush`, runtime/native/src/
    table_flush.rs): what `TupleForwarder._flush_batch_to_stage` does per entry, done for the whole batch
    without a Python frame per entry. Built per flush, as the child is looked up per flush."""

    context: ProcessorContext  # the task's: its current node is set as `forward()` sets it
    node: ProcessorNode  # the table's node, current while an entry is typed
    child: ProcessorNode  # current while its stage runs
    child_name: str  # named as the failed node when its stage raises, unless a deeper node was
    stamp: Callable[[Any], int] | None  # session windows: the timestamp from the key
    send_old: bool
    change: type[Change[Any]] = Change


class TupleForwarder:
    """Forwards table updates now (no cache) or on cache flush (cache), from the owning node.

    ``stamp`` fixes a flushed update's timestamp from its key: session windows stamp every update and
    retraction with the session's end, as Java's SessionCacheFlushListener does, not with the time of
    the record that caused the flush."""

    def __init__(
        self,
        store: Any,
        context: ProcessorContext,
        send_old_values: bool,
        stamp: Callable[[Any], int] | None = None,
    ) -> None:
        self.context = context
        self.node = getattr(context, "current_node", None)
        self.send_old_values = send_old_values
        self.stamp = stamp
        if isinstance(store, MeteredKeyValueStore):  # a whole batched flush in one frame
            self.cached = store.set_flush_listener(self._on_flush, send_old_values, self._on_flush_batch)
        else:
            self.cached = bool(store.set_flush_listener(self._on_flush, send_old_values))

    def maybe_forward(self, record: AnyRecord) -> None:
        if not self.cached:
            self.context.forward(record)

    def _on_flush(
        self,
        key: Any,
        new: ValueAndTimestamp[Any] | None,
        old: ValueAndTimestamp[Any] | None,
        record_context: RecordContext,
    ) -> None:
        context: Any = self.context
        previous = context.current_node
        context.current_node = self.node
        try:
            change = Change(
                None if new is None else new.value,
                None if (old is None or not self.send_old_values) else old.value,
            )
            if self.stamp is not None:
                timestamp = self.stamp(key)
            else:
                timestamp = new.timestamp if new is not None else record_context.timestamp
            context.forward(Record(key, change, timestamp, record_context.headers))
        finally:
            context.current_node = previous

    def _on_flush_batch(self, entries: FlushedBatch) -> None:
        """`_on_flush` for each entry of a batched flush (the store makes each entry's record context
        current as it yields it), the node made current once: the same records forwarded in the same
        order, one frame per flush instead of one per entry; none per entry when the one child is a
        native stage (`TableFlushPlan`)."""
        context: Any = self.context
        child = _sole_fused_child(self.node, context)
        if child is not None:
            take_flush = getattr(child.fused, "take_flush", None)  # a native stage's
            if take_flush is not None and self.node is not None:
                plan = TableFlushPlan(context, self.node, child, child.name, self.stamp, self.send_old_values)
                take_flush(entries, plan)
                return
            self._flush_batch_to_stage(iter(entries), child)
            return
        forward = context.forward
        previous = context.current_node
        context.current_node = self.node
        try:
            for key, change, timestamp, headers in self._changes(iter(entries)):
                forward(Record(key, change, timestamp, headers))
        finally:
            context.current_node = previous

    def _changes(
        self, entries: Iterator[tuple[Any, Any, Any, RecordContext]]
    ) -> Iterator[tuple[Any, Change[Any], int, Any]]:
        """Each flushed entry as the record `_on_flush` forwards: key, change, timestamp, headers."""
        stamp, send_old = self.stamp, self.send_old_values
        for key, new, old, record_context in entries:
            change = Change(
                None if new is None else new.value, None if (old is None or not send_old) else old.value
            )
            if stamp is not None:
                timestamp = stamp(key)
            else:
                timestamp = new.timestamp if new is not None else record_context.timestamp
            yield key, change, timestamp, record_context.headers

    def _flush_batch_to_stage(
        self, entries: Iterator[tuple[Any, Any, Any, RecordContext]], child: ProcessorNode
    ) -> None:
        """`_on_flush_batch` straight into the one child's compiled stage: what `forward()` does per
        entry (the child made current, its `handle` called with the record's parts) once per flush, with
        no `Record` built. Past the record cache every update is a flushed entry (`to_stream()` and a sink
        after a count: one fused stage), so this is per input record there. A failure names the child
        as `forward()` does, unless a node below it already named itself."""
        context: Any = self.context
        stage, node = child.fused, self.node
        previous = context.current_node
        context.current_node = node  # the table's node, while the store yields (and decodes) an entry
        try:
            for key, change, timestamp, headers in self._changes(entries):
                context.current_node = child
                try:
                    stage(key, change, timestamp, headers)
                except BaseException:
                    if context.failed_node is None:
                        context.failed_node = child.name
                    raise
                context.current_node = node
        finally:
            context.current_node = previous


def _sole_fused_child(node: ProcessorNode | None, context: Any) -> ProcessorNode | None:
    """The node's one child when `forward()` would call nothing but that child's compiled stage: a single
    child, compiled (`fused`), and no per-node processing handler (`node_failed`, which `forward()`
    runs around each child). Looked up per flush: a task's nodes are compiled after its processors'
    `init`, and undone before they are initialized again."""
    if node is None or len(node.children) != 1 or getattr(context, "node_failed", None) is not None:
        return None
    child = node.children[0]
    return child if child.fused is not None else None


class _Stateful:
    context: ProcessorContext
    store: Any = None
    forwarder: TupleForwarder

    def __init__(self, store_name: str | None, send_old_values: Callable[[], bool], label: str) -> None:
        self.store_name = store_name
        self.send_old = send_old_values
        self.label = label

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        if self.store_name is not None:
            self.store = context.get_state_store(self.store_name)
            self.forwarder = TupleForwarder(self.store, context, self.send_old())

    def close(self) -> None:
        return None

    def _emit(self, record: AnyRecord, new: Any, old: Any, timestamp: int, is_latest: bool = True) -> None:
        """Write to the store (if materialized) and forward the change. Unmaterialized, the change keeps
        its parent's `is_latest`; a plain store holds only the latest value, so what it stores is."""
        if isinstance(self.store, VersionedKeyValueStore):
            put_code = self.store.put(record.key, new, timestamp)
            if put_code == PUT_RETURN_CODE_NOT_PUT:
                return  # older than the history retention: not stored, so not forwarded (as Java)
            is_latest = put_code == PUT_RETURN_CODE_VALID_TO_UNDEFINED
        elif self.store_name is not None:
            self.store.put(record.key, ValueAndTimestamp.make(new, timestamp))
            is_latest = True
            if self.forwarder.cached:
                return  # the cache forwards this update when it flushes
        change = Change(new, old if self.send_old() else None, is_latest)
        out = Record(record.key, change, timestamp, record.headers)
        self.context.forward(out)


class KTableSourceProcessor(_Stateful):
    def process(self, record: AnyRecord) -> None:
        if record.key is None:
            log.debug("dropping table record with null key (%s)", self.label)
            drop_record(self.context, "null-key", self.label)
            return
        old = None
        if self.store_name is not None:
            previous = self.store.get(record.key)
            if previous is not None:
                old = previous.value
                if record.timestamp < previous.timestamp:
                    log.debug("out-of-order update of key %r in %s", record.key, self.label)
        self._emit(record, record.value, old, record.timestamp)


class KTableFilterProcessor(_Stateful):
    def __init__(
        self,
        predicate: Callable[[Any, Any], bool],
        negate: bool,
        store_name: str | None,
        send_old_values: Callable[[], bool],
        label: str,
        versioned_semantics: bool = False,
    ) -> None:
        super().__init__(store_name, send_old_values, label)
        self.predicate = predicate
        self.negate = negate
        # below a versioned table (KIP-914) a row filtered out before and after still forwards its
        # tombstone: the old value of an out-of-order update is not the row's previous state
        self.versioned_semantics = versioned_semantics

    def _compute(self, key: Any, value: Any) -> Any:
        if value is None:
            return None
        return value if bool(self.predicate(key, value)) != self.negate else None

    def process(self, record: AnyRecord) -> None:
        change: Change[Any] = record.value
        new = self._compute(record.key, change.new_value)
        old = self._old_value(record.key, change) if self.send_old() else None
        if self.send_old() and new is None and old is None and not self.versioned_semantics:
            return
        self._emit(record, new, old, record.timestamp, change.is_latest)

    def _old_value(self, key: Any, change: Change[Any]) -> Any:
        """A materialized filter's old value is what it stored (Java reads its own store); otherwise the
        parent's old value, filtered."""
        if self.store_name is not None:
            stored = self.store.get(key)
            return None if stored is None else stored.value
        return self._compute(key, change.old_value)


class KTableMapValuesProcessor(_Stateful):
    def __init__(
        self,
        mapper: Callable[..., Any],
        with_key: bool,
        store_name: str | None,
        send_old_values: Callable[[], bool],
        label: str,
    ) -> None:
        super().__init__(store_name, send_old_values, label)
        self.mapper = mapper
        self.with_key = with_key

    def _compute(self, key: Any, value: Any) -> Any:
        if value is None:
            return None
        return self.mapper(key, value) if self.with_key else self.mapper(value)

    def process(self, record: AnyRecord) -> None:
        change: Change[Any] = record.value
        new = self._compute(record.key, change.new_value)
        old = self._compute(record.key, change.old_value) if self.send_old() else None
        self._emit(record, new, old, record.timestamp, change.is_latest)


class KTableToStreamProcessor(Fusable):
    context: ProcessorContext

    def __init__(self, mapper: Callable[[Any, Any], Any] | None = None) -> None:
        self.mapper = mapper

    def init(self, context: ProcessorContext) -> None:
        self.context = context

    def process(self, record: AnyRecord) -> None:
        self.context.forward(Record(record.key, record.value.new_value, record.timestamp, record.headers))

    def fuse_native(self, downstream: Stage, node: str, core: NativeCore) -> Stage | None:
        """`to_stream()` compiled as a native map_values of the change to its new value (a C
        attrgetter, no Python frame): past the record cache every update is a flushed table record,
        and this hop was a `Record` and a `forward()` per record. A mapper keeps it generic."""
        if self.mapper is not None:
            return None
        return native_stage(core, "map_values", _NEW_VALUE, False, node, self.context, downstream)

    def close(self) -> None:
        return None


class KTableRepartitionMapProcessor:
    """`KTable.group_by`: re-keys each change. The old value is subtracted under its old key and the new
    one added under its new key; when both keys agree one record carries both."""

    context: ProcessorContext

    def __init__(self, selector: Callable[[Any, Any], tuple[Any, Any]], label: str) -> None:
        self.selector = selector
        self.label = label

    def init(self, context: ProcessorContext) -> None:
        self.context = context

    def _select(self, key: Any, value: Any) -> tuple[Any, Any] | None:
        if value is None:
            return None
        result = self.selector(key, value)
        if not isinstance(result, tuple) or len(result) != 2:
            raise StreamsError(f"KTable.group_by: the selector must return (key, value), got {result!r:.80}")
        return result

    def process(self, record: AnyRecord) -> None:
        change: Change[Any] = record.value
        if not change.is_latest:
            return  # an out-of-order version of a versioned table is not part of the aggregate (KIP-914)
        new = self._select(record.key, change.new_value)
        old = self._select(record.key, change.old_value)
        ts, headers = record.timestamp, record.headers
        if new is not None and old is not None and new[0] == old[0] and new[0] is not None:
            self.context.forward(Record(new[0], Change(new[1], old[1]), ts, headers))
            return
        if old is not None:
            if old[0] is None:
                drop_record(self.context, "null-key", self.label)
            else:
                self.context.forward(Record(old[0], Change(None, old[1]), ts, headers))
        if new is not None:
            if new[0] is None:
                drop_record(self.context, "null-key", self.label)
            else:
                self.context.forward(Record(new[0], Change(new[1], None), ts, headers))

    def close(self) -> None:
        return None


def count_add(key: Any, value: Any, aggregate: int) -> int:
    """`count()`'s adder."""
    return aggregate + 1


def count_subtract(key: Any, value: Any, aggregate: int) -> int:
    """A re-grouped table's `count()` subtracts a key's previous row."""
    return aggregate - 1


def count_initial() -> int:
    """`count()`'s initializer."""
    return 0


class KStreamAggregateProcessor(_Stateful, Fusable):
    """Aggregates a stream per key: `aggregator(key, value, aggregate)`, starting from `initializer()`.
    With `reducer` instead, the first value is the aggregate (KGroupedStream.reduce)."""

    def __init__(
        self,
        store_name: str,
        send_old_values: Callable[[], bool],
        label: str,
        initializer: Callable[[], Any] | None = None,
        aggregator: Callable[[Any, Any, Any], Any] | None = None,
        reducer: Callable[[Any, Any], Any] | None = None,
    ) -> None:
        super().__init__(store_name, send_old_values, label)
        self.initializer = initializer
        self.aggregator = aggregator
        self.reducer = reducer

    def process(self, record: AnyRecord) -> None:
        key, value = record.key, record.value
        if key is None or value is None:
            log.debug("skipping record with null key or value in %s", self.label)
            drop_record(self.context, "null-key-or-value", self.label)
            return
        store = self.store
        previous = store.get(key)
        timestamp = record.timestamp
        reducer: Any = self.reducer
        if previous is None:
            old = None
            new = value if reducer is not None else self.aggregator(key, value, self.initializer())  # type: ignore[misc]
        else:
            old = previous.value
            if previous.timestamp > timestamp:
                timestamp = previous.timestamp
            new = reducer(old, value) if reducer is not None else self.aggregator(key, value, old)  # type: ignore[misc]
        # _emit inlined: this runs for every record of every aggregation
        store.put(key, None if new is None else ValueAndTimestamp(new, timestamp))
        if self.forwarder.cached:
            return  # the cache forwards this update when it flushes
        out = Record(key, Change(new, old if self.send_old() else None), timestamp, record.headers)
        self.context.forward(out)

    def fuse_native(self, downstream: Stage, node: str, core: NativeCore) -> Stage | None:
        """`process` over a cached store, compiled by the native core (`kappaflow_native.AggregateStage`):
        the cache forwards on flush, so nothing goes downstream here. Without a cache the update is
        forwarded now: not compiled."""
        binding = getattr(self.store, "cached_binding", None)
        store = binding() if binding is not None and self.forwarder.cached else None
        if store is None or store.context is not self.context:
            return None
        context, label = self.context, self.label

        def skip_null() -> None:
            log.debug("skipping record with null key or value in %s", label)
            drop_record(context, "null-key-or-value", label)

        plan = AggregatePlan(
            node=node,
            context=context,
            skip_null=skip_null,
            counting=self._counting(),
            initializer=self.initializer,
            aggregator=self.aggregator,
            reducer=self.reducer,
            store=store,
        )
        return core.AggregateStage(plan)

    def _counting(self) -> bool:
        """`count()`: its own initializer and adder, computed inline (0 + 1, then aggregate + 1)."""
        return self.reducer is None and self.aggregator is count_add and self.initializer is count_initial


class KTableAggregateProcessor(_Stateful):
    """Aggregates a re-grouped table: subtract the old value, add the new one (KGroupedTable)."""

    def __init__(
        self,
        store_name: str,
        send_old_values: Callable[[], bool],
        label: str,
        adder: Callable[[Any, Any, Any], Any] | None = None,
        subtractor: Callable[[Any, Any, Any], Any] | None = None,
        initializer: Callable[[], Any] | None = None,
        reduce_adder: Callable[[Any, Any], Any] | None = None,
        reduce_subtractor: Callable[[Any, Any], Any] | None = None,
    ) -> None:
        super().__init__(store_name, send_old_values, label)
        self.adder = adder
        self.subtractor = subtractor
        self.initializer = initializer
        self.reduce_adder = reduce_adder
        self.reduce_subtractor = reduce_subtractor

    def process(self, record: AnyRecord) -> None:
        key = record.key
        if key is None:
            drop_record(self.context, "null-key", self.label)
            return
        change: Change[Any] = record.value
        previous = self.store.get(key)
        old_agg = None if previous is None else previous.value
        timestamp = record.timestamp
        reducing = self.reduce_adder is not None
        if change.old_value is not None and old_agg is not None:
            if reducing:
                intermediate = self.reduce_subtractor(old_agg, change.old_value)  # type: ignore[misc]
            else:
                intermediate = self.subtractor(key, change.old_value, old_agg)  # type: ignore[misc]
            timestamp = max(record.timestamp, previous.timestamp)
        else:
            intermediate = old_agg
        if change.new_value is not None:
            if reducing:
                new_agg = (
                    change.new_value
                    if intermediate is None
                    else self.reduce_adder(intermediate, change.new_value)  # type: ignore[misc]
                )
            else:
                base = self.initializer() if intermediate is None else intermediate  # type: ignore[misc]
                new_agg = self.adder(key, change.new_value, base)  # type: ignore[misc]
            if previous is not None:
                timestamp = max(record.timestamp, previous.timestamp)
        else:
            new_agg = intermediate
        self._emit(record, new_agg, old_agg, timestamp)
