"""Stream-stream joins with Kafka Streams 3.1+ semantics, and the helpers every join shares.

Topology, as Kafka Streams builds it: each side goes through a `KSTREAM-WINDOWED` node that forwards the
record and then puts it into that side's window store (retaining duplicates, retention before + after +
grace); `KSTREAM-JOINTHIS` / `KSTREAM-JOINOTHER` look up the other side's store for windows
[t - before, t + after] (both inclusive) and emit `joiner(left, right)` at max(left time, right time);
a merge node unites both outputs.

Left/outer joins keep unmatched records in a shared *outer-join store* keyed `[8-byte time][side][key]`
(Java's TimestampedKeyAndJoinSide layout) and emit `joiner(value, None)` only when the record's window
has closed (stream time > t + after + grace for a left record, t + before + grace for a right one), so
no spurious left result is emitted before a later match, as Kafka Streams does since 3.1. A record whose
window closed before it arrived (out of order beyond the window) is emitted at once, and so is a
null-key record of an outer side (KIP-962, Kafka Streams 3.7). Stream time is shared by both join
processors of a task and advanced by every record, null keys included. As in Kafka Streams, the
outer-store scan runs at most once per wall-clock interval (`__emit.interval.ms.kstreams.outer.join.
spurious.results.fix__`, 1 s; the TopologyTestDriver sets 0): a scan costs a full store iteration, so
unmatched results wait for the first record after the interval.

`KStream` calls `stream_stream_join`, which takes the streams as `StreamSide`s and returns the merge node
for the stream to wrap.
"""

from __future__ import annotations

import inspect
import logging
import struct
import weakref
from collections.abc import Callable
from typing import Any

from kappaflow.api.config import EMIT_INTERVAL_OUTER_JOIN
from kappaflow.api.errors import SerializationError, TopologyError
from kappaflow.api.processor import ProcessorContext
from kappaflow.api.record import Record
from kappaflow.api.serdes import Serde
from kappaflow.dsl.graph import InternalBuilder, window_store_builder
from kappaflow.dsl.join_sides import StreamSide
from kappaflow.dsl.options import Materialized
from kappaflow.dsl.self_join import SelfJoinCandidate
from kappaflow.dsl.stream_processors import drop_record
from kappaflow.dsl.windows import JoinWindows
from kappaflow.state.api import KeyValueBytesStore, StateStore, StoreContext
from kappaflow.state.builders import KeyValueStoreBuilder, Stores
from kappaflow.state.kv_layers import ChangeLoggingKeyValueBytesStore, MeteredKeyValueStore
from kappaflow.topology.nodes import SourceSpec

log = logging.getLogger(__name__)
_TS = struct.Struct(">q")
_INT = struct.Struct(">i")


def joiner_arity(joiner: Callable[..., Any]) -> int:
    """ValueJoiner `(v1, v2)` or ValueJoinerWithKey `(key, v1, v2)`."""
    try:
        params = [
            p
            for p in inspect.signature(joiner).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
        ]
    except (TypeError, ValueError):
        return 2
    return 3 if len(params) >= 3 else 2


def adapt_joiner(joiner: Callable[..., Any]) -> Callable[[Any, Any, Any], Any]:
    if joiner_arity(joiner) == 3:
        return joiner
    return lambda key, left, right: joiner(left, right)


def source_topics(builder: InternalBuilder, node: str) -> set[str]:
    """The topics a node's records come from (walking parents up to the sources)."""
    topology = builder.topology
    topics: set[str] = set()
    seen: set[str] = set()
    pending = [node]
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        spec = topology.nodes[name]
        if isinstance(spec, SourceSpec):
            topics.update(spec.topics)
        else:
            pending.extend(spec.parents)
    return topics


def copartition(builder: InternalBuilder, *nodes: str) -> None:
    """Register the join's inputs as a co-partition group; the runtime checks partition counts at start
    and fails with a clear message when they differ."""
    topics: set[str] = set()
    for node in nodes:
        topics |= source_topics(builder, node)
    if len(topics) > 1:
        builder.topology.add_copartition_group(topics)


