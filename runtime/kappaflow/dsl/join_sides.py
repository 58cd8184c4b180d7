"""What the join helpers need of the streams and tables they join.

`KStream.join` and `KTable.join` call the helpers in `dsl.joins`, `dsl.table_joins` and `dsl.fk_join`,
so those modules cannot import `KStream` or `KTable`, not even for annotations, without a cycle. They
take these protocols instead: the few attributes a join reads, and for tables the means to make the
result table (`_derive_table`, which returns a table of the caller's own type).
"""

from __future__ import annotations

from typing import Any, Protocol, Self

from kappaflow.api.serdes import Serde
from kappaflow.dsl.graph import InternalBuilder
from kappaflow.dsl.value_getters import ValueGetterSupplier


class StreamSide(Protocol):
    """A `KStream` as a join sees it."""

    _builder: InternalBuilder
    node: str
    key_serde: Serde[Any] | None
    value_serde: Serde[Any] | None
    repartition_required: bool


class GlobalTableSide(Protocol):
    """A `GlobalKTable` as a stream join sees it: a store every instance holds in full."""

    store_name: str


class TableSide(Protocol):
    """A `KTable` as a join sees it."""

    _builder: InternalBuilder
    node: str
    key_serde: Serde[Any] | None
    value_serde: Serde[Any] | None
    versioned: bool
    value_getter_supplier: ValueGetterSupplier

    def enable_send_old_values(self) -> None: ...

    def send_old_values_enabled(self) -> bool: ...

    def _derive_table(
        self,
        node: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        store_name: str | None,
        *,
        getter: ValueGetterSupplier | None = None,
        join_parents: tuple[Self, ...] = (),
    ) -> Self: ...
