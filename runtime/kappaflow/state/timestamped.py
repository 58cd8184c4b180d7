"""Values stored with the timestamp of the record that produced them (Kafka's ValueAndTimestamp).

DSL stores are timestamped so aggregates can take the max timestamp of their inputs and tables can
forward updates with the right time. The byte layout matches Java's: 8-byte big-endian timestamp, then
the value's bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kappaflow.api.serdes import Long, Serde

V = TypeVar("V")
TIMESTAMPED_LONG = struct.Struct(">qq")  # a timestamp and a Long value: counts, the commonest aggregate
_TS_LONG = TIMESTAMPED_LONG


@dataclass(slots=True)
class ValueAndTimestamp(Generic[V]):
    value: V
    timestamp: int

    @staticmethod
    def make(value: V | None, timestamp: int) -> ValueAndTimestamp[V] | None:
        return None if value is None else ValueAndTimestamp(value, timestamp)


def get_value_or_none(vat: ValueAndTimestamp[V] | None) -> V | None:
    return None if vat is None else vat.value


def split_timestamped(raw: bytes) -> tuple[int, bytes]:
    return int.from_bytes(raw[:8], "big", signed=True), raw[8:]


class ValueAndTimestampSerde(Serde[ValueAndTimestamp[Any]]):
    name = "ValueAndTimestamp"

    def __init__(self, inner: Serde[Any]) -> None:
        self.inner = inner
        # Long values (counts, sums) pack with their timestamp in one struct call, both ways
        self._long = type(inner) is Long

    @property
    def packs_longs(self) -> bool:
        """Whether an int value is written as TIMESTAMPED_LONG (timestamp and value, 16 bytes)."""
        return self._long

    def serialize(self, topic: str, data: ValueAndTimestamp[Any] | None) -> bytes | None:
        if data is None:
            return None
        value = data.value
        if self._long and type(value) is int:
            try:
                return _TS_LONG.pack(data.timestamp, value)
            except struct.error:
                pass  # out of range: the general path raises the serde's error
        raw = self.inner.serialize(topic, value)
        if raw is None:
            return None
        return data.timestamp.to_bytes(8, "big", signed=True) + raw

    def decodes_to_itself(self, data: Any) -> bool:
        # ValueAndTimestamp is documented immutable, like Record
        if type(data) is not ValueAndTimestamp:
            return False
        if self._long:
            return type(data.value) is int
        return self.inner.decodes_to_itself(data.value)

    def deserialize(self, topic: str, data: bytes | None) -> ValueAndTimestamp[Any] | None:
        if data is None:
            return None
        if self._long and len(data) == 16:
            timestamp, value = _TS_LONG.unpack(data)
            return ValueAndTimestamp(value, timestamp)
        timestamp, raw = split_timestamped(data)
        return ValueAndTimestamp(self.inner.deserialize(topic, raw), timestamp)

    def __repr__(self) -> str:
        return f"ValueAndTimestamp({self.inner!r})"
