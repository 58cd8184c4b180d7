"""Store protocols, and the contract between stores and the task that owns them.

Stores are layered as in Kafka Streams: a typed *metered* layer (serdes, metrics) over an optional
*caching* layer (dedup per key, flushed on commit) over an optional *change-logging* layer (every write
becomes a changelog record) over a *bytes* store (memory or RocksDB) ordered by key bytes. Window and
session stores reuse the same layers over a different key layout, so every layer here works on byte keys
and byte values and knows nothing of windows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from kappaflow.api.config import StreamsConfig
from kappaflow.api.metrics import Metrics
from kappaflow.api.processor import TaskId
from kappaflow.api.record import Headers

if TYPE_CHECKING:
    from kappaflow.state.cache import RecordCache

KeyValueBytes = tuple[bytes, bytes]
BytesIterator = Iterator[KeyValueBytes]
# A changelog record handed to a store on restore: key, value (None = tombstone), record timestamp.
ChangelogRecord = tuple[bytes, bytes | None, int]
RestoreCallback = Callable[[list[ChangelogRecord]], None]


class ChangelogMessage(Protocol):
    """A consumed changelog record as the Kafka client returns it (confluent-kafka's `Message`).

    Restoring reads millions of these: a store that takes them as they come (`MessagesRestoreCallback`)
    saves building a `ChangelogRecord` per record. A missing key reads as b"", as in `ChangelogRecord`."""

    def key(self) -> bytes | None: ...

    def value(self) -> bytes | None: ...

    def timestamp(self) -> tuple[int, int]: ...  # (timestamp type, timestamp)


class FetchedRun(Protocol):
    """One changelog partition's records as the native core fetched them from librdkafka, with no
    Python object per record (`kappaflow_native.ChangelogRun`): only its writer reads them."""

    def __len__(self) -> int: ...


class MessagesWriter(Protocol):
    """Writes consumed changelog records into a RocksDB write batch, as a store's Python loop would:
    the native core's, handed to the bulk restore path. `messages` is what that writer reads: a list of
    `ChangelogMessage`s (`kappaflow_native.ChangelogMessages`) or a `FetchedRun`
    (`kappaflow_native.RestoreQueues`), so typed by each writer, not here."""

    def write(self, batch: Any, messages: Any, timestamped: bool, /) -> None: ...


class MessagesRestoreCallback(Protocol):
    """The bulk restore path: one changelog partition's consumed records, in offset order, none an
    error; with the native writer when the runtime has one (the store may ignore a list's writer; a
    `FetchedRun` always comes with the writer that reads it)."""

    def __call__(
        self, messages: list[ChangelogMessage] | FetchedRun, writer: MessagesWriter | None = None, /
    ) -> None: ...


@dataclass(slots=True)
class RecordContext:
    """Where a write came from: used for cache entries and for forwarding on cache flush."""

    timestamp: int
    topic: str
    partition: int
    offset: int
    headers: Headers


ChangelogSend = Callable[[str, bytes, bytes | None, int, int], None]
"""A record collector's `send_changelog(topic, key, value, timestamp, partition)`."""
FlushedWrites = list[tuple[bytes, bytes | None, RecordContext]]
"""A record cache flush's writes, in the order flushed: key, value (None: a delete), record context."""


class StoreContext(Protocol):
    """What a store needs from its task: identity, directories, the changelog and the cache."""

    @property
    def application_id(self) -> str: ...

    @property
    def task_id(self) -> TaskId: ...

    @property
    def app_config(self) -> StreamsConfig: ...

    @property
    def metrics(self) -> Metrics: ...

    @property
    def cache(self) -> RecordCache | None: ...

    def state_dir(self) -> Path: ...

    def changelog_topic(self, store_name: str) -> str: ...

    def log_change(
        self, store_name: str, key: bytes, value: bytes | None, timestamp: int, headers: Headers | None = None
    ) -> None: ...

    def log_flushed(self, store_name: str, writes: FlushedWrites, timestamped: bool) -> None:
        """The changelog records of a record cache flush's writes `(key, value, record context)`, in
        order, as `log_change` logs each: a timestamped store's value split into its timestamp and the
        rest, any other stamped with its record context's. One call per flush instead of
        `log_change`'s frame and lookups per record."""
        ...

    def record_context(self) -> RecordContext: ...

    def current_stream_time_ms(self) -> int:
        """The task's stream time (-1 before its first record): what a store's TTL is measured on."""
        ...

    def current_system_time_ms(self) -> int:
        """The task's wall clock (the test driver's mock clock): a wall-clock TTL's time."""
        ...

    def set_record_context(self, context: RecordContext) -> None: ...

    def flush_failed(self, record: RecordContext) -> None:
        """A caching store's flush of the update `record` made raised: the task names it in the error."""
        ...

    def register_store(
        self,
        store: StateStore,
        restore: RestoreCallback,
        restore_messages: MessagesRestoreCallback | None = None,
    ) -> None:
        """`restore` applies changelog records; `restore_messages`, when given, the same records as the
        client consumed them (the fast path the runtime takes; `restore` serves the test driver)."""


class StateStore(Protocol):
    """Lifecycle common to every store layer."""

    @property
    def name(self) -> str: ...

    @property
    def persistent(self) -> bool: ...

    def init(self, context: StoreContext, root: StateStore) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...

    def is_open(self) -> bool: ...


class KeyValueBytesStore(StateStore, Protocol):
    """A key-value store over byte keys in lexicographic order. Ranges are inclusive at both ends and
    `None` bounds are open, as in Kafka Streams 3.x."""

    def get(self, key: bytes) -> bytes | None: ...

    def put(self, key: bytes, value: bytes | None) -> None: ...

    def put_if_absent(self, key: bytes, value: bytes | None) -> bytes | None: ...

    def put_all(self, entries: list[tuple[bytes, bytes | None]]) -> None: ...

    def delete(self, key: bytes) -> bytes | None: ...

    def range(self, from_key: bytes | None, to_key: bytes | None) -> BytesIterator: ...

    def reverse_range(self, from_key: bytes | None, to_key: bytes | None) -> BytesIterator: ...

    def all(self) -> BytesIterator: ...

    def reverse_all(self) -> BytesIterator: ...

    def prefix_scan(self, prefix: bytes) -> BytesIterator: ...

    def approximate_num_entries(self) -> int: ...

    def restore_batch(self, records: list[ChangelogRecord]) -> None: ...

    def committed_changelog_offset(self) -> int | None: ...

    def checkpoint(self, changelog_offset: int) -> None: ...


@runtime_checkable
class TransactionalStore(Protocol):
    """A persistent store that can keep a transaction's writes apart from its committed state (KIP-892).

    Once `begin_transactions()` is called (by the task's state manager, under exactly_once_v2), writes are
    buffered and visible to the store's own reads; `commit(offset)` applies them, with the changelog
    offset they reach (None: unchanged), in one atomic write; `close()` without a commit discards them.
    Restoration writes bypass the buffer: the changelog records they apply are committed already.
    `reset()` wipes the local state (for state that cannot be trusted)."""

    def begin_transactions(self) -> None: ...

    def commit(self, changelog_offset: int | None) -> None: ...

    def reset(self) -> None: ...


@runtime_checkable
class ExpiryForwarding(Protocol):
    """A store layer that expires entries (kappaflow.state.ttl) and can tell a table's forwarder of
    each: the typed store hands it the same listener the record cache flushes to."""

    def set_expiry_listener(
        self,
        listener: Callable[[bytes, bytes | None, bytes | None, RecordContext], None],
        send_old_values: bool,
    ) -> None: ...


def prefix_upper_bound(prefix: bytes) -> bytes | None:
    """The smallest byte string greater than every string starting with `prefix` (None if unbounded)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])
