"""Window stores: Kafka Streams' `WindowStore`, laid over the same key-value layers as every store.

A window store is a key-value bytes store whose keys are Java's `WindowKeySchema` layout,
`[key bytes][8-byte window start, big-endian][4-byte sequence number]`, so the changelog records are the
bytes Java writes and either backend (memory or RocksDB) orders a key's windows by start time. Reusing
the key-value layers gives window stores the same changelogging (timestamped values go to the changelog
as plain value + record time), caching (one update per window per commit) and restore path for free.

Why not time segments: Java drops whole RocksDB segments to expire windows. Here expiry is by stream
time, as Java defines it: a put older than `observed stream time - retention` is skipped, fetches never
return expired windows, and every `segment_interval` of stream time a purge deletes expired windows from
the innermost store (not through the changelog: the changelog topic expires them with `retention.ms`,
which `log_config` sets together with `cleanup.policy=compact,delete`).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kappaflow.api.serdes import Serde
from kappaflow.api.windows import Window, Windowed
from kappaflow.state.api import KeyValueBytesStore, RecordContext, StateStore, StoreContext
from kappaflow.state.builders import KeyValueBytesStoreSupplier
from kappaflow.state.kv_bytes import InMemoryKeyValueBytesStore, RocksDBKeyValueBytesStore
from kappaflow.state.kv_layers import CachingKeyValueStore, ChangeLoggingKeyValueBytesStore, find_layer
from kappaflow.state.metered import MeteredStoreBase
from kappaflow.state.timestamped import ValueAndTimestamp, ValueAndTimestampSerde

log = logging.getLogger(__name__)

_SUFFIX = struct.Struct(">qi")
SUFFIX_LEN = _SUFFIX.size  # 12
MIN_SEQ, MAX_SEQ = 0, 0x7FFFFFFF
# Java keeps changelog records this long past the store's retention (windowstore.changelog.additional...)
CHANGELOG_ADDITIONAL_RETENTION_MS = 24 * 60 * 60 * 1000


def innermost(store: Any) -> Any:
    while getattr(store, "inner", None) is not None:
        store = store.inner
    return store


def window_key(key: bytes, start: int, seq: int = 0) -> bytes:
    return key + _SUFFIX.pack(start, seq)


def split_window_key(raw: bytes) -> tuple[bytes, int, int]:
    start, seq = _SUFFIX.unpack_from(raw, len(raw) - SUFFIX_LEN)
    return raw[:-SUFFIX_LEN], start, seq


def windowed_log_config(retention_ms: int, extra: dict[str, str]) -> dict[str, str]:
    config = {
        "cleanup.policy": "compact,delete",
        "retention.ms": str(retention_ms + CHANGELOG_ADDITIONAL_RETENTION_MS),
    }
    config.update(extra)
    return config


class MeteredWindowStore(MeteredStoreBase):
    """The typed window store processors and queries use. Values are `ValueAndTimestamp` when the store
    is timestamped (every DSL window store is), plain otherwise."""

    kind = "window store"

    def __init__(
        self,
        inner: KeyValueBytesStore,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        window_size: int,
        retention_ms: int,
        retain_duplicates: bool,
        timestamped: bool,
    ) -> None:
        super().__init__(inner, key_serde, value_serde)
        self.window_size = window_size
        self.retention_ms = retention_ms
        self.retain_duplicates = retain_duplicates
        self.timestamped = timestamped
        self.segment_interval = max(retention_ms // 2, 60_000)
        self.observed_stream_time = -1
        self._last_purge_segment = -1
        self._seq = 0
        self._context: StoreContext | None = None
        self._caching: CachingKeyValueStore | None = None

    def init(self, context: StoreContext, root: StateStore | None = None) -> None:
        key_serde, value_serde = self.resolve_serdes(context)
        self.key_serde = key_serde
        self.value_serde = ValueAndTimestampSerde(value_serde) if self.timestamped else value_serde
        self._topic = context.changelog_topic(self.name)
        self._context = context
        self.inner.init(context, root or self)
        caching = find_layer(self.inner, CachingKeyValueStore)
        self._caching = caching if caching is not None and caching.caching else None
        if self._caching is not None:
            self._caching.underlying_live = self._live

    # ----------------------------------------------------------------- serdes
    def _dv(self, raw: bytes | None) -> Any:
        return self.value_serde.deserialize(self._topic, raw)  # type: ignore[union-attr]

    def _window(self, start: int) -> Window:
        return Window(start, start + self.window_size)

    # ----------------------------------------------------------------- writes
    def put(self, key: Any, value: Any, window_start: int) -> None:
        """Write (or with `None`, delete) the value of `key`'s window starting at `window_start`.
        Writes to expired windows are skipped, as Java's segmented stores skip them."""
        self.observed_stream_time = max(self.observed_stream_time, window_start)
        if window_start <= self.observed_stream_time - self.retention_ms:
            log.debug("window store %s: skipping write to expired window at %d", self.name, window_start)
            if self._context is not None:
                self._context.metrics.increment("expired-window-record-drop-total", store=self.name)
            return
        seq = 0
        if self.retain_duplicates:
            if value is None:
                return
            self._seq = (self._seq + 1) & MAX_SEQ
            seq = self._seq
        raw_value = self.value_serde.serialize(self._topic, value)  # type: ignore[union-attr]
        self.inner.put(window_key(self._k(key), window_start, seq), raw_value)
        self._maybe_purge()

    def _maybe_purge(self) -> None:
        segment = self.observed_stream_time // self.segment_interval
        if segment <= self._last_purge_segment:
            return
        self._last_purge_segment = segment
        limit = self.observed_stream_time - self.retention_ms
        if limit < 0:
            return
        bottom = innermost(self.inner)
        expired = [k for k, _ in bottom.all() if split_window_key(k)[1] <= limit]
        if expired:
            bottom.put_all([(k, None) for k in expired])

    # ----------------------------------------------------------------- reads
    # Reads hide windows that started before `stream time - retention + 1`, except those still in the
    # record cache: Java's caching window store merges its cache, filtered by the requested times only,
    # with the underlying store, which alone applies retention. Matching it keeps a cached aggregation
    # exactly Java's (docs/semantics.md, "Expired windows in the record cache").
    def _earliest(self, time_from: int) -> int:
        # windows never start before 0; a negative bound would sort after positive ones as bytes
        return max(0, time_from, self.observed_stream_time - self.retention_ms + 1)

    def _live(self, raw: bytes) -> bool:
        return split_window_key(raw)[1] > self.observed_stream_time - self.retention_ms

    def _visible(self, raw: bytes, start: int) -> bool:
        live = start > self.observed_stream_time - self.retention_ms
        return live or (self._caching is not None and self._caching.holds(raw))

    def _scan_from(self, time_from: int) -> int:
        return max(0, time_from) if self._caching is not None else self._earliest(time_from)

    def _key_scan(self, key: Any, time_from: int, time_to: int, backward: bool) -> Iterator[tuple[int, Any]]:
        raw_key = self._k(key)
        lo = self._scan_from(time_from)
        if lo > time_to:
            return
        lower, upper = window_key(raw_key, lo, MIN_SEQ), window_key(raw_key, time_to, MAX_SEQ)
        scan = self.inner.reverse_range(lower, upper) if backward else self.inner.range(lower, upper)
        n = len(raw_key)
        for k, v in scan:
            if len(k) == n + SUFFIX_LEN:
                start = split_window_key(k)[1]
                if self._visible(k, start):
                    yield start, self._dv(v)

    def fetch(self, key: Any, time_from: int, time_to: int | None = None) -> Any:
        """`fetch(key, start)` -> the value of one window (or None); `fetch(key, from, to)` -> iterator of
        (window start, value) for windows starting in [from, to], oldest first."""
        if time_to is None:
            for _start, value in self._key_scan(key, time_from, time_from, False):
                return value
            return None
        return self._key_scan(key, time_from, time_to, False)

    def backward_fetch(self, key: Any, time_from: int, time_to: int) -> Iterator[tuple[int, Any]]:
        return self._key_scan(key, time_from, time_to, True)

    def get(self, windowed: Windowed[Any]) -> Any:
        """The value of a windowed key: what a windowed KTable's value getter needs."""
        return self.fetch(windowed.key, windowed.window.start)

    def _scan_all(
        self, scan: Iterator[tuple[bytes, bytes]], time_from: int, time_to: int
    ) -> Iterator[tuple[Windowed[Any], Any]]:
        lo = self._scan_from(time_from)
        for raw, value in scan:
            key, start, _ = split_window_key(raw)
            if lo <= start <= time_to and self._visible(raw, start):
                yield Windowed(self._dk(key), self._window(start)), self._dv(value)

    def fetch_range(
        self, key_from: Any, key_to: Any, time_from: int, time_to: int
    ) -> Iterator[tuple[Windowed[Any], Any]]:
        lo_key = None if key_from is None else self._k(key_from)
        hi_key = None if key_to is None else self._k(key_to)
        lower = None if lo_key is None else window_key(lo_key, self._scan_from(time_from), MIN_SEQ)
        upper = None if hi_key is None else window_key(hi_key, time_to, MAX_SEQ)
        for windowed, value in self._scan_all(self.inner.range(lower, upper), time_from, time_to):
            raw = self._k(windowed.key)
            if (lo_key is None or raw >= lo_key) and (hi_key is None or raw <= hi_key):
                yield windowed, value

    def fetch_all(self, time_from: int, time_to: int) -> Iterator[tuple[Windowed[Any], Any]]:
        return self._scan_all(self.inner.all(), time_from, time_to)

    def backward_fetch_all(self, time_from: int, time_to: int) -> Iterator[tuple[Windowed[Any], Any]]:
        return self._scan_all(self.inner.reverse_all(), time_from, time_to)

    def all(self) -> Iterator[tuple[Windowed[Any], Any]]:
        return self.fetch_all(-(1 << 62), 1 << 62)

    def backward_all(self) -> Iterator[tuple[Windowed[Any], Any]]:
        return self.backward_fetch_all(-(1 << 62), 1 << 62)

    def set_flush_listener(
        self, listener: Callable[[Windowed[Any], Any, Any, RecordContext], None], send_old_values: bool
    ) -> bool:
        caching = find_layer(self.inner, CachingKeyValueStore)
        if caching is None:
            return False

        def on_flush(raw: bytes, new: bytes | None, old: bytes | None, context: RecordContext) -> None:
            key, start, _ = split_window_key(raw)
            listener(Windowed(self._dk(key), self._window(start)), self._dv(new), self._dv(old), context)

        return caching.set_flush_listener(on_flush, send_old_values)


