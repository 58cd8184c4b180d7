"""Joins against tables: stream-table, stream-GlobalKTable and table-table, with Kafka Streams' rules.

- Stream-table: each stream record looks up the table's current value for its key (through the table's
  value getter, in the same task - hence co-partitioning) and emits at the *stream record's* timestamp.
  Table updates never emit. Stream records with a null key or value are dropped and counted.
- Stream-GlobalKTable: the same, with the table key computed by `key_mapper(key, value)`; no
  co-partitioning needed because every instance holds the whole table.
- Table-table: an update on either side looks up the other side and emits `Change(new, old)` at
  max(this update's time, the other value's time). Inner joins emit only when the other side has a
  value (and then a tombstone when this side's value goes away); left joins always emit for left-side
  updates; outer joins for updates of either side. Tombstones propagate as `None` results.

The helpers here wire the join's nodes and stores and return what the caller needs to build the result:
the stream-side ones the node (the `KStream` makes the stream), the table-table one a table made by the
left table. `KStream` and `KTable` call them, so they take the protocols of `dsl.join_sides`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from kappaflow.api.errors import TopologyError
from kappaflow.api.processor import ProcessorContext
from kappaflow.api.record import Record
from kappaflow.dsl.change import Change
from kappaflow.dsl.graph import InternalBuilder
from kappaflow.dsl.join_sides import GlobalTableSide, StreamSide, TableSide
from kappaflow.dsl.joins import adapt_joiner, copartition
from kappaflow.dsl.options import Joined, Materialized
from kappaflow.dsl.stream_processors import drop_record
from kappaflow.dsl.table_processors import _Stateful
from kappaflow.dsl.value_getters import ValueGetter, ValueGetterSupplier
from kappaflow.state.join_buffer import StreamJoinBuffer, StreamJoinBufferBuilder
from kappaflow.state.timestamped import ValueAndTimestamp

Table = TypeVar("Table", bound=TableSide)

log = logging.getLogger(__name__)
Joiner = Callable[[Any, Any, Any], Any]


class KStreamKTableJoinProcessor:
    context: ProcessorContext

    def __init__(
        self,
        getter: ValueGetterSupplier,
        joiner: Joiner,
        left: bool,
        label: str,
        key_mapper: Callable[[Any, Any], Any] | None = None,
        buffer_name: str | None = None,
    ) -> None:
        self.getter_supplier = getter
        self.joiner = joiner
        self.left = left
        self.label = label
        self.key_mapper = key_mapper
        self.buffer_name = buffer_name  # with a grace period (KIP-923): stream records wait here
        self.observed_stream_time = -1

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.lookup: ValueGetter = self.getter_supplier.get(context)
        self.lookup_as_of = self.getter_supplier.get_as_of(context)
        if self.buffer_name is not None:
            self.buffer: StreamJoinBuffer = context.get_state_store(self.buffer_name)

    def process(self, record: Record[Any, Any]) -> None:
        """Join now, or with a grace period buffer the record and join every record whose grace passed,
        oldest first (Java: records too late for the buffer, or with a null key or value, join now)."""
        if self.buffer_name is None or record.key is None or record.value is None:
            self._join(record)
            return
        self.observed_stream_time = max(self.observed_stream_time, record.timestamp)
        buffered = self.buffer.put(
            self.observed_stream_time, record.key, record.value, record.timestamp, record.headers
        )
        if not buffered:
            self._join(record)
            return
        self.buffer.evict(
            self.observed_stream_time, lambda r: self._join(Record(r.key, r.value, r.timestamp, r.headers))
        )

    def _join(self, record: Record[Any, Any]) -> None:
        key, value = record.key, record.value
        if self.left and self.key_mapper is None and key is None and value is not None:
            # KIP-962 (Kafka Streams 3.7): a left join emits a null-key record with no table value
            self.context.forward(Record(key, self.joiner(key, value, None), record.timestamp, record.headers))
            return
        if self.key_mapper is None and (key is None or value is None):
            log.debug("skipping stream-table join record with null key or value in %s", self.label)
            drop_record(self.context, "null-key-or-value", self.label)
            return
        if value is None:
            drop_record(self.context, "null-value", self.label)
            return
        table_key = key if self.key_mapper is None else self.key_mapper(key, value)
        if table_key is None:
            found = None
        elif self.lookup_as_of is not None:  # a versioned table: the value as of the record's time
            found = self.lookup_as_of(table_key, record.timestamp)
        else:
            found = self.lookup(table_key)
        other = None if found is None else found.value
        if other is None and not self.left:
            return
        self.context.forward(Record(key, self.joiner(key, value, other), record.timestamp, record.headers))

    def close(self) -> None:
        return None


def stream_table_join(
    stream: StreamSide,
    table: TableSide,
    joiner: Callable[..., Any],
    left: bool,
    joined: Joined | None = None,
) -> str:
    """Wire `stream.join/left_join(table, joiner)`; returns the join node (its records keep the key)."""
    builder: InternalBuilder = stream._builder
    node = stream.node
    opts = joined or Joined()
    if stream.repartition_required:  # Java's repartitionForJoin: the topic is named after the join if named
        node = builder.add_repartition(node, opts.name or node, stream.key_serde or table.key_serde,
                                       stream.value_serde)  # fmt: skip
    copartition(builder, node, table.node)
    name = builder.name_or_new(opts.name, "KSTREAM-LEFTJOIN-" if left else "KSTREAM-JOIN-")
    getter = table.value_getter_supplier
    adapted = adapt_joiner(joiner)
    buffer = None if opts.grace_period_ms is None else f"{name}-Buffer"
    builder.topology.add_processor(
        name, lambda: KStreamKTableJoinProcessor(getter, adapted, left, name, buffer_name=buffer), node
    )
    builder.topology.connect_processor_and_state_stores(name, *getter.store_names)
    if buffer is not None and opts.grace_period_ms is not None:
        if not table.versioned:
            raise TopologyError("KTable must be versioned to use a grace period in a stream table join.")
        key_serde = opts.key_serde or stream.key_serde or table.key_serde
        value_serde = opts.value_serde or stream.value_serde
        store = StreamJoinBufferBuilder(buffer, key_serde, value_serde, opts.grace_period_ms)
        builder.topology.add_state_store(store, name)
    return name


def stream_global_table_join(
    stream: StreamSide,
    table: GlobalTableSide,
    key_mapper: Callable[[Any, Any], Any],
    joiner: Callable[..., Any],
    left: bool,
) -> str:
    """Wire `stream.join/left_join(global_table, key_mapper, joiner)`; returns the join node."""
    builder: InternalBuilder = stream._builder
    name = builder.new_name("KSTREAM-LEFTJOIN-")  # Java's globalTableJoin: LEFTJOIN for an inner join too
    store_name = table.store_name

    def bind(context: ProcessorContext) -> ValueGetter:
        store = context.get_state_store(store_name)
        return store.get  # type: ignore[no-any-return]

    getter = ValueGetterSupplier([store_name], bind)
    adapted = adapt_joiner(joiner)
    builder.topology.add_processor(
        name, lambda: KStreamKTableJoinProcessor(getter, adapted, left, name, key_mapper), stream.node
    )
    builder.topology.connect_processor_and_state_stores(name, store_name)
    return name


# ----------------------------------------------------------------- table-table
class KTableKTableJoinProcessor(_Stateful):
    """One side of a table-table join (not materialized: the merge node stores when asked)."""

    def __init__(
        self, getter: ValueGetterSupplier, joiner: Joiner, is_left: bool, kind: str, label: str
    ) -> None:
        super().__init__(None, lambda: True, label)
        self.getter_supplier = getter
        self.joiner = joiner
        self.is_left = is_left
        self.kind = kind

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.lookup: ValueGetter = self.getter_supplier.get(context)

    def _join(self, key: Any, mine: Any, theirs: Any) -> Any:
        return self.joiner(key, mine, theirs) if self.is_left else self.joiner(key, theirs, mine)

    def process(self, record: Record[Any, Any]) -> None:
        key = record.key
        if key is None:
            drop_record(self.context, "null-key", self.label)
            return
        change: Change[Any] = record.value
        if not change.is_latest:
            drop_record(self.context, "out-of-order-version", self.label)  # KIP-914: not the current row
            return
        found = self.lookup(key)
        other = None if found is None else found.value
        # does an update of this side produce a result without the other side's value?
        this_outer = self.kind == "outer" or (self.kind == "left" and self.is_left)
        if other is None and (not this_outer or (change.new_value is None and change.old_value is None)):
            return
        timestamp = record.timestamp if found is None else max(record.timestamp, found.timestamp)

        def result(value: Any) -> Any:
            if value is None and (other is None or not self._other_outer()):
                return None
            return self._join(key, value, other)

        new = result(change.new_value)
        old = result(change.old_value)
        self.context.forward(Record(key, Change(new, old), timestamp, record.headers))

    def _other_outer(self) -> bool:
        """True when a missing value on *this* side still joins (the other side is outer)."""
        return self.kind == "outer" or (self.kind == "left" and not self.is_left)

    def close(self) -> None:
        return None


class KTableKTableMergeProcessor(_Stateful):
    """Unites both sides' results; materializes them when the join is materialized."""

    def process(self, record: Record[Any, Any]) -> None:
        change: Change[Any] = record.value
        if self.store_name is None:
            self.context.forward(record)
            return
        previous = self.store.get(record.key)
        old = None if previous is None else previous.value
        self._emit(record, change.new_value, old, record.timestamp)


