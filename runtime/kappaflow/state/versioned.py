"""Versioned key-value stores (KIP-889): every value a key had within the history retention, each with the
time it became valid, so a lookup can ask "what was the value at time t".

Each version is its own row of the bytes store (RocksDB or memory, changelogged like any key-value
store): key `[4-byte key length][key][8-byte valid-from timestamp]`, value `0x00` for a tombstone or
`0x01` + the serialized value, so a key's versions are adjacent and ordered by time and the changelog
restores them row for row. Semantics follow Java's `VersionedKeyValueStore`: a put older than
`observed stream time - history retention` is not performed (`PUT_RETURN_CODE_NOT_PUT`); a put returns
`PUT_RETURN_CODE_VALID_TO_UNDEFINED` when it is the latest version, else the time its version ends;
`get(key, as_of)` answers `None` for times older than the history retention, except that the key's
latest version answers every lookup not older than it (it never expires). Old versions expire as Java's
do, a segment at a time (`default_segment_interval`: a version belongs to the segment of its end), so a
history query (`get_versions`) returns the versions that ended before the boundary while their segment
lives, as Java's does; they are deleted as the key is written, where Java drops a whole segment on its
next segment write, so the moment an expired version disappears can differ. The observed stream time is
kept in memory: after a restart, as-of lookups are not bounded until the first put.
"""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, TypeVar

from kappaflow.api.processor import to_millis
from kappaflow.api.serdes import Serde
from kappaflow.state.api import KeyValueBytesStore, StateStore, StoreContext
from kappaflow.state.kv_bytes import InMemoryKeyValueBytesStore, RocksDBKeyValueBytesStore
from kappaflow.state.kv_layers import ChangeLoggingKeyValueBytesStore
from kappaflow.state.metered import MeteredStoreBase

V = TypeVar("V")
PUT_RETURN_CODE_VALID_TO_UNDEFINED = -1
PUT_RETURN_CODE_NOT_PUT = -(1 << 63)
_LEN = struct.Struct(">i")
_TS = struct.Struct(">q")
CHANGELOG_ADDITIONAL_RETENTION_MS = 24 * 60 * 60 * 1000


@dataclass(frozen=True)
class VersionedRecord(Generic[V]):
    """One version: its value, the time it became valid and (unless it is the latest) when it ended."""

    value: V
    timestamp: int
    valid_to: int | None = None


@dataclass(frozen=True)
class VersionedBytesStoreSupplier:
    name: str
    history_retention_ms: int
    persistent: bool = True

    def get(self) -> KeyValueBytesStore:
        if self.persistent:
            return RocksDBKeyValueBytesStore(self.name)
        return InMemoryKeyValueBytesStore(self.name)


def versioned_supplier(
    name: str, history_retention: timedelta | int, persistent: bool
) -> VersionedBytesStoreSupplier:
    retention = to_millis(history_retention, "history retention")
    if retention < 0:
        raise ValueError(
            f"versioned store '{name}': history retention must not be negative, got {retention} ms"
        )
    return VersionedBytesStoreSupplier(name, retention, persistent)


def _row_key(key: bytes, timestamp: int) -> bytes:
    return _LEN.pack(len(key)) + key + _TS.pack(timestamp)


def _row_timestamp(row: bytes) -> int:
    return int(_TS.unpack(row[-8:])[0])


