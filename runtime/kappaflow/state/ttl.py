"""Key-value stores whose entries expire: a time-to-live (TTL) that Kafka Streams never had (KAFKA-4273).

An entry not written for the TTL is *expired*: reads stop returning it at once, and a bounded number of
expired entries per store are deleted on each commit (the sweep), each with a changelog tombstone so a
restored store and a standby hold what the active store holds, and, when asked, a downstream tombstone
so joins and sinks of a table see the expiry.

Why this shape:

- **Age is measured from the entry's own timestamp.** For a timestamped store (every DSL store) it is
  the timestamp kept in the value (`ValueAndTimestamp`), which the changelog carries as the record time
  and Spark's state bootstrap writes: one fact with one owner, so an index rebuilt after a restart, a
  restoration or a reprocessing run agrees with the one the active task kept. A plain Processor API
  store uses the time of the record that wrote the entry; its entries found at start-up (their write
  time is not stored) age from the stream time at which the index is rebuilt. On the wall clock, an
  entry's age starts at the wall-clock time of its write, and entries found at start-up age from then.
- **"Now" is stream time by default**: deterministic and replayable, so TopologyTestDriver, the runtime
  and Spark reprocessing compute the same results. Wall-clock time is an option for state that must
  go away even when input stops.
- **Reads hide expired entries; deletion is lazy and bounded.** Results never depend on when a sweep
  ran, only on stream time, while the stream thread never pauses for more than `max_expired_per_commit`
  deletions per store and commit. An index ordered by write time (a heap with lazy invalidation)
  finds the due entries without scanning the store.
- **The layer sits above the record cache**, so it sees every write when it is made (with its record
  context) and every read. The native aggregation inlines cached reads and writes that would bypass
  it: a TTL store has no `cached_binding`, which makes it a boundary the fused stage does not take.
- **Standbys never expire anything themselves**: nothing is swept before the task has processed a
  record (stream time >= 0), so a standby applies the active task's tombstones and nothing else.
"""

from __future__ import annotations

import heapq
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from kappaflow.api.processor import to_millis
from kappaflow.api.record import Headers
from kappaflow.state.api import BytesIterator, KeyValueBytesStore, RecordContext, StateStore, StoreContext
from kappaflow.state.kv_layers import BytesFlushListener, CachingKeyValueStore, WritesThroughPutStore

TtlClock = Literal["stream_time", "wall_clock"]
EXPIRED_METRIC = "state-store-expired-total"
DEFAULT_MAX_EXPIRED_PER_COMMIT = 10_000


@dataclass(frozen=True)
class StoreTtl:
    """A store's time-to-live: how long an entry lives after its last write, on which clock, whether
    its expiry is forwarded downstream, and how many entries one commit may expire."""

    ttl_ms: int
    clock: TtlClock = "stream_time"
    emit_tombstones: bool = False
    max_expired_per_commit: int = DEFAULT_MAX_EXPIRED_PER_COMMIT

    @staticmethod
    def of(
        ttl: timedelta | int,
        clock: str = "stream_time",
        emit_tombstones: bool = False,
        max_expired_per_commit: int = DEFAULT_MAX_EXPIRED_PER_COMMIT,
    ) -> StoreTtl:
        """Validated settings: each bad argument is named in the error."""
        ttl_ms = to_millis(ttl, "ttl")
        if ttl_ms < 1:
            raise ValueError(f"ttl must be at least 1 ms, got {ttl_ms}")
        if clock not in ("stream_time", "wall_clock"):
            raise ValueError(f"clock must be 'stream_time' or 'wall_clock', got {clock!r}")
        if isinstance(max_expired_per_commit, bool) or not isinstance(max_expired_per_commit, int):
            raise TypeError(f"max_expired_per_commit must be an int, got {max_expired_per_commit!r}")
        if max_expired_per_commit < 1:
            raise ValueError(f"max_expired_per_commit must be at least 1, got {max_expired_per_commit}")
        if not isinstance(emit_tombstones, bool):
            raise TypeError(f"emit_tombstones must be a bool, got {emit_tombstones!r}")
        return StoreTtl(
            ttl_ms,
            "wall_clock" if clock == "wall_clock" else "stream_time",
            emit_tombstones,
            max_expired_per_commit,
        )


