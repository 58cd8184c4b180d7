"""`Stores`: suppliers of bytes stores and builders that wrap them in the standard layers.

Mirrors Kafka Streams' `Stores` so Processor API users can add stores by the names they know. Builders
are what a Topology keeps: each task calls `build()` to get its own store instance, so no store object is
ever shared between tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, Protocol, TypeVar

from kappaflow.api.serdes import Serde
from kappaflow.state.api import KeyValueBytesStore, StateStore
from kappaflow.state.kv_bytes import InMemoryKeyValueBytesStore, RocksDBKeyValueBytesStore
from kappaflow.state.kv_layers import (
    CachingKeyValueStore,
    ChangeLoggingKeyValueBytesStore,
    MeteredKeyValueStore,
)
from kappaflow.state.timestamped import ValueAndTimestamp, ValueAndTimestampSerde
from kappaflow.state.ttl import (
    DEFAULT_MAX_EXPIRED_PER_COMMIT,
    ExpiringKeyValueBytesStore,
    StoreTtl,
    TtlClock,
)
from kappaflow.state.versioned import (
    VersionedBytesStoreSupplier,
    VersionedKeyValueStoreBuilder,
    versioned_supplier,
)

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True)
class KeyValueBytesStoreSupplier:
    name: str
    persistent: bool
    factory: Callable[[str, bool], KeyValueBytesStore]

    def get(self, timestamped: bool = False) -> KeyValueBytesStore:
        return self.factory(self.name, timestamped)


class StoreBuilder(Protocol):
    """What a Topology holds for each store: enough to build one instance per task and to plan its
    changelog topic."""

    @property
    def name(self) -> str: ...

    @property
    def logging_enabled(self) -> bool: ...

    @property
    def log_config(self) -> dict[str, str]: ...

    @property
    def persistent(self) -> bool: ...

    @property
    def store_kind(self) -> str: ...

    def build(self) -> StateStore: ...


@dataclass
class KeyValueStoreBuilder(Generic[K, V]):
    supplier: KeyValueBytesStoreSupplier
    key_serde: Serde[Any] | None
    value_serde: Serde[Any] | None
    timestamped: bool = False
    caching_enabled: bool = False
    logging_enabled: bool = True
    log_config: dict[str, str] = field(default_factory=dict)
    store_kind: str = "key_value"
    # False for a store Java does not have: an unnamed `builder.table()`'s private store until something
    # needs its values; describe() leaves it out and, with logging off until then, it has no changelog
    described: bool = True
    ttl: StoreTtl | None = None

    @property
    def name(self) -> str:
        return self.supplier.name

    @property
    def persistent(self) -> bool:
        return self.supplier.persistent

    def with_caching_enabled(self) -> KeyValueStoreBuilder[K, V]:
        self.caching_enabled = True
        return self

    def with_caching_disabled(self) -> KeyValueStoreBuilder[K, V]:
        self.caching_enabled = False
        return self

    def with_logging_enabled(self, config: dict[str, str] | None = None) -> KeyValueStoreBuilder[K, V]:
        self.logging_enabled = True
        self.log_config = dict(config or {})
        return self

    def with_logging_disabled(self) -> KeyValueStoreBuilder[K, V]:
        self.logging_enabled = False
        return self

    def with_ttl(
        self,
        ttl: timedelta | int,
        *,
        clock: TtlClock = "stream_time",
        emit_tombstones: bool = False,
        max_expired_per_commit: int = DEFAULT_MAX_EXPIRED_PER_COMMIT,
    ) -> KeyValueStoreBuilder[K, V]:
        """Expire entries not written for `ttl` (kappaflow.state.ttl; Kafka Streams has none,
        KAFKA-4273): measured on stream time (the default) or the wall clock (`clock="wall_clock"`), at
        most `max_expired_per_commit` deleted per commit, each with a changelog tombstone;
        `emit_tombstones` forwards them downstream (DSL tables)."""
        self.ttl = StoreTtl.of(ttl, clock, emit_tombstones, max_expired_per_commit)
        return self

    def build(self) -> MeteredKeyValueStore[K, Any]:
        inner: KeyValueBytesStore = self.supplier.get(self.timestamped)
        if self.logging_enabled:
            inner = ChangeLoggingKeyValueBytesStore(inner, timestamped=self.timestamped)
        if self.caching_enabled:
            inner = CachingKeyValueStore(inner)
        if self.ttl is not None:
            inner = ExpiringKeyValueBytesStore(inner, self.ttl, self.timestamped)
        value_serde = self.value_serde
        if self.timestamped and value_serde is not None:
            value_serde = ValueAndTimestampSerde(value_serde)
        store: MeteredKeyValueStore[K, Any] = MeteredKeyValueStore(inner, self.key_serde, value_serde)
        if self.timestamped and value_serde is None:
            store = _DeferredTimestampedStore(inner, self.key_serde)
        return store


class _DeferredTimestampedStore(MeteredKeyValueStore[Any, Any]):
    """A timestamped store whose value serde comes from `default.value.serde` at init time."""

    def __init__(self, inner: KeyValueBytesStore, key_serde: Serde[Any] | None) -> None:
        super().__init__(inner, key_serde, None)

    def init(self, context: Any, root: StateStore | None = None) -> None:
        default = context.app_config.serde("default.value.serde")
        if default is not None:
            self.value_serde = ValueAndTimestampSerde(default)
        super().init(context, root)


class Stores:
    """Factory of store suppliers and builders, named as in Kafka Streams."""

    @staticmethod
    def persistent_key_value_store(name: str) -> KeyValueBytesStoreSupplier:
        """A RocksDB key-value store named `name`."""
        return KeyValueBytesStoreSupplier(name, True, RocksDBKeyValueBytesStore)

    @staticmethod
    def persistent_timestamped_key_value_store(name: str) -> KeyValueBytesStoreSupplier:
        """A RocksDB key-value store named `name` for values with their timestamps (use with
        `timestamped_key_value_store_builder`)."""
        return KeyValueBytesStoreSupplier(name, True, RocksDBKeyValueBytesStore)

    @staticmethod
    def persistent_versioned_key_value_store(
        name: str, history_retention: timedelta | int
    ) -> VersionedBytesStoreSupplier:
        """A RocksDB versioned store keeping `history_retention` of old values (KIP-889)."""
        return versioned_supplier(name, history_retention, persistent=True)

    @staticmethod
    def in_memory_versioned_key_value_store(
        name: str, history_retention: timedelta | int
    ) -> VersionedBytesStoreSupplier:
        """An in-memory versioned store keeping `history_retention` of old values."""
        return versioned_supplier(name, history_retention, persistent=False)

    @staticmethod
    def versioned_key_value_store_builder(
        supplier: VersionedBytesStoreSupplier, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None
    ) -> VersionedKeyValueStoreBuilder:
        """A builder of a versioned store from `supplier` with these serdes."""
        return VersionedKeyValueStoreBuilder(supplier, key_serde, value_serde)

    @staticmethod
    def in_memory_key_value_store(name: str) -> KeyValueBytesStoreSupplier:
        """An in-memory key-value store named `name` (restored from its changelog on start)."""
        return KeyValueBytesStoreSupplier(name, False, InMemoryKeyValueBytesStore)

    @staticmethod
    def key_value_store_builder(
        supplier: KeyValueBytesStoreSupplier, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None
    ) -> KeyValueStoreBuilder[Any, Any]:
        """A builder of a key-value store from `supplier` with these serdes; caching and logging are set on
        the builder."""
        return KeyValueStoreBuilder(supplier, key_serde, value_serde)

    @staticmethod
    def timestamped_key_value_store_builder(
        supplier: KeyValueBytesStoreSupplier, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None
    ) -> KeyValueStoreBuilder[Any, Any]:
        """A builder of a key-value store whose values keep their timestamps (`ValueAndTimestamp`)."""
        return KeyValueStoreBuilder(supplier, key_serde, value_serde, timestamped=True)


class ReadOnlyKeyValueView:
    """A read-only, plain-value view of a key-value store; timestamped values are unwrapped, which is
    what interactive queries and `TopologyTestDriver.get_key_value_store` hand to users."""

    def __init__(self, store: MeteredKeyValueStore[Any, Any]) -> None:
        self._store = store

    @property
    def name(self) -> str:
        return self._store.name

    @staticmethod
    def _plain(value: Any) -> Any:
        return value.value if isinstance(value, ValueAndTimestamp) else value

    def get(self, key: Any) -> Any:
        return self._plain(self._store.get(key))

    def range(self, from_key: Any, to_key: Any) -> Iterator[tuple[Any, Any]]:
        return ((k, self._plain(v)) for k, v in self._store.range(from_key, to_key))

    def reverse_range(self, from_key: Any, to_key: Any) -> Iterator[tuple[Any, Any]]:
        return ((k, self._plain(v)) for k, v in self._store.reverse_range(from_key, to_key))

    def all(self) -> Iterator[tuple[Any, Any]]:
        return ((k, self._plain(v)) for k, v in self._store.all())

    def reverse_all(self) -> Iterator[tuple[Any, Any]]:
        return ((k, self._plain(v)) for k, v in self._store.reverse_all())

    def prefix_scan(self, prefix: Any, prefix_key_serde: Serde[Any]) -> Iterator[tuple[Any, Any]]:
        return ((k, self._plain(v)) for k, v in self._store.prefix_scan(prefix, prefix_key_serde))

    def approximate_num_entries(self) -> int:
        return self._store.approximate_num_entries()

    # writes through the view are for tests that seed state, as Java's test driver allows; on a
    # timestamped store the value gets no timestamp (-1), as Java's KeyValueStoreFacade does
    def put(self, key: Any, value: Any) -> None:
        if isinstance(self._store.value_serde, ValueAndTimestampSerde):
            self._store.put(key, ValueAndTimestamp.make(value, -1))
        else:
            self._store.put(key, value)

    def delete(self, key: Any) -> Any:
        return self._plain(self._store.delete(key))

    def to_dict(self) -> dict[Any, Any]:
        return dict(self.all())
