"""Options objects of the DSL, named as in Kafka Streams: Materialized, Consumed, Produced, Grouped,
Repartitioned, Named. Each is a plain dataclass with the `with_*`/`as_` constructors Java users expect."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, Literal

from kappaflow.api.offset_reset import AutoOffsetReset
from kappaflow.api.processor import to_millis
from kappaflow.api.serdes import Serde
from kappaflow.api.time import TimestampExtractor
from kappaflow.state.ttl import DEFAULT_MAX_EXPIRED_PER_COMMIT, StoreTtl, TtlClock
from kappaflow.state.versioned import VersionedBytesStoreSupplier
from kappaflow.topology.nodes import StreamPartitioner

StoreType = Literal["rocksdb", "memory"]


@dataclass(frozen=True)
class Materialized:
    """How a DSL store is built: name, serdes, caching, logging, backend, retention (windowed)."""

    name: str | None = None
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    caching: bool = True
    logging: bool = True
    store_type: StoreType = "rocksdb"
    log_config: dict[str, str] = field(default_factory=dict)
    retention_ms: int | None = None
    versioned: VersionedBytesStoreSupplier | None = None
    ttl: StoreTtl | None = None

    @staticmethod
    def as_(name_or_supplier: str | VersionedBytesStoreSupplier) -> Materialized:
        """`as_("name")`, or `as_(Stores.persistent_versioned_key_value_store(name, retention))` for a
        versioned table (KIP-914; `builder.table` only)."""
        if isinstance(name_or_supplier, VersionedBytesStoreSupplier):
            return Materialized(name=name_or_supplier.name, caching=False, versioned=name_or_supplier)
        return Materialized(name=name_or_supplier)

    @staticmethod
    def with_(key_serde: Serde[Any] | None, value_serde: Serde[Any] | None) -> Materialized:
        """Materialize with these key and value serdes."""
        return Materialized(key_serde=key_serde, value_serde=value_serde)

    def with_key_serde(self, serde: Serde[Any]) -> Materialized:
        """Use this key serde for the store and its changelog."""
        return replace(self, key_serde=serde)

    def with_value_serde(self, serde: Serde[Any]) -> Materialized:
        """Use this value serde for the store and its changelog."""
        return replace(self, value_serde=serde)

    def with_caching_enabled(self) -> Materialized:
        """Put the record cache in front of the store (the default): updates of a key are folded until the
        next commit or eviction."""
        return replace(self, caching=True)

    def with_caching_disabled(self) -> Materialized:
        """No record cache: every update is written to the store and forwarded downstream."""
        return replace(self, caching=False)

    def with_logging_enabled(self, config: dict[str, str] | None = None) -> Materialized:
        """Back the store with a changelog topic (the default), with optional topic configs."""
        return replace(self, logging=True, log_config=dict(config or {}))

    def with_logging_disabled(self) -> Materialized:
        """No changelog topic: the store is not restored after a failure or move."""
        return replace(self, logging=False)

    def with_store_type(self, store_type: StoreType) -> Materialized:
        """Keep the store in RocksDB (`rocksdb`, the default) or in memory (`memory`)."""
        return replace(self, store_type=store_type)

    def with_retention(self, retention_ms: int) -> Materialized:
        """How long a windowed store keeps windows, in milliseconds (at least the window size plus grace)."""
        return replace(self, retention_ms=retention_ms)

    def with_ttl(
        self,
        ttl: timedelta | int,
        *,
        clock: TtlClock = "stream_time",
        emit_tombstones: bool = False,
        max_expired_per_commit: int = DEFAULT_MAX_EXPIRED_PER_COMMIT,
    ) -> Materialized:
        """Expire a key-value store's entries not written for `ttl` (Kafka Streams has no equivalent,
        KAFKA-4273): by stream time (the default, replayable) or the wall clock (`clock="wall_clock"`),
        at most `max_expired_per_commit` per commit, each with a changelog tombstone. With
        `emit_tombstones` a table also forwards a tombstone downstream, so joins and sinks see the
        expiry. Key-value stores only: a windowed store expires by its retention."""
        return replace(self, ttl=StoreTtl.of(ttl, clock, emit_tombstones, max_expired_per_commit))

    @staticmethod
    def of(value: Materialized | str | None) -> Materialized:
        """A Materialized from what DSL calls accept: a Materialized, a store name, or None (defaults)."""
        if value is None:
            return Materialized()
        if isinstance(value, str):
            return Materialized(name=value)
        if not isinstance(value, Materialized):
            raise TypeError(f"materialized must be a store name or Materialized, got {value!r}")
        return value


@dataclass(frozen=True)
class Joined:
    """Options of a stream-table join; `grace_period_ms` (KIP-923) buffers stream records that long so
    late table updates are seen (the table must be versioned)."""

    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    other_value_serde: Serde[Any] | None = None
    name: str | None = None
    grace_period_ms: int | None = None

    @staticmethod
    def with_(
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        other_value_serde: Serde[Any] | None = None,
        *,
        grace_period: timedelta | int | None = None,
    ) -> Joined:
        grace = None if grace_period is None else _grace(grace_period)
        return Joined(key_serde, value_serde, other_value_serde, grace_period_ms=grace)

    @staticmethod
    def as_(name: str) -> Joined:
        return Joined(name=name)

    @staticmethod
    def grace_period(grace_period: timedelta | int) -> Joined:
        """Java's static `Joined.gracePeriod(Duration)`: only a grace period."""
        return Joined(grace_period_ms=_grace(grace_period))

    def with_grace_period(self, grace_period: timedelta | int) -> Joined:
        """Java's `withGracePeriod`: these options with a grace period, so
        `Joined.as_("j").with_grace_period(10)` keeps the name."""
        return replace(self, grace_period_ms=_grace(grace_period))

    def with_name(self, name: str) -> Joined:
        return replace(self, name=name)


