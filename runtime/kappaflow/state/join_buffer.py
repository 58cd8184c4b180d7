"""The stream-side buffer of a stream-table join with a grace period (KIP-923).

Stream records wait here until stream time passes their timestamp plus the grace period, so a table
update arriving a little late (out of order) is still seen by the join, which reads the versioned table
as of each record's time. As Java's `RocksDBTimeOrderedKeyValueBuffer`: every record is kept (several per
key), rows are `[8-byte timestamp][key][4-byte sequence]` so eviction runs in time order (then key bytes,
then arrival), the value carries the record's headers, and the bytes store is changelogged so a restarted
task finds its waiting records again.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kappaflow.api.record import Headers
from kappaflow.api.serdes import Serde
from kappaflow.state.api import KeyValueBytesStore, StateStore, StoreContext
from kappaflow.state.kv_bytes import RocksDBKeyValueBytesStore
from kappaflow.state.kv_layers import ChangeLoggingKeyValueBytesStore
from kappaflow.state.metered import MeteredStoreBase

_TS = struct.Struct(">q")
_INT = struct.Struct(">i")


def encode_headers(headers: Headers) -> bytes:
    out = [_INT.pack(len(list(headers)))]
    for key, value in headers:
        raw_key = key.encode("utf-8")
        out += [
            _INT.pack(len(raw_key)),
            raw_key,
            _INT.pack(-1 if value is None else len(value)),
            value or b"",
        ]
    return b"".join(out)


def decode_headers(raw: bytes) -> tuple[Headers, int]:
    """The headers and the offset where the record value starts."""
    (count,), pos = _INT.unpack_from(raw, 0), 4
    items: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        (length,) = _INT.unpack_from(raw, pos)
        key = raw[pos + 4 : pos + 4 + length].decode("utf-8")
        pos += 4 + length
        (length,) = _INT.unpack_from(raw, pos)
        pos += 4
        items.append((key, None if length < 0 else raw[pos : pos + length]))
        pos += max(length, 0)
    return Headers(items), pos


@dataclass(frozen=True)
class BufferedRecord:
    key: Any
    value: Any
    timestamp: int
    headers: Headers


class StreamJoinBuffer(MeteredStoreBase):
    kind = "join buffer"

    def __init__(
        self,
        inner: KeyValueBytesStore,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        grace_ms: int,
    ) -> None:
        super().__init__(inner, key_serde, value_serde)
        self.grace_ms = grace_ms
        self._seq: int | None = None  # next sequence number, found from the restored rows on first use

    def init(self, context: StoreContext, root: StateStore | None = None) -> None:
        self.key_serde, self.value_serde = self.resolve_serdes(context)
        self._topic = context.changelog_topic(self.name)
        self.inner.init(context, root or self)

    def set_flush_listener(self, listener: Any, send_old_values: bool) -> bool:
        return False

    def _next_seq(self) -> int:
        if self._seq is None:
            self._seq = 1 + max((int(_INT.unpack(row[-4:])[0]) for row, _ in self.inner.all()), default=-1)
        seq, self._seq = self._seq, (self._seq + 1) & 0x7FFFFFFF
        return seq

    def put(self, observed_stream_time: int, key: Any, value: Any, timestamp: int, headers: Headers) -> bool:
        """Buffer a record; `False` (not buffered) when it is already older than stream time - grace."""
        if observed_stream_time - self.grace_ms > timestamp:
            return False
        row = _TS.pack(timestamp) + self._k(key) + _INT.pack(self._next_seq())
        raw_value = self.value_serde.serialize(self._topic, value)  # type: ignore[union-attr]
        self.inner.put(row, encode_headers(headers) + (raw_value or b""))
        return True

    def evict(self, observed_stream_time: int, emit: Callable[[BufferedRecord], None]) -> None:
        """Hand over, oldest first, every record whose grace has passed, and forget it."""
        deadline = observed_stream_time - self.grace_ms
        due: list[tuple[bytes, bytes]] = []
        for row, raw in self.inner.all():
            if _TS.unpack(row[:8])[0] > deadline:
                break
            due.append((row, raw))
        for row, raw in due:
            headers, start = decode_headers(raw)
            key = self._dk(row[8:-4])
            value = self.value_serde.deserialize(self._topic, raw[start:])  # type: ignore[union-attr]
            self.inner.delete(row)
            emit(BufferedRecord(key, value, int(_TS.unpack(row[:8])[0]), headers))


@dataclass
class StreamJoinBufferBuilder:
    name: str
    key_serde: Serde[Any] | None
    value_serde: Serde[Any] | None
    grace_ms: int
    logging_enabled: bool = True
    log_config: dict[str, str] = field(default_factory=dict)
    persistent: bool = True
    store_kind: str = "key_value"

    def build(self) -> StreamJoinBuffer:
        inner: KeyValueBytesStore = RocksDBKeyValueBytesStore(self.name)
        if self.logging_enabled:
            inner = ChangeLoggingKeyValueBytesStore(inner)
        return StreamJoinBuffer(inner, self.key_serde, self.value_serde, self.grace_ms)
