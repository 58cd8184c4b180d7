"""`Change`: what flows between KTable processors, the new value and (when requested) the old one.

Also the serde that carries table changes through a KGroupedTable's repartition topic. Its format is
kappaflow's own (internal topics only): one flag byte, then the value(s):
0 = new only, 1 = old only, 2 = both as [4-byte length of new][new][old].
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kappaflow.api.errors import SerializationError
from kappaflow.api.serdes import Serde

V = TypeVar("V")
_LEN = struct.Struct(">i")


@dataclass(slots=True)
class Change(Generic[V]):
    """``is_latest`` is Java's ``Change.isLatest``: False for an update of a versioned table older than
    the key's latest version. The operators below a versioned table (re-grouping, table-table and
    foreign-key joins) skip such a record, since it is not the table's current value. It never crosses
    a repartition topic (the re-grouping drops it first), so the serde does not carry it."""

    new_value: V | None
    old_value: V | None
    is_latest: bool = True


class ChangeSerde(Serde[Change[Any]]):
    name = "Change"

    def __init__(self, inner: Serde[Any] | None) -> None:
        self._inner = inner

    @property
    def inner(self) -> Serde[Any]:
        if self._inner is None:
            raise SerializationError("Change serde has no value serde: set one or default.value.serde")
        return self._inner

    def with_default(self, default: Serde[Any] | None) -> Serde[Change[Any]]:
        return self if self._inner is not None or default is None else ChangeSerde(default)

    def serialize(self, topic: str, data: Change[Any] | None) -> bytes | None:
        if data is None:
            return None
        new = self.inner.serialize(topic, data.new_value)
        old = self.inner.serialize(topic, data.old_value)
        if new is not None and old is not None:
            return b"\x02" + _LEN.pack(len(new)) + new + old
        if new is not None:
            return b"\x00" + new
        if old is not None:
            return b"\x01" + old
        return None

    def deserialize(self, topic: str, data: bytes | None) -> Change[Any] | None:
        if data is None:
            return None
        flag = data[0]
        if flag == 0:
            return Change(self.inner.deserialize(topic, data[1:]), None)
        if flag == 1:
            return Change(None, self.inner.deserialize(topic, data[1:]))
        if flag == 2:
            (length,) = _LEN.unpack_from(data, 1)
            new = data[5 : 5 + length]
            return Change(
                self.inner.deserialize(topic, new), self.inner.deserialize(topic, data[5 + length :])
            )
        raise SerializationError(f"unknown change flag {flag} in topic '{topic}'")
