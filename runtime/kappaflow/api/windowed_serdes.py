"""Serdes for windowed keys, byte-compatible with Kafka Streams' `TimeWindowedSerde` and
`SessionWindowedSerde`, so a Java consumer can read a Python application's windowed output.

Java's layouts: time-windowed keys are `[key bytes][8-byte window start]` (the end is not written; the
reader must know the window size), session-windowed keys `[key bytes][8-byte end][8-byte start]`. All
numbers big-endian, signed.
"""

from __future__ import annotations

import struct
from typing import Any

from kappaflow.api.errors import SerializationError
from kappaflow.api.serdes import Serde
from kappaflow.api.windows import Window, Windowed

_LONG = struct.Struct(">q")
_TWO_LONGS = struct.Struct(">qq")
MAX_TIME = (1 << 63) - 1


class _WindowedBase(Serde[Windowed[Any]]):
    def __init__(self, inner: Serde[Any] | None) -> None:
        self._inner = inner

    @property
    def inner(self) -> Serde[Any]:
        if self._inner is None:
            raise SerializationError(f"{self.name} serde has no key serde: set one or default.key.serde")
        return self._inner

    def _key_bytes(self, topic: str, data: Windowed[Any]) -> bytes:
        raw = self.inner.serialize(topic, data.key)
        if raw is None:
            raise SerializationError(f"{self.name}: the windowed key's key must not be None")
        return raw


class TimeWindowedSerde(_WindowedBase):
    """`[key][start]`; `window_size` restores the end on read (Java's `windowSize` argument); without it
    the end is unbounded, as Java's deserializer without a size gives."""

    name = "TimeWindowed"

    def __init__(self, inner: Serde[Any] | None = None, window_size: int | None = None) -> None:
        super().__init__(inner)
        self.window_size = window_size

    def with_default(self, default: Serde[Any] | None) -> Serde[Windowed[Any]]:
        if self._inner is not None or default is None:
            return self
        return TimeWindowedSerde(default, self.window_size)

    def serialize(self, topic: str, data: Windowed[Any] | None) -> bytes | None:
        if data is None:
            return None
        return self._key_bytes(topic, data) + _LONG.pack(data.window.start)

    def deserialize(self, topic: str, data: bytes | None) -> Windowed[Any] | None:
        if data is None:
            return None
        if len(data) < 8:
            raise SerializationError(f"TimeWindowed key needs at least 8 bytes, got {len(data)}")
        (start,) = _LONG.unpack_from(data, len(data) - 8)
        end = MAX_TIME if self.window_size is None else min(MAX_TIME, start + self.window_size)
        return Windowed(self.inner.deserialize(topic, data[:-8]), Window(start, end))


class SessionWindowedSerde(_WindowedBase):
    """`[key][end][start]`, Java's SessionKeySchema layout (sessions sort by end within a key)."""

    name = "SessionWindowed"

    def __init__(self, inner: Serde[Any] | None = None) -> None:
        super().__init__(inner)

    def with_default(self, default: Serde[Any] | None) -> Serde[Windowed[Any]]:
        if self._inner is not None or default is None:
            return self
        return SessionWindowedSerde(default)

    def serialize(self, topic: str, data: Windowed[Any] | None) -> bytes | None:
        if data is None:
            return None
        return self._key_bytes(topic, data) + _TWO_LONGS.pack(data.window.end, data.window.start)

    def deserialize(self, topic: str, data: bytes | None) -> Windowed[Any] | None:
        if data is None:
            return None
        if len(data) < 16:
            raise SerializationError(f"SessionWindowed key needs at least 16 bytes, got {len(data)}")
        end, start = _TWO_LONGS.unpack_from(data, len(data) - 16)
        return Windowed(self.inner.deserialize(topic, data[:-16]), Window(start, end))