# ----------------------------------------------------------------- the outer-join store
class TimestampedKeyAndJoinSideSerde(Serde[tuple[int, bool, Any]]):
    """Java's `[8-byte timestamp][1-byte is-left][key]`: the store iterates oldest first."""

    name = "TimestampedKeyAndJoinSide"

    def __init__(self, key_serde: Serde[Any]) -> None:
        self.key_serde = key_serde

    def serialize(self, topic: str, data: tuple[int, bool, Any] | None) -> bytes | None:
        if data is None:
            return None
        ts, is_left, key = data
        raw = self.key_serde.serialize(topic, key)
        assert raw is not None
        return _TS.pack(ts) + (b"\x01" if is_left else b"\x00") + raw

    def deserialize(self, topic: str, data: bytes | None) -> tuple[int, bool, Any] | None:
        if data is None:
            return None
        return _TS.unpack_from(data)[0], data[8] == 1, self.key_serde.deserialize(topic, data[9:])


class LeftOrRightValueSerde(Serde[tuple[bool, Any]]):
    """Java's LeftOrRightValue: `[1-byte is-left][value]`."""

    name = "LeftOrRightValue"

    def __init__(self, left: Serde[Any], right: Serde[Any]) -> None:
        self.left = left
        self.right = right

    def serialize(self, topic: str, data: tuple[bool, Any] | None) -> bytes | None:
        if data is None:
            return None
        is_left, value = data
        raw = (self.left if is_left else self.right).serialize(topic, value)
        if raw is None:
            raise SerializationError("outer-join store: values must not be None")
        return (b"\x01" if is_left else b"\x00") + raw

    def deserialize(self, topic: str, data: bytes | None) -> tuple[bool, Any] | None:
        if data is None:
            return None
        is_left = data[0] == 1
        return is_left, (self.left if is_left else self.right).deserialize(topic, data[1:])


class LeftOrRightValueListSerde(Serde[list[tuple[bool, Any]]]):
    """Java's ListValueStore value: every unmatched record of one `[time][side][key]`, oldest first, as
    `Serdes.ListSerde(ArrayList, ByteArray)` writes it - `[1-byte strategy = VARIABLE_SIZE][4-byte
    count]` then `[4-byte length][LeftOrRightValue]` per record - so several records with the same key,
    side and timestamp are all kept (and emitted), and the changelog holds the whole list."""

    name = "ListValue<LeftOrRightValue>"
    _VARIABLE_SIZE = b"\x01"

    def __init__(self, element: LeftOrRightValueSerde) -> None:
        self.element = element

    def serialize(self, topic: str, data: list[tuple[bool, Any]] | None) -> bytes | None:
        if data is None:
            return None
        parts = [self._VARIABLE_SIZE, _INT.pack(len(data))]
        for item in data:
            raw = self.element.serialize(topic, item)
            assert raw is not None  # the element serde refuses None values itself
            parts += (_INT.pack(len(raw)), raw)
        return b"".join(parts)

    def deserialize(self, topic: str, data: bytes | None) -> list[tuple[bool, Any]] | None:
        if data is None:
            return None
        if data[:1] != self._VARIABLE_SIZE:
            raise SerializationError(f"outer-join store: unknown list serialization strategy {data[:1]!r}")
        (count,) = _INT.unpack_from(data, 1)
        items: list[tuple[bool, Any]] = []
        pos = 5
        for _ in range(count):
            (length,) = _INT.unpack_from(data, pos)
            item = self.element.deserialize(topic, data[pos + 4 : pos + 4 + length])
            assert item is not None
            items.append(item)
            pos += 4 + length
        return items


