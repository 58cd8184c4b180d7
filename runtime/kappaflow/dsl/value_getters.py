"""Value getters: how a processor looks up a table's current value of a key (joins, derived tables).

Each table hands out a `ValueGetterSupplier`; derived tables without a store compute their values from
their parent's getter. These live apart from `KTable` so the join and versioned-table processors, which
only look values up, need not import the table type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kappaflow.api.processor import ProcessorContext
from kappaflow.state.builders import KeyValueStoreBuilder
from kappaflow.state.timestamped import ValueAndTimestamp

# A value getter looks up a key's current (value, timestamp) from inside a processor of the same task.
ValueGetter = Callable[[Any], ValueAndTimestamp[Any] | None]
# A versioned table's lookup as of a timestamp.
AsOfGetter = Callable[[Any, int], ValueAndTimestamp[Any] | None]


class ValueGetterSupplier:
    """Builds a value getter bound to a processor context; `store_names` must be connected to the
    processor that uses it."""

    def __init__(
        self,
        store_names: list[str] | Callable[[], list[str]],
        bind: Callable[[ProcessorContext], ValueGetter],
        materialize: Callable[[], None] | None = None,
        bind_as_of: Callable[[ProcessorContext], AsOfGetter] | None = None,
    ) -> None:
        # a callable defers asking a parent for its stores (and so materializing it) until a processor
        # actually connects this getter, as Java resolves `valueGetterSupplier()` only on use
        self._store_names = store_names
        self._bind = bind
        self._materialize = materialize
        self._bind_as_of = bind_as_of

    @property
    def versioned(self) -> bool:
        """Whether lookups may ask for the value as of a time (a versioned table, or one derived from
        it without a store of its own)."""
        return self._bind_as_of is not None

    def get_as_of(self, context: ProcessorContext) -> AsOfGetter | None:
        """For a versioned table: a lookup of the value valid at a given time (KIP-914)."""
        return None if self._bind_as_of is None else self._bind_as_of(context)

    @property
    def store_names(self) -> list[str]:
        """The stores to connect; asking for them materializes a table that has its store only on
        demand (a foreign-key join's result, as Java's `KTableSource.materialize()`)."""
        self.materialize()
        names = self._store_names
        return names() if callable(names) else names

    def materialize(self) -> None:
        """Create the store of a table that has one only on demand (once)."""
        if self._materialize is not None:
            materialize, self._materialize = self._materialize, None
            materialize()

    def get(self, context: ProcessorContext) -> ValueGetter:
        return self._bind(context)


def store_getter(store_name: str) -> ValueGetterSupplier:
    def bind(context: ProcessorContext) -> ValueGetter:
        store = context.get_state_store(store_name)
        return store.get  # type: ignore[no-any-return]

    return ValueGetterSupplier([store_name], bind)


def on_demand_store_getter(store: KeyValueStoreBuilder[Any, Any]) -> ValueGetterSupplier:
    """The getter of an unnamed `builder.table`, which has no store in Java until something needs its
    values (a join, a re-grouping): until then it forwards every update as it comes, without a record
    cache. kappaflow keeps the store (for old values) but caches, logs and describes it only once it is
    materialized."""
    caching, logging, log_config = store.caching_enabled, store.logging_enabled, dict(store.log_config)
    store.caching_enabled = False
    store.with_logging_disabled()  # no changelog topic Java would not have either
    store.described = False
    name = store.name

    def materialize() -> None:
        store.caching_enabled = caching
        if logging:
            store.with_logging_enabled(log_config)
        store.described = True

    def bind(context: ProcessorContext) -> ValueGetter:
        return context.get_state_store(name).get  # type: ignore[no-any-return]

    return ValueGetterSupplier([name], bind, materialize=materialize)


def derived_getter(
    parent: ValueGetterSupplier, derive_value: Callable[[Any, Any], Any]
) -> ValueGetterSupplier:
    """The getter of an unmaterialized `filter`/`map_values`: the parent's value, derived. Over a
    versioned parent it also passes an as-of time through, so a join reads the derived value as of
    the record's time (Java's KTableFilterValueGetter / KTableMapValuesValueGetter)."""

    def derive(key: Any, found: ValueAndTimestamp[Any] | None) -> ValueAndTimestamp[Any] | None:
        if found is None:
            return None
        return ValueAndTimestamp.make(derive_value(key, found.value), found.timestamp)

    def bind(context: ProcessorContext) -> ValueGetter:
        lookup = parent.get(context)
        return lambda key: derive(key, lookup(key))

    def bind_as_of(context: ProcessorContext) -> AsOfGetter:
        lookup = parent.get_as_of(context)
        assert lookup is not None, "an as-of lookup of a derived table needs a versioned parent"
        return lambda key, timestamp: derive(key, lookup(key, timestamp))

    return ValueGetterSupplier(
        lambda: parent.store_names, bind, bind_as_of=bind_as_of if parent.versioned else None
    )
