"""Session stores: Kafka Streams' `SessionStore` over the same key-value layers as every store.

Keys use Java's SessionKeySchema layout, `[key bytes][8-byte session end][8-byte session start]`, so a
key's sessions sort by end time and the changelog holds Java's bytes. Values are the plain aggregate
(session stores are not timestamped in Kafka Streams: a session's result time is its end). Expiry works
as in window stores: sessions ending more than `retention` (inactivity gap + grace) before the observed
stream time are hidden on read and purged from the innermost store periodically; a write is skipped
only once its whole segment has expired (Java's segmented stores).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kappaflow.api.serdes import Serde
from kappaflow.api.windows import Window, Windowed
from kappaflow.state.api import KeyValueBytesStore, RecordContext, StateStore, StoreContext
from kappaflow.state.builders import KeyValueBytesStoreSupplier
from kappaflow.state.kv_layers import CachingKeyValueStore, ChangeLoggingKeyValueBytesStore, find_layer
from kappaflow.state.metered import MeteredStoreBase
from kappaflow.state.timestamped import ValueAndTimestamp
from kappaflow.state.window_store import innermost, windowed_log_config

_SUFFIX = struct.Struct(">qq")
SUFFIX_LEN = _SUFFIX.size
MAX_TIME = (1 << 63) - 1


def session_key(key: bytes, start: int, end: int) -> bytes:
    return key + _SUFFIX.pack(end, start)


def split_session_key(raw: bytes) -> tuple[bytes, int, int]:
    end, start = _SUFFIX.unpack_from(raw, len(raw) - SUFFIX_LEN)
    return raw[:-SUFFIX_LEN], start, end


class MeteredSessionStore(MeteredStoreBase):
    kind = "session store"

    def __init__(
        self, inner: KeyValueBytesStore, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None,
        retention_ms: int,
    ) -> None:  # fmt: skip
        super().__init__(inner, key_serde, value_serde)
        self.retention_ms = retention_ms
        self.segment_interval = max(retention_ms // 2, 60_000)
        self.observed_stream_time = -1
        self._last_purge_segment = -1
        self._caching: CachingKeyValueStore | None = None

    def init(self, context: StoreContext, root: StateStore | None = None) -> None:
        self.key_serde, self.value_serde = self.resolve_serdes(context)
        self._topic = context.changelog_topic(self.name)
        self.inner.init(context, root or self)
        caching = find_layer(self.inner, CachingKeyValueStore)
        self._caching = caching if caching is not None and caching.caching else None
        if self._caching is not None:
            self._caching.underlying_live = self._live

    def _decode(self, raw: bytes, value: bytes | None) -> tuple[Windowed[Any], Any]:
        key, start, end = split_session_key(raw)
        return (
            Windowed(self.key_serde.deserialize(self._topic, key), Window(start, end)),  # type: ignore[union-attr]
            self.value_serde.deserialize(self._topic, value),  # type: ignore[union-attr]
        )

    def put(self, session: Windowed[Any], aggregate: Any) -> None:
        end = session.window.end
        self.observed_stream_time = max(self.observed_stream_time, end)
        # written while its segment is live, as Java's segmented store does: a session ending exactly at
        # the close time (stream time - grace - gap) is still accepted by the aggregation and stored,
        # though reads (which hide sessions ending before stream time - retention + 1) no longer see it
        interval = self.segment_interval
        if end // interval < (self.observed_stream_time - self.retention_ms) // interval:
            return
        raw = session_key(self._k(session.key), session.window.start, end)
        self.inner.put(raw, self.value_serde.serialize(self._topic, aggregate))  # type: ignore[union-attr]
        self._maybe_purge()

    def remove(self, session: Windowed[Any]) -> None:
        self.inner.delete(session_key(self._k(session.key), session.window.start, session.window.end))

    def _maybe_purge(self) -> None:
        segment = self.observed_stream_time // self.segment_interval
        if segment <= self._last_purge_segment:
            return
        self._last_purge_segment = segment
        limit = self.observed_stream_time - self.retention_ms
        bottom = innermost(self.inner)
        expired = [k for k, _ in bottom.all() if split_session_key(k)[2] <= limit]
        if expired:
            bottom.put_all([(k, None) for k in expired])

    def find_sessions(
        self, key: Any, earliest_session_end: int, latest_session_start: int, backward: bool = False
    ) -> Iterator[tuple[Windowed[Any], Any]]:
        """Sessions of `key` with end >= earliest_session_end and start <= latest_session_start."""
        raw_key = self._k(key)
        # times are never negative: a negative bound would sort after every positive one as bytes
        live_end = max(0, earliest_session_end, self.observed_stream_time - self.retention_ms + 1)
        # Java's caching session store merges its cache - filtered by the requested times only - with
        # the underlying store, which alone hides expired sessions: a session still cached is found
        # (and merged) past retention (docs/semantics.md, "Expired windows in the record cache")
        lower_end = max(0, earliest_session_end) if self._caching is not None else live_end
        lower = session_key(raw_key, 0, lower_end)
        upper = session_key(raw_key, MAX_TIME, MAX_TIME)
        scan = self.inner.reverse_range(lower, upper) if backward else self.inner.range(lower, upper)
        n = len(raw_key)
        for raw, value in scan:
            if len(raw) != n + SUFFIX_LEN:
                continue
            _, start, end = split_session_key(raw)
            if start <= latest_session_start and end >= lower_end and (end >= live_end or self._cached(raw)):
                yield self._decode(raw, value)

    def find_sessions_ending(self, earliest_end: int, latest_end: int) -> list[tuple[Windowed[Any], Any]]:
        """Every key's sessions ending in [earliest_end, latest_end], by end, key bytes, then start (Java's
        time-ordered session store, read by emit-on-window-close). Closed sessions not yet purged are
        found, as Java finds them in a segment still live. A full scan: emit-final stores are uncached."""
        found = []
        for raw, value in self.inner.all():
            key, start, end = split_session_key(raw)
            if earliest_end <= end <= latest_end and value is not None:
                found.append(((end, key, start), raw, value))
        found.sort(key=lambda item: item[0])
        return [self._decode(raw, value) for _, raw, value in found]

    def _live(self, raw: bytes) -> bool:
        return split_session_key(raw)[2] > self.observed_stream_time - self.retention_ms

    def _cached(self, raw: bytes) -> bool:
        return self._caching is not None and self._caching.holds(raw)

    def fetch_session(self, key: Any, start: int, end: int) -> Any:
        raw_key = session_key(self._k(key), start, end)
        if end <= self.observed_stream_time - self.retention_ms and not self._cached(raw_key):
            return None
        raw = self.inner.get(raw_key)
        return None if raw is None else self.value_serde.deserialize(self._topic, raw)  # type: ignore[union-attr]

    def get(self, windowed: Windowed[Any]) -> ValueAndTimestamp[Any] | None:
        """A session table's value getter: the aggregate with the session end as its timestamp."""
        value = self.fetch_session(windowed.key, windowed.window.start, windowed.window.end)
        return ValueAndTimestamp.make(value, windowed.window.end)

    def fetch(self, key: Any) -> Iterator[tuple[Windowed[Any], Any]]:
        return self.find_sessions(key, 0, MAX_TIME)

    def backward_fetch(self, key: Any) -> Iterator[tuple[Windowed[Any], Any]]:
        return self.find_sessions(key, 0, MAX_TIME, backward=True)

    def all(self) -> Iterator[tuple[Windowed[Any], Any]]:
        limit = self.observed_stream_time - self.retention_ms
        return (self._decode(k, v) for k, v in self.inner.all() if split_session_key(k)[2] > limit)

    def set_flush_listener(
        self, listener: Callable[[Windowed[Any], Any, Any, RecordContext], None], send_old_values: bool
    ) -> bool:
        """With caching, session updates reach the DSL forwarder as (value, session end) pairs."""
        caching = find_layer(self.inner, CachingKeyValueStore)
        if caching is None:
            return False

        def on_flush(raw: bytes, new: bytes | None, old: bytes | None, context: RecordContext) -> None:
            windowed, new_value = self._decode(raw, new)
            old_value = None if old is None else self.value_serde.deserialize(self._topic, old)  # type: ignore[union-attr]
            end = windowed.window.end
            listener(
                windowed,
                ValueAndTimestamp.make(new_value, end),
                ValueAndTimestamp.make(old_value, end),
                context,
            )

        return caching.set_flush_listener(on_flush, send_old_values)