class _OuterJoinStore(MeteredKeyValueStore[Any, Any]):
    """Resolves its composite serdes at init, so unset serdes fall back to the configured defaults."""

    def __init__(
        self,
        inner: KeyValueBytesStore,
        key: Serde[Any] | None,
        left: Serde[Any] | None,
        right: Serde[Any] | None,
    ) -> None:
        super().__init__(inner, None, None)
        self._parts = (key, left, right)

    def init(self, context: StoreContext, root: StateStore | None = None) -> None:
        key, left, right = self._parts
        config = context.app_config
        key = key or config.serde("default.key.serde")
        left = left or config.serde("default.value.serde")
        right = right or config.serde("default.value.serde")
        if key is None or left is None or right is None:
            raise TopologyError(f"store '{self.name}' needs key and value serdes (or defaults)")
        self.key_serde = TimestampedKeyAndJoinSideSerde(key)
        self.value_serde = LeftOrRightValueListSerde(LeftOrRightValueSerde(left, right))
        super().init(context, root)


class OuterJoinStoreBuilder(KeyValueStoreBuilder[Any, Any]):
    def build(self) -> MeteredKeyValueStore[Any, Any]:
        inner: KeyValueBytesStore = self.supplier.get(False)
        if self.logging_enabled:
            inner = ChangeLoggingKeyValueBytesStore(inner)
        key, left, right = self.serdes
        return _OuterJoinStore(inner, key, left, right)

    serdes: tuple[Serde[Any] | None, Serde[Any] | None, Serde[Any] | None] = (None, None, None)


# ----------------------------------------------------------------- processors
class _TimeTracker:
    """Stream time shared by both join processors of a task, and a lower bound of the outer-join store's
    times (None: unknown, as after a restart - then the store is scanned)."""

    def __init__(self) -> None:
        self.stream_time = -1
        self.min_time: int | None = None
        self.next_time_to_emit = 0  # wall clock (ms) before which no outer-store scan runs

    def advance(self, timestamp: int) -> None:
        self.stream_time = max(self.stream_time, timestamp)

    def update_min_time(self, timestamp: int) -> None:
        self.min_time = timestamp if self.min_time is None else min(self.min_time, timestamp)


class KStreamJoinWindowProcessor:
    """Forward, then remember the record in this side's window store (so it never joins itself)."""

    context: ProcessorContext

    def __init__(self, store_name: str) -> None:
        self.store_name = store_name

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.store = context.get_state_store(self.store_name)

    def process(self, record: Record[Any, Any]) -> None:
        self.context.forward(record)  # null keys too: the join decides (drop, or KIP-962 outer emit)
        if record.key is not None and record.value is not None:
            self.store.put(record.key, record.value, record.timestamp)

    def close(self) -> None:
        return None


