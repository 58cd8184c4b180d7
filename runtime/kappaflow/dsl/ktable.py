"""`KTable` (a changelog stream: the latest value per key), `KGroupedTable` and `GlobalKTable`.

Table processors exchange `Change(new, old)`. Old values are sent only when something downstream needs
them (a re-grouping, a join), as Kafka Streams does: `enable_send_old_values` walks up to the source, and
the flag is read when tasks instantiate processors, after the topology is complete. That choice is
visible: a filter that sees old values suppresses a tombstone for a key that never passed it, a filter
that does not emits one; a filter asks a materialized parent for them when built (Java's KTableFilter).
Each table can also hand out a *value getter* - a way to look up the current value of a key - which
joins use; derived tables without a store compute it from their parent's getter.

A table and its re-grouping make each other (`group_by` -> `KGroupedTable` -> `aggregate` -> `KTable`),
so both live here. The table-table and foreign-key join helpers sit below this module and make their
result tables through `KTable._derive_table`; a table's `to_stream()` makes its `KStream` through the
builder (see `dsl.graph`), as `dsl.kstream` imports this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, overload

from kappaflow.api.errors import TopologyError
from kappaflow.api.processor import ProcessorContext
from kappaflow.api.serdes import Long, Serde
from kappaflow.dsl.change import ChangeSerde
from kappaflow.dsl.fk_extractor import ForeignKeyExtractor
from kappaflow.dsl.fk_join import foreign_key_join
from kappaflow.dsl.graph import InternalBuilder
from kappaflow.dsl.options import Grouped, Materialized
from kappaflow.dsl.stream_processors import takes_key
from kappaflow.dsl.suppress import KTableSuppressProcessor, Suppressed, change_codec, suppressed_getter
from kappaflow.dsl.table_joins import table_table_join
from kappaflow.dsl.table_processors import (
    KTableAggregateProcessor,
    KTableFilterProcessor,
    KTableMapValuesProcessor,
    KTableRepartitionMapProcessor,
    KTableToStreamProcessor,
    count_add,
    count_initial,
    count_subtract,
)
from kappaflow.dsl.table_transform import KTableTransformValuesProcessor, transformed_lookup
from kappaflow.dsl.typevars import KO, KR, VA, VO, VR, K, V
from kappaflow.dsl.value_getters import ValueGetter, ValueGetterSupplier, derived_getter, store_getter
from kappaflow.dsl.versioned_table import (
    KTableVersionedSourceProcessor,
    versioned_getter,
    versioned_store_builder,
)
from kappaflow.state.time_ordered_buffer import BufferStoreBuilder

if TYPE_CHECKING:
    from kappaflow.api.processor import ValueTransformerWithKey
    from kappaflow.dsl.kstream import KStream


class KTable(Generic[K, V]):
    """A changelog stream: the latest value `V` per key `K`."""

    def __init__(
        self,
        builder: InternalBuilder,
        node: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        store_name: str | None,
        parent: KTable[Any, Any] | None,
        getter: ValueGetterSupplier | None = None,
        join_parents: tuple[KTable[Any, Any], ...] = (),
    ) -> None:
        self._builder = builder
        self.node = node
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.store_name = store_name
        self._parent = parent
        # a join's result has no single parent: asking it for old values asks both sides
        self._join_parents = join_parents
        self._send_old = False
        # set on windowed aggregation results: suppress(until_window_closes) needs the grace period
        self.window_grace_ms: int | None = None
        # set on tables materialized in a versioned store (KIP-914): joins may look values up as of a time
        self.versioned = False
        # whether the store counts as materialized for Java's enableSendingOldValues(false): a
        # `builder.table` without a store name has no store in Java (kappaflow keeps one regardless)
        self.materialized = store_name is not None
        if getter is None:
            assert store_name is not None, "a table without a store needs a value getter"
            getter = store_getter(store_name)
        self.value_getter_supplier = getter

    def _derive_table(
        self,
        node: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        store_name: str | None,
        *,
        getter: ValueGetterSupplier | None = None,
        join_parents: tuple[KTable[Any, Any], ...] = (),
    ) -> KTable[Any, Any]:
        """A new table of this table's builder, for the join helpers in the modules below this one."""
        return KTable(
            self._builder, node, key_serde, value_serde, store_name, None, getter, join_parents=join_parents
        )

    @property
    def queryable_store_name(self) -> str | None:
        """The name of the store that materializes this table, if it has one (for interactive queries); `None`
        when the table is not materialized."""
        return self.store_name

    def send_old_values_enabled(self) -> bool:
        """Whether updates carry the old value along with the new one (needed by downstream aggregations that
        subtract it)."""
        return self._send_old

    def enable_send_old_values(self) -> None:
        """Java's `enableSendingOldValues(forceMaterialization=true)`: a source with its store only on
        demand gets it now."""
        self._send_old = True
        self.value_getter_supplier.materialize()
        for parent in (self._parent, *self._join_parents):
            if parent is not None:
                parent.enable_send_old_values()

    def versioned_upstream(self) -> bool:
        """Java's isVersionedOrVersionedUpstream: whether this table's updates come from a versioned store
        (its own, or an unmaterialized chain's above it), so they may be flagged not latest (KIP-914)."""
        if self.versioned:
            return True
        if self.materialized:
            return False
        parents = [parent for parent in (self._parent, *self._join_parents) if parent is not None]
        return bool(parents) and all(parent.versioned_upstream() for parent in parents)

    def _try_enable_send_old_values(self) -> bool:
        """Java's `enableSendingOldValues(forceMaterialization=false)`: a table with a store of its own
        (materialized, or an aggregation) sends old values at no cost; one without asks its parent.
        Returns whether this table now sends them."""
        if not self._send_old:
            if self.materialized:
                self.enable_send_old_values()
            elif self._parent is not None and self._parent._try_enable_send_old_values():
                self._send_old = True
        return self._send_old

    def _derived(
        self,
        prefix: str,
        make: Callable[[str | None, Callable[[], bool], str], Any],
        materialized: Materialized | str | None,
        value_serde: Serde[Any] | None,
        derive_value: Callable[[Any, Any], Any],
    ) -> KTable[Any, Any]:
        builder = self._builder
        mat = Materialized.of(materialized) if materialized is not None else None
        store_name: str | None = None
        versioned = mat is not None and mat.versioned is not None
        if mat is not None:  # Java names the store (MaterializedInternal) before the processor
            if mat.versioned is not None:
                store_name = mat.versioned.name
            else:
                store_name = mat.name or builder.new_name(f"{prefix}STATE-STORE-")
            value_serde = mat.value_serde or value_serde
        node = builder.new_name(prefix)
        getter = None
        if store_name is None:
            getter = derived_getter(self.value_getter_supplier, derive_value)
        elif versioned:
            getter = versioned_getter(store_name)
        table: KTable[Any, Any] = KTable(
            builder, node, self.key_serde, value_serde, store_name, parent=self, getter=getter
        )
        table.versioned = versioned
        send_old = table.send_old_values_enabled
        builder.topology.add_processor(node, lambda: make(store_name, send_old, node), self.node)
        if mat is not None and store_name is not None:
            key_serde = mat.key_serde or self.key_serde
            store = (
                versioned_store_builder(mat, key_serde, value_serde)
                if versioned
                else builder.kv_store_builder(mat, store_name, key_serde, value_serde)
            )
            builder.topology.add_state_store(store, node)
        return table

    def filter(
        self, predicate: Callable[[K, V], bool], materialized: Materialized | str | None = None
    ) -> KTable[K, V]:
        """A table of the rows for which `predicate(key, value)` is true; a row that stops matching is deleted
        downstream (a tombstone)."""
        return self._filter(predicate, False, materialized)

    def filter_not(
        self, predicate: Callable[[K, V], bool], materialized: Materialized | str | None = None
    ) -> KTable[K, V]:
        """A table without the rows for which `predicate(key, value)` is true."""
        return self._filter(predicate, True, materialized)

    def _filter(
        self, predicate: Callable[[K, V], bool], negate: bool, materialized: Materialized | str | None
    ) -> KTable[K, V]:
        def keep(key: Any, value: Any) -> Any:
            return value if bool(predicate(key, value)) != negate else None

        # as Java's KTableFilter: over a parent that has old values without new state, send them, so a
        # row filtered out before and after an update forwards nothing (no needless tombstone)
        upstream_old = self._try_enable_send_old_values()
        versioned_semantics = self.versioned_upstream()
        table = self._derived(
            "KTABLE-FILTER-",
            lambda store, send_old, label: KTableFilterProcessor(
                predicate, negate, store, send_old, label, versioned_semantics
            ),
            materialized,
            self.value_serde,
            keep,
        )
        if upstream_old:
            table._send_old = True
        return table

    @overload
    def map_values(
        self, mapper: Callable[[V], VR], materialized: Materialized | str | None = None
    ) -> KTable[K, VR]: ...

    @overload
    def map_values(
        self, mapper: Callable[[K, V], VR], materialized: Materialized | str | None = None
    ) -> KTable[K, VR]: ...

    def map_values(
        self, mapper: Callable[..., VR], materialized: Materialized | str | None = None
    ) -> KTable[K, VR]:
        """A table whose values are `mapper(value)` (or `mapper(key, value)`), optionally materialized."""
        with_key = takes_key(mapper)

        def derive(key: Any, value: Any) -> Any:
            return mapper(key, value) if with_key else mapper(value)

        return self._derived(
            "KTABLE-MAPVALUES-",
            lambda store, send_old, label: KTableMapValuesProcessor(mapper, with_key, store, send_old, label),
            materialized,
            None,
            derive,
        )

    def transform_values(
        self,
        supplier: Callable[[], ValueTransformerWithKey[K, V, VR]],
        *store_names: str,
        materialized: Materialized | str | None = None,
        name: str | None = None,
    ) -> KTable[K, VR]:
        """Java's `transformValues`: `supplier()` makes a `ValueTransformerWithKey` (init/transform/close)
        per task; `store_names` are connected so `init` can fetch them from its context."""
        builder = self._builder
        mat = Materialized.of(materialized) if materialized is not None else None
        store_name = (  # Java names the store before the processor, and a named processor uses a number
            None if mat is None else mat.name or builder.new_name("KTABLE-TRANSFORMVALUES-STATE-STORE-")
        )
        node = builder.name_or_new(name, "KTABLE-TRANSFORMVALUES-")
        parent_getter = self.value_getter_supplier

        def bind(context: ProcessorContext) -> ValueGetter:
            return transformed_lookup(supplier, context, parent_getter.get(context))

        getter = None
        if store_name is None:
            getter = ValueGetterSupplier(lambda: [*parent_getter.store_names, *store_names], bind)
        value_serde = None if mat is None else mat.value_serde
        table: KTable[K, VR] = KTable(
            builder, node, self.key_serde, value_serde, store_name, parent=self, getter=getter
        )
        send_old = table.send_old_values_enabled
        builder.topology.add_processor(
            node, lambda: KTableTransformValuesProcessor(supplier(), store_name, send_old, node), self.node
        )
        if store_names:
            builder.topology.connect_processor_and_state_stores(node, *store_names)
        if mat is not None and store_name is not None:
            builder.topology.add_state_store(
                builder.kv_store_builder(mat, store_name, mat.key_serde or self.key_serde, value_serde), node
            )
        return table

    def to_stream(self, *, name: str | None = None) -> KStream[K, V]:
        """The table's changelog as a stream: one record per update (a `None` value for a delete)."""
        node = self._builder.add_processor("KTABLE-TOSTREAM-", KTableToStreamProcessor, self.node, name=name)
        return self._builder.new_stream(node, self.key_serde, self.value_serde, repartition_required=False)

    def group_by(
        self,
        selector: Callable[[K, V], tuple[KR, VR]],
        *,
        key_serde: Serde[KR] | None = None,
        value_serde: Serde[VR] | None = None,
        grouped: Grouped | None = None,
    ) -> KGroupedTable[KR, VR]:
        """Re-group the table by `selector(key, value) -> (new_key, new_value)`."""
        opts = grouped or Grouped()
        self.enable_send_old_values()
        node = self._builder.add_processor(
            "KTABLE-SELECT-", lambda: KTableRepartitionMapProcessor(selector, node), self.node
        )
        return KGroupedTable(
            self._builder,
            node,
            key_serde or opts.key_serde,
            value_serde or opts.value_serde,
            opts.name,
        )

    # ----------------------------------------------------------------- joins and suppression
    def _join(
        self, kind: str, other: KTable[Any, Any], args: tuple[Any, ...], materialized: Any
    ) -> KTable[K, Any]:
        """Which join the positional arguments ask for: `(joiner[, materialized])` on the primary key, or
        `(foreign_key_extractor, joiner[, materialized])`, told apart by a ForeignKeyExtractor or a
        callable in the second place (a `Materialized` or store name is never callable)."""
        if not 1 <= len(args) <= 3:
            raise TypeError(f"KTable join: expected 1 to 3 arguments after `other`, got {len(args)}")
        second, third = args[0], args[1] if len(args) > 1 else None
        if len(args) == 3:
            materialized = args[2]
        if isinstance(second, ForeignKeyExtractor) or callable(third):
            # (other, foreign_key_extractor, joiner[, materialized])
            if not callable(third):
                raise TopologyError("a foreign-key join needs a joiner after the ForeignKeyExtractor")
            extractor: ForeignKeyExtractor[Any, Any, Any] = ForeignKeyExtractor.of(second)
            return foreign_key_join(self, other, extractor, third, kind == "left", materialized)
        return table_table_join(self, other, second, kind, third if third is not None else materialized)

    @overload
    def join(
        self,
        other: KTable[K, VO],
        joiner: Callable[[V, VO], VR] | Callable[[K, V, VO], VR],
        /,
        materialized: Materialized | str | None = None,
    ) -> KTable[K, VR]: ...

    @overload
    def join(
        self,
        other: KTable[KO, VO],
        foreign_key_extractor: ForeignKeyExtractor[K, V, KO] | Callable[[V], KO | None],
        joiner: Callable[[V, VO], VR] | Callable[[K, V, VO], VR],
        /,
        materialized: Materialized | str | None = None,
    ) -> KTable[K, VR]: ...

    def join(
        self, other: KTable[Any, Any], *args: Any, materialized: Materialized | str | None = None
    ) -> KTable[K, Any]:
        """`join(other, joiner[, materialized])` on the primary key, or `join(other, fk_extractor, joiner
        [, materialized])`: a foreign-key join where the extractor gives the other table's key - a plain
        callable from the value, `ForeignKeyExtractor.from_key_and_value(f)` from the key and the value."""
        return self._join("inner", other, args, materialized)

    @overload
    def left_join(
        self,
        other: KTable[K, VO],
        joiner: Callable[[V, VO | None], VR] | Callable[[K, V, VO | None], VR],
        /,
        materialized: Materialized | str | None = None,
    ) -> KTable[K, VR]: ...

    @overload
    def left_join(
        self,
        other: KTable[KO, VO],
        foreign_key_extractor: ForeignKeyExtractor[K, V, KO] | Callable[[V], KO | None],
        joiner: Callable[[V, VO | None], VR] | Callable[[K, V, VO | None], VR],
        /,
        materialized: Materialized | str | None = None,
    ) -> KTable[K, VR]: ...

    def left_join(
        self, other: KTable[Any, Any], *args: Any, materialized: Materialized | str | None = None
    ) -> KTable[K, Any]:
        """A table join that keeps every row of this table: the joiner gets `None` for the other value when
        the other table has no row for the key (or for the foreign key, in a foreign-key left join)."""
        return self._join("left", other, args, materialized)

    def outer_join(
        self,
        other: KTable[K, Any],
        joiner: Callable[..., Any],
        materialized: Materialized | str | None = None,
    ) -> KTable[K, Any]:
        """A table join that keeps the rows of both tables: the joiner gets `None` for the side that has no
        row for the key."""
        return table_table_join(self, other, joiner, "outer", materialized)

    def suppress(self, suppressed: Suppressed) -> KTable[K, V]:
        """Hold back updates: `Suppressed.until_window_closes(...)` (final windowed results) or
        `Suppressed.until_time_limit(...)`; the buffer is changelogged."""
        builder = self._builder
        if self.versioned_upstream():
            # Java refuses it too (InternalStreamsBuilder): a buffer emitting later would reorder
            # versions, and out-of-order updates below a versioned table are not the latest value
            raise TopologyError(
                "suppress() is only supported for non-versioned KTables "
                "(note that version semantics might be inherited from upstream)"
            )
        grace = 0
        if suppressed.final_results:
            if self.window_grace_ms is None:
                raise TopologyError("suppress(until_window_closes) needs a windowed aggregation's table")
            grace = self.window_grace_ms
        # Java's KTableSuppressProcessorSupplier: the buffer holds (and counts the bytes of) old values
        self.enable_send_old_values()
        node = f"{suppressed.name}" if suppressed.name else builder.new_name("KTABLE-SUPPRESS-")
        store = (
            f"{suppressed.name}-store"
            if suppressed.name
            else builder.new_name("KTABLE-SUPPRESS-STATE-STORE-")
        )
        parent_getter = self.value_getter_supplier
        builder.topology.add_processor(
            node, lambda: KTableSuppressProcessor(suppressed, grace, store, node), self.node
        )
        builder.topology.add_state_store(
            BufferStoreBuilder(store, self.key_serde, change_codec(self.value_serde)), node
        )
        return KTable(
            builder,
            node,
            self.key_serde,
            self.value_serde,
            None,
            parent=self,
            getter=ValueGetterSupplier(
                lambda: [*parent_getter.store_names, store],
                suppressed_getter(self.value_getter_supplier, store),
            ),
        )