@dataclass
class WindowStoreBuilder:
    """Builds one window store per task; the changelog is `compact,delete` with the store's retention."""

    supplier: KeyValueBytesStoreSupplier
    key_serde: Serde[Any] | None
    value_serde: Serde[Any] | None
    window_size: int
    retention_ms: int
    retain_duplicates: bool = False
    timestamped: bool = True
    caching_enabled: bool = False
    logging_enabled: bool = True
    extra_log_config: dict[str, str] = field(default_factory=dict)
    store_kind: str = "window"

    @property
    def name(self) -> str:
        return self.supplier.name

    @property
    def persistent(self) -> bool:
        return self.supplier.persistent

    @property
    def log_config(self) -> dict[str, str]:
        return windowed_log_config(self.retention_ms, self.extra_log_config)

    def with_caching_enabled(self) -> WindowStoreBuilder:
        self.caching_enabled = True
        return self

    def with_caching_disabled(self) -> WindowStoreBuilder:
        self.caching_enabled = False
        return self

    def with_logging_enabled(self, config: dict[str, str] | None = None) -> WindowStoreBuilder:
        self.logging_enabled = True
        self.extra_log_config = dict(config or {})
        return self

    def with_logging_disabled(self) -> WindowStoreBuilder:
        self.logging_enabled = False
        return self

    def build(self) -> MeteredWindowStore:
        inner: KeyValueBytesStore = self.supplier.get(self.timestamped)
        if self.logging_enabled:
            inner = ChangeLoggingKeyValueBytesStore(inner, timestamped=self.timestamped)
        # duplicates have distinct sequence numbers per put: caching them would dedupe nothing (Java
        # disables caching for such stores too)
        if self.caching_enabled and not self.retain_duplicates:
            inner = CachingKeyValueStore(inner)
        return MeteredWindowStore(
            inner,
            self.key_serde,
            self.value_serde,
            self.window_size,
            self.retention_ms,
            self.retain_duplicates,
            self.timestamped,
        )