def table_table_join(
    left: Table, right: Table, joiner: Callable[..., Any], kind: str, materialized: Any
) -> Table:
    builder: InternalBuilder = left._builder
    if right._builder is not builder:
        raise TopologyError("cannot join tables from different StreamsBuilders")
    copartition(builder, left.node, right.node)
    adapted = adapt_joiner(joiner)
    # Java's KTableImpl.join/doJoin: the store's number first, then merge, this and other (JOINTHIS and
    # JOINOTHER for every kind of join)
    mat = Materialized.of(materialized) if materialized is not None else None
    store_name = None if mat is None else (mat.name or builder.new_name("KTABLE-MERGE-STATE-STORE-"))
    merge = builder.new_name("KTABLE-MERGE-")
    this_name = builder.new_name("KTABLE-JOINTHIS-")
    other_name = builder.new_name("KTABLE-JOINOTHER-")
    lg, rg = left.value_getter_supplier, right.value_getter_supplier
    # both sides need the other side's old values to retract previous results
    left.enable_send_old_values()
    right.enable_send_old_values()

    def bind(context: ProcessorContext) -> ValueGetter:
        left_get, right_get = lg.get(context), rg.get(context)

        def get(key: Any) -> ValueAndTimestamp[Any] | None:
            lv, rv = left_get(key), right_get(key)
            if (lv is None and kind != "outer") or (rv is None and kind == "inner") or (lv is rv is None):
                return None
            ts = max(v.timestamp for v in (lv, rv) if v is not None)
            return ValueAndTimestamp.make(adapted(key, lv and lv.value, rv and rv.value), ts)

        return get

    getter = None if store_name else ValueGetterSupplier(lg.store_names + rg.store_names, bind)
    value_serde = mat.value_serde if mat is not None else None
    table = left._derive_table(
        merge, left.key_serde, value_serde, store_name, getter=getter, join_parents=(left, right)
    )
    topology = builder.topology
    topology.add_processor(
        this_name, lambda: KTableKTableJoinProcessor(rg, adapted, True, kind, this_name), left.node
    )
    topology.add_processor(
        other_name, lambda: KTableKTableJoinProcessor(lg, adapted, False, kind, other_name), right.node
    )
    topology.connect_processor_and_state_stores(this_name, *rg.store_names)
    topology.connect_processor_and_state_stores(other_name, *lg.store_names)
    send_old = table.send_old_values_enabled
    topology.add_processor(
        merge, lambda: KTableKTableMergeProcessor(store_name, send_old, merge), this_name, other_name
    )
    if mat is not None and store_name is not None:
        topology.add_state_store(
            builder.kv_store_builder(mat, store_name, mat.key_serde or left.key_serde, value_serde), merge
        )
    return table
