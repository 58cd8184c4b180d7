"""The bytes-store layers that only wrap another: the delegating base and the change-logging layer.

Kept apart from kappaflow.state.kv_layers (which re-exports both) so each module stays readable; the
caching and typed layers there build on these.
"""

from __future__ import annotations

from kappaflow.api.errors import InvalidStateStoreError
from kappaflow.state.api import (
    BytesIterator,
    ChangelogRecord,
    ChangelogSend,
    FlushedWrites,
    KeyValueBytesStore,
    StateStore,
    StoreContext,
)


class WrappedBytesStore:
    """Delegates everything to the inner bytes store; subclasses override the writes they observe."""

    def __init__(self, inner: KeyValueBytesStore) -> None:
        self.inner = inner

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def persistent(self) -> bool:
        return self.inner.persistent

    def init(self, context: StoreContext, root: StateStore) -> None:
        self.inner.init(context, root)

    def flush(self) -> None:
        self.inner.flush()

    def close(self) -> None:
        self.inner.close()

    def is_open(self) -> bool:
        return self.inner.is_open()

    def get(self, key: bytes) -> bytes | None:
        return self.inner.get(key)

    def put(self, key: bytes, value: bytes | None) -> None:
        self.inner.put(key, value)

    def put_if_absent(self, key: bytes, value: bytes | None) -> bytes | None:
        return self.inner.put_if_absent(key, value)

    def put_all(self, entries: list[tuple[bytes, bytes | None]]) -> None:
        self.inner.put_all(entries)

    def delete(self, key: bytes) -> bytes | None:
        return self.inner.delete(key)

    def range(self, from_key: bytes | None, to_key: bytes | None) -> BytesIterator:
        return self.inner.range(from_key, to_key)

    def reverse_range(self, from_key: bytes | None, to_key: bytes | None) -> BytesIterator:
        return self.inner.reverse_range(from_key, to_key)

    def all(self) -> BytesIterator:
        return self.inner.all()

    def reverse_all(self) -> BytesIterator:
        return self.inner.reverse_all()

    def prefix_scan(self, prefix: bytes) -> BytesIterator:
        return self.inner.prefix_scan(prefix)

    def approximate_num_entries(self) -> int:
        return self.inner.approximate_num_entries()

    def restore_batch(self, records: list[ChangelogRecord]) -> None:
        self.inner.restore_batch(records)

    def committed_changelog_offset(self) -> int | None:
        return self.inner.committed_changelog_offset()

    def checkpoint(self, changelog_offset: int) -> None:
        self.inner.checkpoint(changelog_offset)


class ChangeLoggingKeyValueBytesStore(WrappedBytesStore):
    """Sends every write to the store's changelog topic. For timestamped stores the changelog record
    carries the plain value with the stored timestamp as its record time (Java's format)."""

    def __init__(self, inner: KeyValueBytesStore, timestamped: bool = False) -> None:
        super().__init__(inner)
        self.timestamped = timestamped
        self._context: StoreContext | None = None
        self._store_name = inner.name

    def init(self, context: StoreContext, root: StateStore) -> None:
        self._context = context
        self._store_name = self.inner.name  # read once: `name` is a property chain through the layers
        self.inner.init(context, root)

    def _log(self, key: bytes, value: bytes | None) -> None:
        context = self._context
        if context is None:
            raise InvalidStateStoreError(f"store '{self.name}' is not initialized")
        record_context = context.record_context()
        if self.timestamped and value is not None:  # split_timestamped, inlined
            timestamp = int.from_bytes(value[:8], "big", signed=True)
            context.log_change(self._store_name, key, value[8:], timestamp, record_context.headers)
        else:
            context.log_change(self._store_name, key, value, record_context.timestamp, record_context.headers)

    def put_all_logged(self, entries: FlushedWrites) -> None:
        """The record cache's flush: every write in one `put_all` (one RocksDB write batch), then each
        one's changelog record with the record context it was written in, as `put` logs it under that
        context. The same store contents and the same changelog records, in the same order, as a `put`
        per entry; one batch instead of a write and three Python frames per entry."""
        context = self._context
        if context is None:
            raise InvalidStateStoreError(f"store '{self.name}' is not initialized")
        self.inner.put_all([(key, value) for key, value, _ in entries])
        context.log_flushed(self._store_name, entries, self.timestamped)

    def put(self, key: bytes, value: bytes | None) -> None:
        self.inner.put(key, value)
        self._log(key, value)

    def put_if_absent(self, key: bytes, value: bytes | None) -> bytes | None:
        old = self.inner.put_if_absent(key, value)
        if old is None:
            self._log(key, value)
        return old

    def put_all(self, entries: list[tuple[bytes, bytes | None]]) -> None:
        self.inner.put_all(entries)
        for key, value in entries:
            self._log(key, value)

    def delete(self, key: bytes) -> bytes | None:
        old = self.inner.delete(key)
        self._log(key, None)
        return old


def log_writes(
    send: ChangelogSend, topic: str, partition: int, writes: FlushedWrites, timestamped: bool
) -> None:
    """`StoreContext.log_flushed` through `send`: each write's changelog record, a timestamped store's
    value split into its timestamp (the first 8 bytes) and the rest, any other stamped with its record
    context's timestamp. The reference of the native core's `log_writes` (runtime/native/src/
    table_flush.rs), which a task's context uses with the core: past the record cache this runs per
    input record."""
    for key, value, record_context in writes:
        if timestamped and value is not None:
            send(topic, key, value[8:], int.from_bytes(value[:8], "big", signed=True), partition)
        else:
            send(topic, key, value, record_context.timestamp, partition)