class ExpiryIndex:
    """Keys by last write time: the pure decision of what has expired, kept apart from the store's I/O.

    `write_times` is the truth; the heap orders (write time, key) pairs and may hold stale pairs (a key
    rewritten or deleted since), which are skipped when they surface."""

    def __init__(self) -> None:
        self.write_times: dict[bytes, int] = {}
        self._heap: list[tuple[int, bytes]] = []

    def __len__(self) -> int:
        return len(self.write_times)

    def touch(self, key: bytes, write_time: int) -> None:
        if self.write_times.get(key) == write_time:
            return
        self.write_times[key] = write_time
        heapq.heappush(self._heap, (write_time, key))
        if len(self._heap) > 2 * len(self.write_times) + 1024:
            self._compact()

    def remove(self, key: bytes) -> None:
        self.write_times.pop(key, None)

    def clear(self) -> None:
        self.write_times.clear()
        self._heap.clear()

    def is_expired(self, key: bytes, now: int, ttl_ms: int) -> bool:
        write_time = self.write_times.get(key)
        return write_time is not None and now - write_time >= ttl_ms

    def take_due(self, now: int, ttl_ms: int, limit: int) -> list[tuple[bytes, int]]:
        """Up to `limit` expired (key, write time) pairs, oldest first, removed from the index."""
        due: list[tuple[bytes, int]] = []
        heap, write_times = self._heap, self.write_times
        while heap and len(due) < limit and now - heap[0][0] >= ttl_ms:
            write_time, key = heapq.heappop(heap)
            if write_times.get(key) == write_time:
                del write_times[key]
                due.append((key, write_time))
        return due

    def _compact(self) -> None:
        self._heap = [(t, k) for k, t in self.write_times.items()]
        heapq.heapify(self._heap)


def _timestamp_of(value: bytes) -> int:
    """The timestamp a timestamped store keeps in front of the value (ValueAndTimestamp's layout)."""
    return int.from_bytes(value[:8], "big", signed=True)