class KStreamKStreamJoinProcessor:
    context: ProcessorContext

    def __init__(
        self,
        is_left: bool,
        windows: JoinWindows,
        joiner: Callable[[Any, Any, Any], Any],
        outer: bool,
        other_store: str,
        outer_store: str | None,
        trackers: weakref.WeakKeyDictionary[Any, _TimeTracker],
        label: str,
    ) -> None:
        self.is_left = is_left
        self.windows = windows
        self.before = windows.before_ms if is_left else windows.after_ms
        self.after = windows.after_ms if is_left else windows.before_ms
        self.joiner = joiner
        self.outer = outer
        self.other_store_name = other_store
        self.outer_store_name = outer_store
        self.trackers = trackers
        self.label = label

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.other = context.get_state_store(self.other_store_name)
        self.outer_store = (
            None if self.outer_store_name is None else context.get_state_store(self.outer_store_name)
        )
        self.tracker = self.trackers.setdefault(context, _TimeTracker())
        self.emit_interval_ms = context.app_config.get_int(EMIT_INTERVAL_OUTER_JOIN)

    def _join(self, key: Any, mine: Any, theirs: Any) -> Any:
        return self.joiner(key, mine, theirs) if self.is_left else self.joiner(key, theirs, mine)

    def process(self, record: Record[Any, Any]) -> None:
        key, value, ts = record.key, record.value, record.timestamp
        self.tracker.advance(ts)
        if self.outer and key is None and value is not None:
            # KIP-962 (Kafka Streams 3.7): a null-key record cannot match, so an outer side emits it now
            self.context.forward(Record(key, self._join(key, value, None), ts, record.headers))
            return
        if key is None or value is None:
            log.debug("skipping join record with null key or value in %s", self.label)
            drop_record(self.context, "null-key-or-value", self.label)
            return
        time_from = max(0, ts - self.before)
        time_to = max(0, ts + self.after)
        if self.outer_store is not None and ts == self.tracker.stream_time:
            self._emit_non_joined(record)
        need_outer = self.outer
        for other_ts, other_value in list(self.other.fetch(key, time_from, time_to)):
            need_outer = False
            if self.outer_store is not None:
                self.outer_store.delete((other_ts, not self.is_left, key))
            joined = self._join(key, value, other_value)
            self.context.forward(Record(key, joined, max(ts, other_ts), record.headers))
        if need_outer:
            if self.outer_store is None or time_to < self.tracker.stream_time:
                self.context.forward(Record(key, self._join(key, value, None), ts, record.headers))
            else:
                self.tracker.update_min_time(ts)
                # Java's ListValueStore: appended, so every unmatched record of this key, side and
                # time is kept (a match deletes them all, as `delete` above)
                stored_key = (ts, self.is_left, key)
                unmatched = self.outer_store.get(stored_key) or []
                unmatched.append((self.is_left, value))
                self.outer_store.put(stored_key, unmatched)

    def _emit_non_joined(self, record: Record[Any, Any]) -> None:
        assert self.outer_store is not None
        tracker = self.tracker
        stream_time = tracker.stream_time
        grace = self.windows.grace_ms
        # Java's shortcut (it also decides *when* asymmetric windows emit): nothing can have closed yet
        if tracker.min_time is not None and tracker.min_time + self.after + grace >= stream_time:
            return
        now = self.context.current_system_time_ms()
        if now < tracker.next_time_to_emit:
            return  # throttled by wall clock, as Java's KStreamKStreamJoin
        tracker.next_time_to_emit = now + self.emit_interval_ms
        tracker.min_time = None
        open_sides: set[bool] = set()
        emitted: list[tuple[int, bool, Any]] = []
        for stored_key, unmatched in self.outer_store.all():
            ts, is_left, key = stored_key
            tracker.min_time = ts
            if len(open_sides) == 2:
                break
            lookback = self.windows.after_ms if is_left else self.windows.before_ms
            if ts + lookback + grace >= stream_time:
                open_sides.add(is_left)
                continue
            for side_left, value in unmatched:  # in arrival order, as Java's list iterator
                joined = self.joiner(key, value, None) if side_left else self.joiner(key, None, value)
                self.context.forward(Record(key, joined, ts, record.headers))
            emitted.append(stored_key)
        for stored_key in emitted:
            self.outer_store.delete(stored_key)

    def close(self) -> None:
        return None


class _PassThrough:
    context: ProcessorContext

    def init(self, context: ProcessorContext) -> None:
        self.context = context

    def process(self, record: Record[Any, Any]) -> None:
        self.context.forward(record)

    def close(self) -> None:
        return None


