"""A KTable materialized in a versioned store (KIP-914): `builder.table(topic, materialized=
Materialized.as_(Stores.persistent_versioned_key_value_store(name, history_retention)))`.

The source writes every update as a version at its record time. As Java's KTableSource does, it forwards
each update that was stored - out-of-order ones included - with the latest value before it as the old
value and flagged not latest (`Change.is_latest`) when a newer version exists, and drops (and counts) one
older than the history retention. Lookups of the latest value serve table-table operations; a
stream-table join looks the value up as of the stream record's time.
"""

from __future__ import annotations

from typing import Any

from kappaflow.api.errors import TopologyError
from kappaflow.api.processor import ProcessorContext
from kappaflow.api.record import Record
from kappaflow.api.serdes import Serde
from kappaflow.dsl.change import Change
from kappaflow.dsl.options import Materialized
from kappaflow.dsl.stream_processors import drop_record
from kappaflow.dsl.value_getters import AsOfGetter, ValueGetter, ValueGetterSupplier
from kappaflow.state.builders import Stores
from kappaflow.state.timestamped import ValueAndTimestamp
from kappaflow.state.versioned import (
    PUT_RETURN_CODE_NOT_PUT,
    PUT_RETURN_CODE_VALID_TO_UNDEFINED,
    VersionedKeyValueStore,
    VersionedKeyValueStoreBuilder,
    VersionedRecord,
)


def _vat(found: VersionedRecord[Any] | None) -> ValueAndTimestamp[Any] | None:
    return None if found is None else ValueAndTimestamp(found.value, found.timestamp)


class KTableVersionedSourceProcessor:
    context: ProcessorContext
    store: VersionedKeyValueStore

    def __init__(self, store_name: str, label: str) -> None:
        self.store_name = store_name
        self.label = label

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.store = context.get_state_store(self.store_name)

    def process(self, record: Record[Any, Any]) -> None:
        if record.key is None:
            drop_record(self.context, "null-key", self.label)
            return
        previous = self.store.get(record.key)
        put_code = self.store.put(record.key, record.value, record.timestamp)
        if put_code == PUT_RETURN_CODE_NOT_PUT:
            drop_record(self.context, "expired-version", self.label)
            return
        old = None if previous is None else previous.value
        is_latest = put_code == PUT_RETURN_CODE_VALID_TO_UNDEFINED
        self.context.forward(record.with_value(Change(record.value, old, is_latest)))

    def close(self) -> None:
        return None


def versioned_getter(store_name: str) -> ValueGetterSupplier:
    """Latest-value lookups, and as-of lookups for stream-table joins."""

    def bind(context: ProcessorContext) -> ValueGetter:
        store: VersionedKeyValueStore = context.get_state_store(store_name)
        return lambda key: _vat(store.get(key))

    def bind_as_of(context: ProcessorContext) -> AsOfGetter:
        store: VersionedKeyValueStore = context.get_state_store(store_name)
        return lambda key, timestamp: _vat(store.get(key, timestamp))

    return ValueGetterSupplier([store_name], bind, bind_as_of=bind_as_of)


def versioned_store_builder(
    mat: Materialized, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None
) -> VersionedKeyValueStoreBuilder:
    """The versioned store a `Materialized.as_(versioned supplier)` asks for, for a source table or a
    derived one (`to_table`, `filter`, `map_values`): never cached, as Java's."""
    assert mat.versioned is not None
    if mat.ttl is not None:
        raise TopologyError(
            f"table '{mat.versioned.name}': a versioned store keeps history by its retention; "
            "Materialized.with_ttl applies to plain key-value stores"
        )
    store = Stores.versioned_key_value_store_builder(
        mat.versioned, mat.key_serde or key_serde, mat.value_serde or value_serde
    )
    if not mat.logging:
        store.with_logging_disabled()
    store.extra_log_config = dict(mat.log_config)
    return store
