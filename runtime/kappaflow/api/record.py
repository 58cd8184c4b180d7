"""Records flowing through a topology, their headers and source metadata.

`Record` is immutable, like Kafka Streams' `Record`: processors derive new records with `with_key`,
`with_value`, `with_timestamp` and `with_headers`, so a record forwarded to several children can never be
mutated by one of them behind the others' backs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")
K2 = TypeVar("K2")
V2 = TypeVar("V2")


class Headers(list[tuple[str, bytes | None]]):
    """An ordered multi-map of header keys to byte values, as Kafka stores them.

    A list of `(key, value)` pairs underneath: every consumed record gets its own Headers (processors
    may add to them), and a list subclass with no `__init__` of its own is created without a Python
    call, which matters when most records carry none."""

    __slots__ = ()

    def add(self, key: str, value: bytes | None) -> Headers:
        """Append a header (keys may repeat, as in Kafka); returns the headers."""
        self.append((key, value))
        return self

    def remove(self, key: str) -> Headers:  # type: ignore[override]  # Kafka's Headers.remove(key)
        """Remove every header named `key`; returns the headers."""
        self[:] = [(k, v) for k, v in self if k != key]
        return self

    def last_header(self, key: str) -> bytes | None:
        """The value of the last header named `key`, or None."""
        for k, v in reversed(self):
            if k == key:
                return v
        return None

    def headers(self, key: str) -> list[bytes | None]:
        """The values of every header named `key`, in order."""
        return [v for k, v in self if k == key]

    def to_list(self) -> list[tuple[str, bytes | None]]:
        """The headers as a list of `(key, value)` pairs."""
        return list(self)

    def copy(self) -> Headers:
        """An independent copy."""
        return Headers(self)

    def __repr__(self) -> str:
        return f"Headers({list(self)!r})"


@dataclass(slots=True, eq=True)
class Record(Generic[K, V]):
    """A key, a value, an event timestamp (ms) and headers.

    Treat records as immutable and derive new ones with the `with_*` methods, as in Kafka Streams. The
    class is not `frozen` only because a frozen dataclass's __init__ costs twice as much, and a record
    is created for every hop of every record through the topology."""

    key: K
    value: V
    timestamp: int = 0
    headers: Headers = field(default_factory=Headers)

    def with_key(self, key: K2) -> Record[K2, V]:
        """A copy with another key."""
        return Record(key, self.value, self.timestamp, self.headers)

    def with_value(self, value: V2) -> Record[K, V2]:
        """A copy with another value."""
        return Record(self.key, value, self.timestamp, self.headers)

    def with_timestamp(self, timestamp: int) -> Record[K, V]:
        """A copy with another timestamp."""
        return Record(self.key, self.value, timestamp, self.headers)

    def with_headers(self, headers: Headers) -> Record[K, V]:
        """A copy with other headers."""
        return Record(self.key, self.value, self.timestamp, headers)


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where the record being processed came from: its topic, partition and offset (in a punctuation,
    as Java's: topic None, partition -1, offset -1)."""

    topic: str | None
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class TestRecord(Generic[K, V]):
    """A record as read back from an output topic (or piped into an input topic) in tests."""

    __test__ = False

    key: K
    value: V
    timestamp: int | None = None
    headers: Headers = field(default_factory=Headers)

    def key_value(self) -> tuple[K, V]:
        return (self.key, self.value)


def ensure_headers(headers: Headers | Iterable[tuple[str, bytes | None]] | None) -> Headers:
    """Accept headers as a Headers object, a list of pairs or None."""
    if headers is None:
        return Headers()
    if isinstance(headers, Headers):
        return headers
    return Headers(headers)


AnyRecord = Record[Any, Any]
