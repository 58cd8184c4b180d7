"""`KStream`: a record stream, and the operations Kafka Streams offers on it.

A stream remembers whether a key-changing operation happened since its last repartition
(`repartition_required`); the next stateful operation inserts a repartition topic only then. Serdes
propagate as in Kafka Streams: operations that keep the key keep its serde, and value mappers drop the
value serde (it must then come from the next operation's options or the config defaults).

This module sits above `KTable`, the grouped and windowed streams and the join helpers, and imports them;
none of them imports it at run time (a table's `to_stream()` makes its stream through the builder).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta
from typing import Any, Generic, overload

from kappaflow.api.async_calls import AsyncCallOptions, Ordering
from kappaflow.api.errors import TopologyError
from kappaflow.api.processor import Processor
from kappaflow.api.record import Record
from kappaflow.api.serdes import Serde
from kappaflow.dsl.async_processors import AsyncValuesProcessor
from kappaflow.dsl.branched import BranchedKStream
from kappaflow.dsl.graph import InternalBuilder
from kappaflow.dsl.grouped import KGroupedStream
from kappaflow.dsl.joins import stream_stream_join
from kappaflow.dsl.ktable import GlobalKTable, KTable, versioned_source_table
from kappaflow.dsl.options import Grouped, Joined, Materialized, Produced, Repartitioned
from kappaflow.dsl.stream_processors import (
    CallableProcessorAdapter,
    FilterProcessor,
    FixedKeyProcessorAdapter,
    FlatMapProcessor,
    FlatMapValuesProcessor,
    MapProcessor,
    MapValuesProcessor,
    PassThroughProcessor,
    PeekProcessor,
    SelectKeyProcessor,
    takes_key,
)
from kappaflow.dsl.table_joins import stream_global_table_join, stream_table_join
from kappaflow.dsl.table_processors import KTableSourceProcessor
from kappaflow.dsl.typevars import KR, VR, K, V
from kappaflow.dsl.value_getters import on_demand_store_getter
from kappaflow.topology.nodes import StreamPartitioner, TopicNameExtractor


class KStream(Generic[K, V]):
    """A record stream of keys `K` and values `V`."""

    def __init__(
        self,
        builder: InternalBuilder,
        node: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        repartition_required: bool,
    ) -> None:
        self._builder = builder
        self.node = node
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.repartition_required = repartition_required

    def _derive(
        self,
        prefix: str,
        supplier: Callable[[], Any],
        *,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        key_changed: bool,
        name: str | None = None,
    ) -> KStream[Any, Any]:
        node = self._builder.add_processor(prefix, supplier, self.node, name=name)
        return KStream(self._builder, node, key_serde, value_serde, self.repartition_required or key_changed)

    # ----------------------------------------------------------------- stateless
    def filter(self, predicate: Callable[[K, V], bool], *, name: str | None = None) -> KStream[K, V]:
        """Keep the records for which `predicate(key, value)` is true."""
        return self._derive(
            "KSTREAM-FILTER-",
            lambda: FilterProcessor(predicate, False),
            key_serde=self.key_serde,
            value_serde=self.value_serde,
            key_changed=False,
            name=name,
        )

    def filter_not(self, predicate: Callable[[K, V], bool], *, name: str | None = None) -> KStream[K, V]:
        """Drop the records for which `predicate(key, value)` is true."""
        return self._derive(
            "KSTREAM-FILTER-",
            lambda: FilterProcessor(predicate, True),
            key_serde=self.key_serde,
            value_serde=self.value_serde,
            key_changed=False,
            name=name,
        )

    def map(self, mapper: Callable[[K, V], tuple[KR, VR]], *, name: str | None = None) -> KStream[KR, VR]:
        """Replace each record by `mapper(key, value)`, a new `(key, value)` pair; a new key marks the stream
        for repartitioning before a grouping or join."""
        return self._derive(
            "KSTREAM-MAP-",
            lambda: MapProcessor(mapper),
            key_serde=None,
            value_serde=None,
            key_changed=True,
            name=name,
        )

    @overload
    def map_values(self, mapper: Callable[[V], VR], *, name: str | None = None) -> KStream[K, VR]: ...

    @overload
    def map_values(self, mapper: Callable[[K, V], VR], *, name: str | None = None) -> KStream[K, VR]: ...

    def map_values(self, mapper: Callable[..., VR], *, name: str | None = None) -> KStream[K, VR]:
        """`mapper(value)` or `mapper(key, value)` (Java's ValueMapperWithKey)."""
        with_key = takes_key(mapper)
        return self._derive(
            "KSTREAM-MAPVALUES-",
            lambda: MapValuesProcessor(mapper, with_key),
            key_serde=self.key_serde,
            value_serde=None,
            key_changed=False,
            name=name,
        )

    def flat_map(
        self, mapper: Callable[[K, V], Iterable[tuple[KR, VR]]], *, name: str | None = None
    ) -> KStream[KR, VR]:
        """Replace each record by the `(key, value)` pairs `mapper(key, value)` returns (zero or more); a new
        key marks the stream for repartitioning."""
        return self._derive(
            "KSTREAM-FLATMAP-",
            lambda: FlatMapProcessor(mapper),
            key_serde=None,
            value_serde=None,
            key_changed=True,
            name=name,
        )

    @overload
    def flat_map_values(
        self, mapper: Callable[[V], Iterable[VR]], *, name: str | None = None
    ) -> KStream[K, VR]: ...

    @overload
    def flat_map_values(
        self, mapper: Callable[[K, V], Iterable[VR]], *, name: str | None = None
    ) -> KStream[K, VR]: ...

    def flat_map_values(
        self, mapper: Callable[..., Iterable[VR]], *, name: str | None = None
    ) -> KStream[K, VR]:
        """Replace each record by one record per value `mapper(value)` (or `mapper(key, value)`) returns,
        keeping the key."""
        with_key = takes_key(mapper)
        return self._derive(
            "KSTREAM-FLATMAPVALUES-",
            lambda: FlatMapValuesProcessor(mapper, with_key),
            key_serde=self.key_serde,
            value_serde=None,
            key_changed=False,
            name=name,
        )

    def select_key(self, selector: Callable[[K, V], KR], *, name: str | None = None) -> KStream[KR, V]:
        """Give each record the key `mapper(key, value)`; the stream is repartitioned before a grouping or
        join."""
        return self._derive(
            "KSTREAM-KEY-SELECT-",
            lambda: SelectKeyProcessor(selector),
            key_serde=None,
            value_serde=self.value_serde,
            key_changed=True,
            name=name,
        )

    def peek(self, action: Callable[[K, V], None], *, name: str | None = None) -> KStream[K, V]:
        """Call `action(key, value)` for each record and pass the record on unchanged (for logging or
        metrics)."""
        return self._derive(
            "KSTREAM-PEEK-",
            lambda: PeekProcessor(action, True),
            key_serde=self.key_serde,
            value_serde=self.value_serde,
            key_changed=False,
            name=name,
        )

    def foreach(self, action: Callable[[K, V], None], *, name: str | None = None) -> None:
        """Call `action(key, value)` for each record: a terminal operation, nothing is forwarded."""
        self._builder.add_processor(
            "KSTREAM-FOREACH-", lambda: PeekProcessor(action, False), self.node, name=name
        )

    def split(self, prefix: str | None = None) -> BranchedKStream[K, V]:
        """Branch the stream: `.branch(predicate, Branched...)` routes each record to the first branch whose
        predicate matches, `.default_branch()` takes the rest (Java's `split(Named.as(prefix))`: `prefix`
        names the splitter node and prefixes every branch's name)."""
        splitter = self._builder.name_or_new(prefix, "KSTREAM-BRANCH-")
        return BranchedKStream(self, splitter)

    def merge(self, other: KStream[K, V], *, name: str | None = None) -> KStream[K, V]:
        """One stream of the records of this stream and `other`, in the order they arrive."""
        if other._builder is not self._builder:
            raise TopologyError("cannot merge streams from different StreamsBuilders")
        node = self._builder.name_or_new(name, "KSTREAM-MERGE-")
        self._builder.topology.add_processor(node, PassThroughProcessor, self.node, other.node)
        self._builder.merge_nodes.append(node)
        same_key = self.key_serde == other.key_serde
        same_value = self.value_serde == other.value_serde
        return KStream(
            self._builder,
            node,
            self.key_serde if same_key else None,
            self.value_serde if same_value else None,
            self.repartition_required or other.repartition_required,
        )

    # ----------------------------------------------------------------- repartitioning and sinks
    def repartition(
        self,
        repartitioned: Repartitioned | None = None,
        *,
        key_serde: Serde[K] | None = None,
        value_serde: Serde[V] | None = None,
        number_of_partitions: int | None = None,
        name: str | None = None,
    ) -> KStream[K, V]:
        """Write the stream through an internal repartition topic and read it back, partitioned by its current
        key (its partition count from `repartitioned`, or the source's)."""
        opts = repartitioned or Repartitioned()
        key_serde = key_serde or opts.key_serde or self.key_serde
        value_serde = value_serde or opts.value_serde or self.value_serde
        partitions = number_of_partitions or opts.number_of_partitions
        user_name = name or opts.name
        base = user_name or self._builder.new_name("KSTREAM-REPARTITION-")
        source = self._builder.add_repartition(
            self.node,
            base,
            key_serde,
            value_serde,
            partitions=partitions,
            partitioner=opts.partitioner,
            optimizable=False,  # Java's UnoptimizableRepartitionNode: a user's repartition stays
        )
        return KStream(self._builder, source, key_serde, value_serde, repartition_required=False)

    def to(
        self,
        topic: str | TopicNameExtractor,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        partitioner: StreamPartitioner | None = None,
        produced: Produced | None = None,
    ) -> None:
        """Write each record to `topic` (or to the topic a `TopicNameExtractor` callable names) with the given
        serdes and optional partitioner: a terminal operation."""
        opts = produced or Produced()
        name = self._builder.name_or_new(opts.name, "KSTREAM-SINK-")
        self._builder.topology.add_sink(
            name,
            topic,
            self.node,
            key_serde=key_serde or opts.key_serde or self.key_serde,
            value_serde=value_serde or opts.value_serde or self.value_serde,
            partitioner=partitioner or opts.partitioner,
        )

    def to_table(
        self, materialized: Materialized | str | None = None, *, name: str | None = None
    ) -> KTable[K, V]:
        """The stream as a KTable: each record is an update of its key (a `None` value deletes it),
        materialized as `materialized` says."""
        builder = self._builder
        mat = Materialized.of(materialized)
        parent = self.node
        key_serde = mat.key_serde or self.key_serde
        value_serde = mat.value_serde or self.value_serde
        # Java's toTable: the processor's name (a number used even when named), the store's, then a
        # repartition named after the processor
        node = builder.name_or_new(name, "KSTREAM-TOTABLE-")
        if mat.versioned is not None:  # the store is the supplier's: no name generated for it
            if self.repartition_required:
                parent = builder.add_repartition(parent, node, key_serde, value_serde)
            return versioned_source_table(builder, node, parent, mat, key_serde, value_serde)
        store_name = mat.name or builder.new_name("KSTREAM-TOTABLE-STATE-STORE-")
        if self.repartition_required:
            parent = builder.add_repartition(parent, node, key_serde, value_serde)
        store = builder.kv_store_builder(mat, store_name, key_serde, value_serde)
        # unnamed, it is Java's unmaterialized table source: no store (nor cache, nor changelog) until needed
        getter = None if mat.name is not None else on_demand_store_getter(store)
        table: KTable[K, V] = KTable(
            builder, node, key_serde, value_serde, store_name, parent=None, getter=getter
        )
        table.materialized = mat.name is not None
        builder.topology.add_processor(
            node, lambda: KTableSourceProcessor(store_name, table.send_old_values_enabled, node), parent
        )
        builder.topology.add_state_store(store, node)
        return table

    # ----------------------------------------------------------------- grouping
    def group_by_key(
        self,
        *,
        key_serde: Serde[K] | None = None,
        value_serde: Serde[V] | None = None,
        grouped: Grouped | None = None,
    ) -> KGroupedStream[K, V]:
        """Group by the current key for an aggregation (`count`, `reduce`, `aggregate`, `windowed_by`);
        repartitions first if the key was changed."""
        opts = grouped or Grouped()
        return KGroupedStream(
            self._builder,
            self.node,
            key_serde or opts.key_serde or self.key_serde,
            value_serde or opts.value_serde or self.value_serde,
            self.repartition_required,
            opts.name,
        )

    def group_by(
        self,
        selector: Callable[[K, V], KR],
        *,
        key_serde: Serde[KR] | None = None,
        value_serde: Serde[V] | None = None,
        grouped: Grouped | None = None,
    ) -> KGroupedStream[KR, V]:
        """Re-key by `selector(key, value)` and group; the next aggregation repartitions."""
        opts = grouped or Grouped()
        rekeyed = self.select_key(selector)
        return rekeyed.group_by_key(
            key_serde=key_serde or opts.key_serde, value_serde=value_serde or opts.value_serde, grouped=opts
        )

    # ----------------------------------------------------------------- joins
    def _join(
        self,
        kind: str,
        other: Any,
        second: Callable[..., Any],
        third: Any,
        name: str | None,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        other_value_serde: Serde[Any] | None,
        store_type: str,
    ) -> KStream[Any, Any]:
        if isinstance(other, KStream):
            merge, joined_key_serde = stream_stream_join(
                self, other, second, third, kind, name=name, key_serde=key_serde, value_serde=value_serde,
                other_value_serde=other_value_serde, store_type=store_type,
            )  # fmt: skip
            return KStream(self._builder, merge, joined_key_serde, None, repartition_required=False)
        if kind == "outer":
            raise TopologyError("outer_join is defined for two streams or two tables only")
        if isinstance(other, KTable):
            joined = third if isinstance(third, Joined) else None
            node = stream_table_join(self, other, second, kind == "left", joined)
            return KStream(self._builder, node, self.key_serde, None, repartition_required=False)
        if isinstance(other, GlobalKTable):
            if third is None:
                raise TopologyError("a GlobalKTable join needs a key mapper and a joiner")
            node = stream_global_table_join(self, other, second, third, kind == "left")
            return KStream(self._builder, node, self.key_serde, None, self.repartition_required)
        raise TopologyError(f"cannot join a stream with {other!r}")

    def join(
        self,
        other: Any,
        joiner_or_key_mapper: Callable[..., Any],
        windows_or_joiner: Any = None,
        *,
        name: str | None = None,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        other_value_serde: Serde[Any] | None = None,
        store_type: str = "rocksdb",
    ) -> KStream[K, Any]:
        """`join(stream, joiner, JoinWindows)`, `join(table, joiner)` or `join(global_table, key_mapper,
        joiner)`; joiners are `(v1, v2)` or `(key, v1, v2)`."""
        return self._join("inner", other, joiner_or_key_mapper, windows_or_joiner, name, key_serde,
                          value_serde, other_value_serde, store_type)  # fmt: skip

    def left_join(
        self,
        other: Any,
        joiner_or_key_mapper: Callable[..., Any],
        windows_or_joiner: Any = None,
        *,
        name: str | None = None,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        other_value_serde: Serde[Any] | None = None,
        store_type: str = "rocksdb",
    ) -> KStream[K, Any]:
        """Like `join`, but every left record produces a result: with `None` for the right value when nothing
        matches (for stream-stream joins, emitted when the window closes)."""
        return self._join("left", other, joiner_or_key_mapper, windows_or_joiner, name, key_serde,
                          value_serde, other_value_serde, store_type)  # fmt: skip

    def outer_join(
        self,
        other: KStream[K, Any],
        joiner: Callable[..., Any],
        windows: Any,
        *,
        name: str | None = None,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        other_value_serde: Serde[Any] | None = None,
        store_type: str = "rocksdb",
    ) -> KStream[K, Any]:
        """A stream-stream join in which records of either side without a match within the window produce a
        result with `None` for the other side, once the window closes."""
        return self._join("outer", other, joiner, windows, name, key_serde, value_serde, other_value_serde,
                          store_type)  # fmt: skip

    # ----------------------------------------------------------------- asynchronous (no Java equivalent)
    def map_values_async(
        self,
        mapper: Callable[..., Awaitable[VR]] | Callable[..., VR],
        *,
        max_in_flight: int = 64,
        ordering: Ordering | str = Ordering.PER_KEY,
        timeout: timedelta | int = 30_000,
        retries: int = 0,
        backoff: timedelta | int = 100,
        name: str | None = None,
    ) -> KStream[K, VR]:
        """`map_values` whose `mapper(value)` or `mapper(key, value)` is an `async def` (awaited on the
        task's event loop) or a blocking function (run in a bounded thread pool), up to `max_in_flight`
        records per task at once. docs/concepts.md, "Asynchronous processing", has the semantics:
        ordering, commits, exactly-once, backpressure, errors, rebalances."""
        return self._async("map_values", mapper, takes_key(mapper), max_in_flight, ordering, timeout,
                           retries, backoff, name)  # fmt: skip

    def flat_map_values_async(
        self,
        mapper: Callable[..., Awaitable[Iterable[VR]]] | Callable[..., Iterable[VR]],
        *,
        max_in_flight: int = 64,
        ordering: Ordering | str = Ordering.PER_KEY,
        timeout: timedelta | int = 30_000,
        retries: int = 0,
        backoff: timedelta | int = 100,
        name: str | None = None,
    ) -> KStream[K, VR]:
        """`flat_map_values` with an asynchronous (or blocking) mapper; see `map_values_async`. A
        record's outputs leave together, never some of them."""
        return self._async("flat_map_values", mapper, takes_key(mapper), max_in_flight, ordering,
                           timeout, retries, backoff, name)  # fmt: skip

    def process_values_async(
        self,
        function: Callable[[Record[K, V]], Awaitable[Any]] | Callable[[Record[K, V]], Any],
        *,
        max_in_flight: int = 64,
        ordering: Ordering | str = Ordering.PER_KEY,
        timeout: timedelta | int = 30_000,
        retries: int = 0,
        backoff: timedelta | int = 100,
        name: str | None = None,
    ) -> KStream[K, Any]:
        """`function(record)` returns a `Record`, Records or None (keys unchanged): the timestamp and
        headers are the function's to set. No state store access: stores belong to the stream thread
        (put a `process_values` after it). Otherwise as `map_values_async`."""
        return self._async("process_values", function, False, max_in_flight, ordering, timeout,
                           retries, backoff, name)  # fmt: skip

    def _async(
        self,
        kind: str,
        function: Callable[..., Any],
        with_key: bool,
        max_in_flight: int,
        ordering: Ordering | str,
        timeout: timedelta | int,
        retries: int,
        backoff: timedelta | int,
        name: str | None,
    ) -> KStream[Any, Any]:
        if not callable(function):
            raise TypeError(f"{kind}_async: the function must be callable, got {function!r:.80}")
        options = AsyncCallOptions.of(max_in_flight, ordering, timeout, retries, backoff)
        key_serde, value_serde = self.key_serde, self.value_serde
        return self._derive(
            f"KSTREAM-{kind.replace('_', '').upper()}ASYNC-",
            lambda: AsyncValuesProcessor(kind, function, with_key, options, key_serde, value_serde),
            key_serde=self.key_serde,
            value_serde=None,
            key_changed=False,
            name=name,
        )

    # ----------------------------------------------------------------- Processor API inside the DSL
    def process(
        self, supplier: Callable[..., Any], *store_names: str, name: str | None = None
    ) -> KStream[Any, Any]:
        """Run a Processor (or a function `(record, context)`) that may change keys and forward freely."""
        node = self._builder.add_processor("KSTREAM-PROCESSOR-", _adapt(supplier), self.node, name=name)
        if store_names:
            self._builder.topology.connect_processor_and_state_stores(node, *store_names)
        return KStream(self._builder, node, None, None, repartition_required=True)

    def process_values(
        self, supplier: Callable[..., Any], *store_names: str, name: str | None = None
    ) -> KStream[K, Any]:
        """Like `process`, but forwarded records keep the input key (no repartition needed)."""
        adapted = _adapt(supplier)
        node = self._builder.add_processor(
            "KSTREAM-PROCESSVALUES-", lambda: FixedKeyProcessorAdapter(adapted()), self.node, name=name
        )
        if store_names:
            self._builder.topology.connect_processor_and_state_stores(node, *store_names)
        return KStream(self._builder, node, self.key_serde, None, self.repartition_required)


def _adapt(supplier: Callable[..., Any]) -> Callable[[], Processor[Any, Any]]:
    """A supplier (zero-argument callable, e.g. a Processor class) or a plain `f(record, context)`."""
    if not isinstance(supplier, type) and takes_key(supplier):
        function = supplier
        return lambda: CallableProcessorAdapter(function)

    def make() -> Processor[Any, Any]:
        made = supplier()
        if isinstance(made, Processor):
            return made
        if callable(made):
            return CallableProcessorAdapter(made)
        raise TopologyError(f"process(): the supplier returned {made!r}, which is not a Processor")

    return make
