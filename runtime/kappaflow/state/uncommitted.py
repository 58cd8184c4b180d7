"""Writes not yet committed, kept apart from committed state: the core of a transactional store (KIP-892).

Under exactly_once_v2 a persistent store must never hold writes whose Kafka transaction did not commit:
after a crash the store would then be ahead of its changelog's committed records, and the only safe
recovery would be to wipe it and restore the whole changelog. So a transactional store buffers every
write of the open transaction here and applies them to its database (together with the changelog
offset they reach, in one atomic write batch) only once the transaction has committed. A crash before
that loses nothing that counted: the database still holds the previous commit's state and offset, and
restoration replays the changelog's committed records from that offset.

Reads between writing and committing must see the task's own writes, so the buffer is an index, not a
log: the latest value per key (None marks a delete) and a sorted key list for ordered scans, which
`overlay` merges over the database's own iterator. It holds one commit interval's writes (100 ms by
default under exactly_once_v2), deduplicated per key, so it stays small.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable, Iterator

# a pending entry: key, value (None = delete)
Entry = tuple[bytes, bytes | None]
_ABSENT = object()


class UncommittedWrites:
    """The open transaction's writes: latest value per key, ordered by key bytes."""

    __slots__ = ("_keys", "_values")

    def __init__(self) -> None:
        self._values: dict[bytes, bytes | None] = {}
        self._keys: list[bytes] = []

    def __len__(self) -> int:
        return len(self._values)

    def lookup(self, key: bytes) -> tuple[bool, bytes | None]:
        """(written in this transaction?, the value written; None for a delete)."""
        value = self._values.get(key, _ABSENT)
        if value is _ABSENT:
            return False, None
        return True, value  # type: ignore[return-value]

    def put(self, key: bytes, value: bytes | None) -> None:
        if key not in self._values:
            bisect.insort(self._keys, key)
        self._values[key] = value

    def put_all(self, entries: Iterable[Entry]) -> None:
        for key, value in entries:
            self.put(key, value)

    def in_range(self, from_key: bytes | None, to_key: bytes | None) -> list[Entry]:
        """Entries with from_key <= key <= to_key (None bounds are open), in key order."""
        keys = self._keys
        lo = 0 if from_key is None else bisect.bisect_left(keys, from_key)
        hi = len(keys) if to_key is None else bisect.bisect_right(keys, to_key)
        values = self._values
        return [(k, values[k]) for k in keys[lo:hi]]

    def drain(self) -> list[Entry]:
        """Every entry, in key order, and empty the buffer: what a commit applies."""
        values = self._values
        entries = [(k, values[k]) for k in self._keys]
        self.clear()
        return entries

    def clear(self) -> None:
        self._values = {}
        self._keys = []


def overlay(
    pending: list[Entry], stored: Iterator[tuple[bytes, bytes]], reverse: bool
) -> Iterator[tuple[bytes, bytes]]:
    """Merge `pending` (sorted like `stored`) over `stored`: pending values win, pending deletes hide.

    Used by the record cache over its store and by a transactional store over its database."""
    if not pending:
        yield from stored
        return
    pending_keys = {k for k, _ in pending}
    tagged_pending = ((k, 0, v) for k, v in pending)
    tagged_stored = ((k, 1, v) for k, v in stored if k not in pending_keys)
    for key, _, value in heapq.merge(tagged_pending, tagged_stored, key=lambda t: t[0], reverse=reverse):
        if value is not None:
            yield key, value