class VersionedKeyValueStore(MeteredStoreBase):
    """The typed versioned store processors use: `put(key, value, timestamp)`, `get(key[, as_of])`."""

    kind = "versioned store"

    def __init__(
        self,
        inner: KeyValueBytesStore,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        history_retention_ms: int,
    ) -> None:
        super().__init__(inner, key_serde, value_serde)
        self.history_retention_ms = history_retention_ms
        self.segment_interval_ms = default_segment_interval(history_retention_ms)
        self.observed_stream_time = -1

    def init(self, context: StoreContext, root: StateStore | None = None) -> None:
        self.key_serde, self.value_serde = self.resolve_serdes(context)
        self._topic = context.changelog_topic(self.name)
        self.inner.init(context, root or self)

    def set_flush_listener(self, listener: Any, send_old_values: bool) -> bool:
        return False  # never cached, as in Java

    def _versions(self, key: bytes) -> list[tuple[int, bytes]]:
        """The key's versions, oldest first: (valid-from, stored value)."""
        return [
            (_row_timestamp(row), value) for row, value in self.inner.prefix_scan(_LEN.pack(len(key)) + key)
        ]

    def _record(self, versions: list[tuple[int, bytes]], index: int) -> VersionedRecord[Any] | None:
        timestamp, stored = versions[index]
        if stored[:1] == b"\x00":
            return None
        valid_to = versions[index + 1][0] if index + 1 < len(versions) else None
        return VersionedRecord(self.value_serde.deserialize(self._topic, stored[1:]), timestamp, valid_to)  # type: ignore[union-attr]

    def put(self, key: Any, value: Any, timestamp: int) -> int:
        """Add the version `value` valid from `timestamp` (`None` is a tombstone); Java's return codes."""
        raw_key = self._k(key)
        self.observed_stream_time = max(self.observed_stream_time, timestamp)
        boundary = self.observed_stream_time - self.history_retention_ms
        if timestamp < boundary:
            return PUT_RETURN_CODE_NOT_PUT
        raw = self.value_serde.serialize(self._topic, value) if value is not None else None  # type: ignore[union-attr]
        self.inner.put(_row_key(raw_key, timestamp), b"\x00" if raw is None else b"\x01" + raw)
        versions = self._versions(raw_key)
        for expired in expired_versions([ts for ts, _ in versions], boundary, self.segment_interval_ms):
            self.inner.delete(_row_key(raw_key, expired))
        later = [ts for ts, _ in versions if ts > timestamp]
        return later[0] if later else PUT_RETURN_CODE_VALID_TO_UNDEFINED

    def delete(self, key: Any, timestamp: int) -> VersionedRecord[Any] | None:
        previous = self.get(key, timestamp)
        self.put(key, None, timestamp)
        return previous

    def get(self, key: Any, as_of_timestamp: int | None = None) -> VersionedRecord[Any] | None:
        """The latest version, or the one valid at `as_of_timestamp`; `None` when deleted, absent or
        older than the history retention. The latest version never expires: as Java's store, it answers
        any lookup not older than it, however far behind the history retention."""
        versions = self._versions(self._k(key))
        if as_of_timestamp is None or (versions and versions[-1][0] <= as_of_timestamp):
            return self._record(versions, len(versions) - 1) if versions else None
        if as_of_timestamp < self.observed_stream_time - self.history_retention_ms:
            return None
        valid = [i for i, (ts, _) in enumerate(versions) if ts <= as_of_timestamp]
        return self._record(versions, valid[-1]) if valid else None

    def get_versions(
        self, key: Any, from_time: int | None = None, to_time: int | None = None, ascending: bool = False
    ) -> list[VersionedRecord[Any]]:
        """Every version of `key` valid at some time in `[from_time, to_time]` (None: unbounded), newest
        first unless `ascending` (KIP-968's multi-versioned key query; `select_versions` decides)."""
        versions = self._versions(self._k(key))
        boundary = self.observed_stream_time - self.history_retention_ms
        # expired rows not yet deleted (the key was not written since): a prefix, hidden as Java's are once
        # another key's write has dropped their segment
        versions = versions[
            len(expired_versions([ts for ts, _ in versions], boundary, self.segment_interval_ms)) :
        ]
        chosen = select_versions([ts for ts, _ in versions], from_time, to_time, boundary)
        records = [self._record(versions, index) for index in chosen]
        found = [record for record in records if record is not None]
        return found if ascending else found[::-1]


def default_segment_interval(history_retention_ms: int) -> int:
    """The time span of one of Java's segments for this history retention (its store's default): old
    versions expire a segment at a time, so a history query may still see some ended before the boundary."""
    for limit, divisor, floor in ((60_000, 3, 2_000), (300_000, 5, 20_000), (3_600_000, 12, 60_000)):
        if history_retention_ms <= limit:
            return max(history_retention_ms // divisor, floor)
    return max(history_retention_ms // 24, 300_000)


def expired_versions(valid_from: list[int], boundary: int, segment_interval_ms: int) -> list[int]:
    """The versions (valid-from times, oldest first) to delete: those whose end - the next version's start
    - falls in a segment wholly older than the retention boundary, as Java files a version under the
    segment of its end and drops whole segments. The latest version never expires."""
    if boundary < 0:
        return []
    live = boundary // segment_interval_ms
    return [ts for ts, end in itertools.pairwise(valid_from) if end // segment_interval_ms < live]


def select_versions(
    valid_from: list[int], from_time: int | None, to_time: int | None, boundary: int
) -> list[int]:
    """Which of a key's versions (their valid-from times, oldest first) a history query over `[from_time,
    to_time]` returns, by index, oldest first - Java's rule: a version valid from `f` until `t` (exclusive;
    the latest one: forever) overlaps the range when `f <= to_time` and `t > from_time`. When the whole
    range lies before the history retention's `boundary` only the latest version is considered (it never
    expires); older rows may still be stored there, but Java answers from its latest-value store alone.
    Tombstones are filtered out by the caller (they are not versions to return)."""
    low = -(1 << 63) if from_time is None else from_time
    high = (1 << 63) - 1 if to_time is None else to_time
    last = len(valid_from) - 1
    candidates = [last] if last >= 0 and high < boundary else range(len(valid_from))
    return [i for i in candidates if valid_from[i] <= high and (i == last or valid_from[i + 1] > low)]


@dataclass
class VersionedKeyValueStoreBuilder:
    """Builds a changelogged versioned store; the changelog keeps rows at least the history retention
    (`min.compaction.lag.ms`, as Java sets it)."""

    supplier: VersionedBytesStoreSupplier
    key_serde: Serde[Any] | None
    value_serde: Serde[Any] | None
    logging_enabled: bool = True
    extra_log_config: dict[str, str] = field(default_factory=dict)
    caching_enabled: bool = False
    store_kind: str = "key_value"

    @property
    def name(self) -> str:
        return self.supplier.name

    @property
    def persistent(self) -> bool:
        return self.supplier.persistent

    @property
    def log_config(self) -> dict[str, str]:
        lag = self.supplier.history_retention_ms + CHANGELOG_ADDITIONAL_RETENTION_MS
        return {"min.compaction.lag.ms": str(lag), **self.extra_log_config}

    def with_logging_disabled(self) -> VersionedKeyValueStoreBuilder:
        self.logging_enabled = False
        return self

    def build(self) -> VersionedKeyValueStore:
        inner = self.supplier.get()
        if self.logging_enabled:
            inner = ChangeLoggingKeyValueBytesStore(inner)
        return VersionedKeyValueStore(
            inner, self.key_serde, self.value_serde, self.supplier.history_retention_ms
        )