class ExpiringKeyValueBytesStore(WritesThroughPutStore):
    """The TTL layer (see the module docstring): between the typed store and the record cache."""

    def __init__(self, inner: KeyValueBytesStore, ttl: StoreTtl, timestamped: bool) -> None:
        super().__init__(inner)
        self.ttl = ttl
        self.timestamped = timestamped
        self.index = ExpiryIndex()
        self.expired_total = 0
        self._indexed = False  # the index is built on first use once the task processes records
        self._index_lock = threading.Lock()
        self._context: StoreContext | None = None
        self._labels: dict[str, str] = {}
        self._listener: BytesFlushListener | None = None
        self._send_old_values = False

    def init(self, context: StoreContext, root: StateStore) -> None:
        self.inner.init(context, root)
        self._context = context
        self._labels = {"store": self.name, "task": str(context.task_id)}
        self.index.clear()
        self._indexed = False

    def set_expiry_listener(self, listener: BytesFlushListener, send_old_values: bool) -> None:
        """A table's forwarder: told of each expired entry when `emit_tombstones` is set."""
        self._listener = listener
        self._send_old_values = send_old_values

    # ----------------------------------------------------------------- time
    def _now(self) -> int:
        context = self._context
        assert context is not None
        if self.ttl.clock == "wall_clock":
            return context.current_system_time_ms()
        return context.current_stream_time_ms()

    def _active(self) -> bool:
        """Whether the task has processed a record: before that (restoring, a standby) nothing expires."""
        context = self._context
        return context is not None and context.current_stream_time_ms() >= 0

    def _write_time(self, value: bytes) -> int:
        context = self._context
        assert context is not None
        if self.ttl.clock == "wall_clock":
            return context.current_system_time_ms()
        if self.timestamped:
            return _timestamp_of(value)
        return context.record_context().timestamp

    def _ensure_index(self) -> None:
        """Index what the store already holds (local state, restored changelog), once the task runs.

        One scan of the store, bounded by what the TTL lets it hold. Under a lock: an interactive query
        (another thread) may be the first to read, and the stream thread must not see half an index."""
        if self._indexed or not self._active():
            return
        with self._index_lock:
            if self._indexed:
                return
            now = self._now()
            by_value = self.timestamped and self.ttl.clock == "stream_time"
            for key, value in self.inner.all():
                self.index.touch(key, _timestamp_of(value) if by_value else now)
            self._indexed = True

    def _is_expired(self, key: bytes) -> bool:
        return self.index.is_expired(key, self._now(), self.ttl.ttl_ms)

    def _live(self, it: BytesIterator) -> BytesIterator:
        self._ensure_index()
        now, ttl_ms, index = self._now(), self.ttl.ttl_ms, self.index
        return ((k, v) for k, v in it if not index.is_expired(k, now, ttl_ms))

    # ----------------------------------------------------------------- reads
    def get(self, key: bytes) -> bytes | None:
        self._ensure_index()
        value = self.inner.get(key)
        if value is not None and self._is_expired(key):
            return None
        return value

    def range(self, from_key: bytes | None, to_key: bytes | None) -> BytesIterator:
        return self._live(self.inner.range(from_key, to_key))

    def reverse_range(self, from_key: bytes | None, to_key: bytes | None) -> BytesIterator:
        return self._live(self.inner.reverse_range(from_key, to_key))

    def all(self) -> BytesIterator:
        return self._live(self.inner.all())

    def reverse_all(self) -> BytesIterator:
        return self._live(self.inner.reverse_all())

    def prefix_scan(self, prefix: bytes) -> BytesIterator:
        return self._live(self.inner.prefix_scan(prefix))

    # ----------------------------------------------------------------- writes
    def _note(self, key: bytes, value: bytes | None) -> None:
        if value is None:
            self.index.remove(key)
        else:
            self.index.touch(key, self._write_time(value))

    def put(self, key: bytes, value: bytes | None) -> None:
        self._ensure_index()
        self.inner.put(key, value)
        self._note(key, value)

    # ----------------------------------------------------------------- expiry
    def flush(self) -> None:
        """Commit: the cache below flushes first (every update is forwarded and logged, however soon
        its entry expires, so what downstream sees does not depend on the commit interval), then a
        bounded batch expires, its tombstones logged and forwarded within the same commit."""
        self.inner.flush()
        self.sweep()

    def sweep(self) -> int:
        """Delete up to `max_expired_per_commit` expired entries: a changelog tombstone each, and a
        downstream tombstone each when asked. Returns how many were deleted."""
        self._ensure_index()
        context = self._context
        if context is None or not self._active():
            return 0
        due = self.index.take_due(self._now(), self.ttl.ttl_ms, self.ttl.max_expired_per_commit)
        if not due:
            return 0
        caching = self.inner if isinstance(self.inner, CachingKeyValueStore) else None
        previous = context.record_context()
        expired = 0
        try:
            for key, write_time in due:
                old = self.inner.get(key)
                if old is None:
                    continue
                # the expiry instant: deterministic, whatever commit found the entry due
                context.set_record_context(RecordContext(write_time + self.ttl.ttl_ms, "", -1, -1, Headers()))
                if caching is not None:
                    caching.delete_below_cache(key)
                else:
                    self.inner.delete(key)
                expired += 1
                if self.ttl.emit_tombstones and self._listener is not None:
                    old_value = old if self._send_old_values else None
                    self._listener(key, None, old_value, context.record_context())
        finally:
            context.set_record_context(previous)
        self.expired_total += expired
        context.metrics.set_counter(EXPIRED_METRIC, float(self.expired_total), **self._labels)
        return expired