@dataclass
class SessionStoreBuilder:
    supplier: KeyValueBytesStoreSupplier
    key_serde: Serde[Any] | None
    value_serde: Serde[Any] | None
    retention_ms: int
    caching_enabled: bool = False
    logging_enabled: bool = True
    extra_log_config: dict[str, str] = field(default_factory=dict)
    store_kind: str = "session"

    @property
    def name(self) -> str:
        return self.supplier.name

    @property
    def persistent(self) -> bool:
        return self.supplier.persistent

    @property
    def log_config(self) -> dict[str, str]:
        return windowed_log_config(self.retention_ms, self.extra_log_config)

    def build(self) -> MeteredSessionStore:
        inner: KeyValueBytesStore = self.supplier.get(False)
        if self.logging_enabled:
            inner = ChangeLoggingKeyValueBytesStore(inner)
        if self.caching_enabled:
            inner = CachingKeyValueStore(inner)
        return MeteredSessionStore(inner, self.key_serde, self.value_serde, self.retention_ms)


class ReadOnlySessionView:
    def __init__(self, store: MeteredSessionStore) -> None:
        self._store = store

    def fetch(self, key: Any) -> list[tuple[Windowed[Any], Any]]:
        return list(self._store.fetch(key))

    def backward_fetch(self, key: Any) -> list[tuple[Windowed[Any], Any]]:
        return list(self._store.backward_fetch(key))

    def find_sessions(
        self, key: Any, earliest_end: int, latest_start: int
    ) -> list[tuple[Windowed[Any], Any]]:
        return list(self._store.find_sessions(key, earliest_end, latest_start))

    def fetch_session(self, key: Any, start: int, end: int) -> Any:
        return self._store.fetch_session(key, start, end)

    def all(self) -> list[tuple[Windowed[Any], Any]]:
        return list(self._store.all())