def versioned_source_table(
    internal: InternalBuilder,
    processor: str,
    source: str,
    mat: Materialized,
    key_serde: Serde[Any] | None,
    value_serde: Serde[Any] | None,
) -> KTable[Any, Any]:
    """A table whose updates `source` forwards, kept in a versioned store (KIP-914): `builder.table`
    and `to_table` given a versioned `Materialized`. No cache; joins read it as of the record's time."""
    assert mat.versioned is not None
    name = mat.versioned.name
    table: KTable[Any, Any] = KTable(
        internal, processor, key_serde, value_serde, name, parent=None, getter=versioned_getter(name)
    )
    table.versioned = True
    internal.topology.add_processor(
        processor, lambda: KTableVersionedSourceProcessor(name, processor), source
    )
    internal.topology.add_state_store(versioned_store_builder(mat, key_serde, value_serde), processor)
    return table


def aggregate_table(
    builder: InternalBuilder,
    node: str,
    parent: str,
    mat: Materialized,
    store_name: str,
    key_serde: Serde[Any] | None,
    value_serde: Serde[Any] | None,
    make: Callable[[str, Callable[[], bool], str], Any],
) -> KTable[Any, Any]:
    """The aggregation node, its timestamped store and the KTable over it (streams and tables alike)."""
    table: KTable[Any, Any] = KTable(builder, node, key_serde, value_serde, store_name, parent=None)
    send_old = table.send_old_values_enabled
    builder.topology.add_processor(node, lambda: make(store_name, send_old, node), parent)
    builder.topology.add_state_store(builder.kv_store_builder(mat, store_name, key_serde, value_serde), node)
    return table


