"""The type variables of the typed DSL: `KStream[K, V]`, `KTable[K, V]` and their grouped and windowed
forms carry the key and value types through a chain, so a user's type checker sees them."""

from __future__ import annotations

from typing import TypeVar

K = TypeVar("K")  # the key type
V = TypeVar("V")  # the value type
KR = TypeVar("KR")  # a new key type (map, select_key, group_by)
VR = TypeVar("VR")  # a new value type (map_values, joins, aggregates)
VA = TypeVar("VA")  # an aggregate's type
VO = TypeVar("VO")  # the other side's value type (joins)
KO = TypeVar("KO")  # the other table's key type (foreign-key joins)