def stream_stream_join(
    left: StreamSide,
    right: StreamSide,
    joiner: Callable[..., Any],
    windows: JoinWindows,
    kind: str,
    *,
    name: str | None,
    key_serde: Serde[Any] | None,
    value_serde: Serde[Any] | None,
    other_value_serde: Serde[Any] | None,
    store_type: str,
) -> tuple[str, Serde[Any] | None]:
    """Compile `left.join/left_join/outer_join(right, joiner, windows)`; `kind` is inner|left|outer.
    Returns the merge node and the result's key serde."""
    builder: InternalBuilder = left._builder
    if right._builder is not builder:
        raise TopologyError("cannot join streams from different StreamsBuilders")
    if not isinstance(windows, JoinWindows):
        raise TypeError(f"a stream-stream join needs JoinWindows, got {windows!r}")
    key_serde = key_serde or left.key_serde or right.key_serde
    left_serde = value_serde or left.value_serde
    right_serde = other_value_serde or right.value_serde
    left_node, right_node = left.node, right.node
    if left.repartition_required:
        base = f"{name}-left" if name else left_node
        left_node = builder.add_repartition(left_node, base, key_serde, left_serde)
    if right.repartition_required:
        base = f"{name}-right" if name else right_node
        right_node = builder.add_repartition(right_node, base, key_serde, right_serde)
    copartition(builder, left_node, right_node)

    topology = builder.topology
    # Java's KStreamImplJoin naming: a user's name names the processors (`<name>-this-windowed`, ...) and the
    # stores (`<name>-this-join-store`, ...); generated names use up numbers in the same order either way
    right_outer, left_outer = kind == "outer", kind != "inner"
    this_suffix = "-outer-this-join" if right_outer else "-this-join"
    other_suffix = "-outer-other-join" if left_outer else "-other-join"
    this_windowed = builder.name_or_new(name and f"{name}-this-windowed", "KSTREAM-WINDOWED-")
    other_windowed = builder.name_or_new(name and f"{name}-other-windowed", "KSTREAM-WINDOWED-")
    this_prefix = "KSTREAM-OUTERTHIS-" if right_outer else "KSTREAM-JOINTHIS-"
    this_generated = builder.new_name(this_prefix)
    other_generated = builder.new_name("KSTREAM-OUTEROTHER-" if left_outer else "KSTREAM-JOINOTHER-")
    this_join = f"{name}{this_suffix}" if name else this_generated
    other_join = f"{name}{other_suffix}" if name else other_generated
    merge = builder.name_or_new(name and f"{name}-merge", "KSTREAM-MERGE-")
    this_store = f"{name}{this_suffix}-store" if name else f"{this_generated}-store"
    other_store = f"{name}{other_suffix}-store" if name else f"{other_generated}-store"
    outer_store = None
    if left_outer:
        shared_suffix = "-outer-shared-join" if right_outer else "-left-shared-join"
        number = this_generated[len(this_prefix) :]
        outer_store = f"{name}{shared_suffix}-store" if name else f"KSTREAM-OUTERSHARED-{number}-store"
    retention = windows.before_ms + windows.after_ms + windows.grace_ms
    size = windows.before_ms + windows.after_ms
    mat = Materialized(caching=False, store_type="memory" if store_type == "memory" else "rocksdb")
    adapted = adapt_joiner(joiner)
    trackers: weakref.WeakKeyDictionary[Any, _TimeTracker] = weakref.WeakKeyDictionary()

    topology.add_processor(this_windowed, lambda: KStreamJoinWindowProcessor(this_store), left_node)
    topology.add_processor(other_windowed, lambda: KStreamJoinWindowProcessor(other_store), right_node)
    for store, serde in ((this_store, left_serde), (other_store, right_serde)):
        wsb = window_store_builder(mat, store, key_serde, serde, size, retention, retain_duplicates=True)
        wsb.timestamped = False
        topology.add_state_store(wsb)
    topology.connect_processor_and_state_stores(this_windowed, this_store)
    topology.connect_processor_and_state_stores(other_windowed, other_store)
    topology.add_processor(
        this_join,
        lambda: KStreamKStreamJoinProcessor(
            True, windows, adapted, kind != "inner", other_store, outer_store, trackers, this_join
        ),
        this_windowed,
    )
    topology.add_processor(
        other_join,
        lambda: KStreamKStreamJoinProcessor(
            False, windows, adapted, kind == "outer", this_store, outer_store, trackers, other_join
        ),
        other_windowed,
    )
    topology.connect_processor_and_state_stores(this_join, other_store)
    topology.connect_processor_and_state_stores(other_join, this_store)
    if outer_store is not None:
        supplier = (
            Stores.in_memory_key_value_store(outer_store)
            if store_type == "memory"
            else Stores.persistent_key_value_store(outer_store)
        )
        osb = OuterJoinStoreBuilder(supplier, None, None)
        osb.serdes = (key_serde, left_serde, right_serde)
        topology.add_state_store(osb, this_join, other_join)
    topology.add_processor(merge, _PassThrough, this_join, other_join)
    if left_node == right_node:  # a stream joined with itself: single.store.self.join may rewrite it
        builder.self_joins.append(
            SelfJoinCandidate(
                this_windowed, other_windowed, this_join, other_join, merge, this_store, other_store,
                outer_store, windows, adapted,
            )
        )  # fmt: skip
    return merge, key_serde
