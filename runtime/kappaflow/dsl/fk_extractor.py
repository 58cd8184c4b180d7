"""`ForeignKeyExtractor`: how a foreign-key join finds the other table's key in a left row (KIP-1104).

Kafka Streams 4.x overloads `KTable.join/leftJoin` on `Function<V, KO>` (value only) and `BiFunction<K, V,
KO>` (key and value). Python cannot overload on a lambda's arity reliably, and guessing it (as
`map_values` does) would silently change the meaning of an existing two-argument extractor, so the
choice is explicit: `ForeignKeyExtractor.from_value(f)` or `ForeignKeyExtractor.from_key_and_value(f)`;
a plain callable keeps meaning value-only, as it did before. A plain callable that needs two positional
arguments is refused when the topology is built, pointing at `from_key_and_value`, rather than failing
with a TypeError on the first record.

The join calls `extract(key, value)` for the new and for the old value of a left row, always with the
row's key (a tombstone's old value too), as Java's subscription sender does.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Generic

from kappaflow.api.errors import TopologyError
from kappaflow.dsl.typevars import KO, K, V


class ForeignKeyExtractor(Generic[K, V, KO]):
    """The foreign key of a left row: `extract(key, value) -> KO` (`None`: no foreign key)."""

    __slots__ = ("_extract", "uses_key")

    def __init__(self, extract: Callable[[K, V], KO | None], uses_key: bool) -> None:
        self._extract = extract
        self.uses_key = uses_key

    @staticmethod
    def from_value(extractor: Callable[[V], KO | None]) -> ForeignKeyExtractor[Any, V, KO]:
        """The foreign key from the value alone (Java's `Function<V, KO>` overloads)."""
        return ForeignKeyExtractor(lambda _key, value: extractor(value), uses_key=False)

    @staticmethod
    def from_key_and_value(extractor: Callable[[K, V], KO | None]) -> ForeignKeyExtractor[K, V, KO]:
        """The foreign key from the key and the value (Java's `BiFunction<K, V, KO>` overloads, KIP-1104)."""
        return ForeignKeyExtractor(extractor, uses_key=True)

    def extract(self, key: K, value: V) -> KO | None:
        """The foreign key of the row (`key`, `value`), or None when the row joins nothing."""
        return self._extract(key, value)

    @staticmethod
    def of(
        extractor: ForeignKeyExtractor[K, V, KO] | Callable[[V], KO | None],
    ) -> ForeignKeyExtractor[Any, V, KO]:
        """An extractor as `KTable.join` accepts it: a `ForeignKeyExtractor`, or a value-only callable."""
        if isinstance(extractor, ForeignKeyExtractor):
            return extractor
        if not callable(extractor):
            raise TopologyError(f"a foreign-key extractor must be callable, got {type(extractor).__name__}")
        if _required_positional(extractor) >= 2:
            raise TopologyError(
                "a plain foreign-key extractor takes the value only; for one over (key, value) pass "
                "ForeignKeyExtractor.from_key_and_value(extractor)"
            )
        return ForeignKeyExtractor.from_value(extractor)


def _required_positional(fn: Callable[..., Any]) -> int:
    """How many positional arguments `fn` requires (0 when its signature cannot be read: a builtin)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 0
    return sum(
        1
        for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    )
