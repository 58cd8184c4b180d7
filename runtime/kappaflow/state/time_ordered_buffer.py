"""The suppression buffer: Kafka Streams' in-memory TimeOrderedKeyValueBuffer, changelogged.

It holds the latest update per key, ordered by *buffer time* (a window's end for final results, the
record time for a time limit). Times are non-resetting, as in Java: a key keeps the time of its first
buffered update until it is emitted. The emitted `Change` is the latest update as it came, old value
included (Java's evictWhile emits the buffered value's `oldValue`, not the pre-buffer `priorValue`), so
a downstream re-grouping subtracts what the latest update replaced. The first update's old value (the
*prior* value) is kept too: it is what the suppressed table's value getter answers for a buffered key
(Java's `priorValueForBuffered`), so a join looking up a suppressed table sees nothing newer than what
was emitted. Every put and eviction is written to the store's compacted changelog as `[8-byte buffer
time][8-byte record time][4-byte change length][change bytes][prior bytes]`, so a restarted task
restores the buffer and emits exactly what it would have emitted without the restart.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kappaflow.api.errors import InvalidStateStoreError
from kappaflow.api.record import Headers
from kappaflow.api.serdes import Serde
from kappaflow.state.api import ChangelogRecord, StateStore, StoreContext

_HEADER = struct.Struct(">qqi")
# Java's ProcessorRecordContext.residentMemorySizeEstimate without topic and headers: timestamp (8),
# offset (8), partition (4); plus the entry's buffer time (8, InMemoryTimeOrderedKeyValueChangeBuffer)
_CONTEXT_AND_TIME = 8 + 8 + 4 + 8

# (serialized Change(new, old) or b"" for an all-None change) <-> Change objects
ChangeCodec = tuple[Callable[[Any], bytes], Callable[[bytes], Any]]


@dataclass
class BufferedEntry:
    time: int
    token: int
    key: Any
    change: Any  # Change(new, old): the latest buffered update
    record_time: int
    headers: Headers
    size: int
    prior: Any = None  # the old value of the key's first buffered update


class TimeOrderedKeyValueBuffer:
    persistent = False

    def __init__(self, name: str, key_serde: Serde[Any] | None, codec_factory: Callable[[Any], ChangeCodec],
                 logging_enabled: bool) -> None:  # fmt: skip
        self._name = name
        self.key_serde = key_serde
        self._codec_factory = codec_factory
        self.logging_enabled = logging_enabled
        self._entries: dict[bytes, BufferedEntry] = {}
        # (buffer time, key bytes, token): Java orders by time, then key bytes; stale tokens are skipped
        self._heap: list[tuple[int, bytes, int]] = []
        self._counter = itertools.count()
        self.size_bytes = 0
        self._context: StoreContext | None = None
        self._open = False
        self._topic = name
        self._encode: Callable[[Any], bytes] = lambda change: b""
        self._decode: Callable[[bytes], Any] = lambda raw: None

    @property
    def name(self) -> str:
        return self._name

    def init(self, context: StoreContext, root: StateStore | None = None) -> None:
        config = context.app_config
        default_key = config.serde("default.key.serde")
        key_serde = self.key_serde.with_default(default_key) if self.key_serde else default_key
        if key_serde is None:
            raise InvalidStateStoreError(f"suppression buffer '{self.name}' has no key serde")
        self.key_serde = key_serde
        self._encode, self._decode = self._codec_factory(config.serde("default.value.serde"))
        self._context = context
        self._topic = context.changelog_topic(self.name)
        self._open = True
        context.register_store(root or self, self.restore_batch)

    def is_open(self) -> bool:
        return self._open

    def flush(self) -> None:
        return None

    def close(self) -> None:
        self._open = False
        self._entries.clear()
        self._heap.clear()
        self.size_bytes = 0

    def committed_changelog_offset(self) -> int | None:
        return None  # in memory: a restart restores the whole (compacted) changelog

    def checkpoint(self, changelog_offset: int) -> None:
        return None

    # ----------------------------------------------------------------- buffer operations
    def _raw_key(self, key: Any) -> bytes:
        raw = self.key_serde.serialize(self._topic, key)  # type: ignore[union-attr]
        assert raw is not None
        return raw

    def num_records(self) -> int:
        return len(self._entries)

    def _value_size(self, change: Any, value: Any) -> int:
        """The serialized size of one value (0 for None): the codec writes a 1-byte flag before it."""
        return max(0, len(self._encode(dataclasses.replace(change, new_value=value, old_value=None))) - 1)

    def _entry_size(
        self, raw_key: bytes, change: Any, prior: Any, first: bool, topic: str, headers: Headers
    ) -> int:
        """An entry's size as Java counts it (`computeRecordSize` + `BufferValue` +
        `ProcessorRecordContext.residentMemorySizeEstimate`), so `BufferConfig.max_bytes` holds the same
        keys in both: key, buffer time, the prior value (the old value of the key's first buffered
        update), the old value unless it is that same prior, the new value, and the record context
        (times, offset, partition, topic characters, header keys and values). `first`: this update is
        the key's first buffered one (its old value is the prior)."""
        size = _CONTEXT_AND_TIME + len(raw_key) + len(topic)
        size += self._value_size(change, prior) + self._value_size(change, change.new_value)
        if not first:
            size += self._value_size(change, change.old_value)
        for header_key, header_value in headers.to_list():
            size += len(header_key) + (len(header_value) if header_value is not None else 0)
        return size

    def put(
        self, time: int, key: Any, change: Any, record_time: int, headers: Headers, topic: str = ""
    ) -> None:
        """Buffer `change` (a Change(new, old)) for `key`, which came from `topic` ("" in a punctuation);
        an already buffered key keeps its time."""
        raw_key = self._raw_key(key)
        previous = self._entries.get(raw_key)
        if previous is None:
            token = next(self._counter)
            prior = change.old_value
            heapq.heappush(self._heap, (time, raw_key, token))
        else:
            time, token, prior = previous.time, previous.token, previous.prior
            self.size_bytes -= previous.size
        payload = self._encode(change)
        prior_payload = self._encode(dataclasses.replace(change, new_value=prior, old_value=None))
        size = self._entry_size(raw_key, change, prior, previous is None, topic, headers)
        entry = BufferedEntry(time, token, key, change, record_time, headers, size, prior)
        self._entries[raw_key] = entry
        self.size_bytes += entry.size
        header = _HEADER.pack(time, record_time, len(payload))
        self._log(raw_key, header + payload + prior_payload, record_time, headers)

    def prior_value(self, key: Any) -> tuple[bool, Any]:
        """(buffered?, the value before the key's first buffered update)."""
        entry = self._entries.get(self._raw_key(key))
        return (False, None) if entry is None else (True, entry.prior)

    def _log(self, raw_key: bytes, value: bytes | None, timestamp: int, headers: Headers) -> None:
        if self.logging_enabled and self._context is not None:
            self._context.log_change(self.name, raw_key, value, timestamp, headers)

    def min_time(self) -> int | None:
        while self._heap:
            time, raw_key, token = self._heap[0]
            entry = self._entries.get(raw_key)
            if entry is not None and entry.token == token:
                return time
            heapq.heappop(self._heap)
        return None

    def evict_while(self, predicate: Callable[[], bool], emit: Callable[[BufferedEntry], None]) -> None:
        while self.min_time() is not None and predicate():
            _, raw_key, _ = heapq.heappop(self._heap)
            entry = self._entries.pop(raw_key)
            self.size_bytes -= entry.size
            self._log(raw_key, None, entry.record_time, entry.headers)
            emit(entry)

    # ----------------------------------------------------------------- restore
    def restore_batch(self, records: list[ChangelogRecord]) -> None:
        for raw_key, value, _timestamp in records:
            previous = self._entries.pop(raw_key, None)
            if previous is not None:
                self.size_bytes -= previous.size
            if value is None:
                continue
            time, record_time, length = _HEADER.unpack_from(value)
            payload = value[_HEADER.size : _HEADER.size + length]
            prior = self._decode(value[_HEADER.size + length :]).new_value
            token = next(self._counter)
            key = self.key_serde.deserialize(self._topic, raw_key)  # type: ignore[union-attr]
            change = self._decode(payload)
            # the changelog keeps neither the topic nor the headers, so a restored entry counts without
            # them; whether the update was the key's first is told by its old value being the prior
            size = self._entry_size(raw_key, change, prior, change.old_value == prior, "", Headers())
            entry = BufferedEntry(time, token, key, change, record_time, Headers(), size, prior)
            self._entries[raw_key] = entry
            self.size_bytes += entry.size
            heapq.heappush(self._heap, (time, raw_key, token))


@dataclass
class BufferStoreBuilder:
    name: str
    key_serde: Serde[Any] | None
    codec_factory: Callable[[Any], ChangeCodec]
    logging_enabled: bool = True
    log_config: dict[str, str] = field(default_factory=dict)
    persistent: bool = False
    store_kind: str = "suppression_buffer"

    def build(self) -> TimeOrderedKeyValueBuffer:
        return TimeOrderedKeyValueBuffer(self.name, self.key_serde, self.codec_factory, self.logging_enabled)