class KGroupedTable(Generic[K, V]):
    """A re-grouped table. It always repartitions, carrying (new, old) changes so the aggregate can
    subtract what a key's previous value contributed."""

    def __init__(
        self,
        builder: InternalBuilder,
        node: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        grouped_name: str | None,
    ) -> None:
        self._builder = builder
        self.node = node
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.grouped_name = grouped_name

    def _aggregate(
        self,
        prefix: str,
        materialized: Materialized | str | None,
        default_value_serde: Serde[Any] | None,
        make: Callable[[str, Callable[[], bool], str], Any],
    ) -> KTable[K, Any]:
        builder = self._builder
        mat = Materialized.of(materialized)
        store_name = mat.name or builder.new_name("KTABLE-AGGREGATE-STATE-STORE-")
        base = self.grouped_name or store_name
        parent = builder.add_table_repartition(self.node, base, self.key_serde, ChangeSerde(self.value_serde))
        node = builder.new_name(prefix)
        return aggregate_table(
            builder,
            node,
            parent,
            mat,
            store_name,
            mat.key_serde or self.key_serde,
            mat.value_serde or default_value_serde,
            make,
        )

    def count(self, materialized: Materialized | str | None = None) -> KTable[K, int]:
        """A table of how many rows of the grouped table map to each new key (rows moving between keys are
        subtracted from the old one)."""
        return self._aggregate(
            "KTABLE-AGGREGATE-",
            materialized,
            Long(),
            lambda store, send_old, label: KTableAggregateProcessor(
                store, send_old, label, adder=count_add, subtractor=count_subtract, initializer=count_initial
            ),
        )

    def reduce(
        self,
        adder: Callable[[V, V], V],
        subtractor: Callable[[V, V], V],
        materialized: Materialized | str | None = None,
    ) -> KTable[K, V]:
        """Combine the values of each key: `adder(aggregate, new)` for a row arriving, `subtractor(aggregate,
        old)` for a row leaving the key."""
        return self._aggregate(
            "KTABLE-REDUCE-",
            materialized,
            self.value_serde,
            lambda store, send_old, label: KTableAggregateProcessor(
                store, send_old, label, reduce_adder=adder, reduce_subtractor=subtractor
            ),
        )

    def aggregate(
        self,
        initializer: Callable[[], VA],
        adder: Callable[[K, V, VA], VA],
        subtractor: Callable[[K, V, VA], VA],
        materialized: Materialized | str | None = None,
    ) -> KTable[K, VA]:
        """Aggregate the values of each key from `initializer()`: `adder(key, value, aggregate)` for a row
        arriving, `subtractor(key, value, aggregate)` for one leaving."""
        return self._aggregate(
            "KTABLE-AGGREGATE-",
            materialized,
            None,
            lambda store, send_old, label: KTableAggregateProcessor(
                store, send_old, label, adder=adder, subtractor=subtractor, initializer=initializer
            ),
        )


class GlobalKTable(Generic[K, V]):
    """A table replicated in full to every instance; joined with streams by a key mapper."""

    def __init__(self, store_name: str, key_serde: Serde[K] | None, value_serde: Serde[V] | None) -> None:
        self.store_name = store_name
        self.key_serde = key_serde
        self.value_serde = value_serde

    @property
    def queryable_store_name(self) -> str:
        """The name of the global store holding the table (every instance has all of it)."""
        return self.store_name