def window_bytes_supplier(name: str, persistent: bool) -> KeyValueBytesStoreSupplier:
    factory = RocksDBKeyValueBytesStore if persistent else InMemoryKeyValueBytesStore
    return KeyValueBytesStoreSupplier(name, persistent, factory)


class ReadOnlyWindowView:
    """A plain-value view of a window store (timestamps unwrapped), as the test driver and interactive
    queries hand out."""

    def __init__(self, store: MeteredWindowStore) -> None:
        self._store = store

    @property
    def name(self) -> str:
        return self._store.name

    @staticmethod
    def _plain(value: Any) -> Any:
        return value.value if isinstance(value, ValueAndTimestamp) else value

    def fetch(self, key: Any, time_from: int, time_to: int | None = None) -> Any:
        if time_to is None:
            return self._plain(self._store.fetch(key, time_from))
        return [(s, self._plain(v)) for s, v in self._store.fetch(key, time_from, time_to)]

    def backward_fetch(self, key: Any, time_from: int, time_to: int) -> list[tuple[int, Any]]:
        return [(s, self._plain(v)) for s, v in self._store.backward_fetch(key, time_from, time_to)]

    def fetch_range(
        self, key_from: Any, key_to: Any, time_from: int, time_to: int
    ) -> list[tuple[Windowed[Any], Any]]:
        return [(w, self._plain(v)) for w, v in self._store.fetch_range(key_from, key_to, time_from, time_to)]

    def fetch_all(self, time_from: int, time_to: int) -> list[tuple[Windowed[Any], Any]]:
        return [(w, self._plain(v)) for w, v in self._store.fetch_all(time_from, time_to)]

    def backward_fetch_all(self, time_from: int, time_to: int) -> list[tuple[Windowed[Any], Any]]:
        return [(w, self._plain(v)) for w, v in self._store.backward_fetch_all(time_from, time_to)]

    def all(self) -> list[tuple[Windowed[Any], Any]]:
        return [(w, self._plain(v)) for w, v in self._store.all()]

    def backward_all(self) -> list[tuple[Windowed[Any], Any]]:
        return [(w, self._plain(v)) for w, v in self._store.backward_all()]

    def put(self, key: Any, value: Any, window_start: int) -> None:
        self._store.put(key, value, window_start)