def _grace(grace_period: timedelta | int) -> int:
    millis = to_millis(grace_period, "grace period")
    if millis < 0:
        raise ValueError(f"Joined: the grace period must not be negative, got {millis} ms")
    return millis


@dataclass(frozen=True)
class Consumed:
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    timestamp_extractor: TimestampExtractor | None = None
    name: str | None = None
    offset_reset: AutoOffsetReset | None = None

    @staticmethod
    def with_(key_serde: Serde[Any] | None, value_serde: Serde[Any] | None) -> Consumed:
        return Consumed(key_serde, value_serde)

    def with_offset_reset_policy(self, policy: AutoOffsetReset) -> Consumed:
        """KIP-1106: where this source starts on partitions its group never committed."""
        if not isinstance(policy, AutoOffsetReset):
            raise TypeError(f"Consumed.with_offset_reset_policy: expected an AutoOffsetReset, got {policy!r}")
        return replace(self, offset_reset=policy)


@dataclass(frozen=True)
class Produced:
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    partitioner: StreamPartitioner | None = None
    name: str | None = None

    @staticmethod
    def with_(key_serde: Serde[Any] | None, value_serde: Serde[Any] | None) -> Produced:
        return Produced(key_serde, value_serde)


@dataclass(frozen=True)
class Grouped:
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    name: str | None = None

    @staticmethod
    def with_(key_serde: Serde[Any] | None, value_serde: Serde[Any] | None) -> Grouped:
        return Grouped(key_serde, value_serde)

    @staticmethod
    def as_(name: str) -> Grouped:
        return Grouped(name=name)


@dataclass(frozen=True)
class Repartitioned:
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    name: str | None = None
    number_of_partitions: int | None = None
    partitioner: StreamPartitioner | None = None

    @staticmethod
    def as_(name: str) -> Repartitioned:
        return Repartitioned(name=name)

    def with_number_of_partitions(self, n: int) -> Repartitioned:
        return replace(self, number_of_partitions=n)


@dataclass(frozen=True)
class Named:
    name: str

    @staticmethod
    def as_(name: str) -> Named:
        return Named(name)
