"""A typed store's batched flush as its listener receives it: the written columns and how to type them.

Past the record cache every update of a cached, logged store is a flushed entry, so what a flush costs
per entry is what each input record costs there. The typed store (`MeteredKeyValueStore`) hands its
batch listener this object rather than a generator of typed entries: iterating it types each entry (the
reference, and what a listener with a Python child does), and a listener whose one child is a native
stage hands the whole batch to that stage (`StatelessStage.take_flush`, runtime/native/src/
table_flush.rs), which types the entries and builds their changes without a Python frame per entry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kappaflow.state.api import FlushedWrites, RecordContext
from kappaflow.state.cache import NOT_DECODED


@dataclass(frozen=True, slots=True)
class FlushedBatch:
    """One flush of a typed store: its writes in the order flushed, the old value bytes each is told
    with, the decoded copies of the new values (`not_decoded` where the cache kept none), and the store's
    serdes. `set_record_context` makes an entry's record context current before it is typed, as the
    per-entry flush does around each `put`."""

    writes: FlushedWrites
    olds: list[bytes | None]
    decodeds: list[object]
    topic: str
    utf8_keys: bool  # String keys: `bytes.decode`, as the store encodes them with `str.encode`
    deserialize_key: Callable[[str, bytes], Any]
    deserialize_value: Callable[[str, bytes | None], Any]
    set_record_context: Callable[[RecordContext], None]
    not_decoded: object = NOT_DECODED

    def __iter__(self) -> Iterator[tuple[Any, Any, Any, RecordContext]]:
        """The entries typed as the per-entry flush types them: (key, new value, old value, record
        context), each entry's record context made current as it is produced. A new value the cache
        kept decoded is that copy (it round-trips: Serde.decodes_to_itself), not the bytes decoded
        again; a missing old value is None, as Java's MeteredKeyValueStore maps null bytes to null
        without the deserializer."""
        topic, utf8_keys, not_decoded = self.topic, self.utf8_keys, self.not_decoded
        dk, dv, set_record_context = self.deserialize_key, self.deserialize_value, self.set_record_context
        for (key, value, record_context), old, decoded in zip(
            self.writes, self.olds, self.decodeds, strict=True
        ):
            set_record_context(record_context)
            new = dv(topic, value) if decoded is not_decoded else decoded
            typed_key = key.decode() if utf8_keys else dk(topic, key)
            yield typed_key, new, (None if old is None else dv(topic, old)), record_context
