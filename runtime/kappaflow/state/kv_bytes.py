"""The innermost key-value stores: ordered maps of bytes, in memory or in RocksDB (rocksdict).

Both keep keys in lexicographic byte order so ranges, prefix scans and (later) time-ordered window keys
mean the same thing in either backend; a property test holds them to identical behaviour. RocksDB keeps
the last checkpointed changelog offset in a separate column family of the same database.

Under exactly_once_v2 the RocksDB store is transactional (see `kappaflow.state.uncommitted`): a
transaction's writes wait in memory and reach the database with the changelog offset they reach in one
atomic write batch after the Kafka transaction commits, so "data" and "how far the data goes" cannot
disagree after a crash and a restart restores only the changelog tail past that offset.
"""

from __future__ import annotations

import bisect
import shutil
import struct
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import rocksdict

from kappaflow.api.errors import InvalidStateStoreError
from kappaflow.state.api import (
    BytesIterator,
    ChangelogMessage,
    ChangelogRecord,
    FetchedRun,
    MessagesWriter,
    StateStore,
    StoreContext,
    prefix_upper_bound,
)
from kappaflow.state.concurrent_opens import current_opens
from kappaflow.state.rocksdb_config import (
    CONFIG_KEY,
    RocksDBConfigSetter,
    bloom_filtered_table,
    resolve_config_setter,
    write_buffer_group_of,
)
from kappaflow.state.uncommitted import Entry, UncommittedWrites, overlay
from kappaflow.state.write_buffer_group import WriteBufferGroup

_META_CF = "kappaflow_meta"
_OFFSET_KEY = b"changelog.offset"
# The id of the changelog topic the offset above counts in: a topic deleted and recreated under the same
# name (`kappaflow reset`) has a new id, and an offset into the old one means nothing in it.
_TOPIC_ID_KEY = b"changelog.topic.id"
# The metadata column family's memtable: RocksDB's minimum write buffer, so its arena grows in 8 KiB blocks.
# It holds the two keys above, rewritten at every checkpoint, but a memtable's arena blocks count in full
# in the write buffer manager a bounded setter shares across stores: with RocksDB's defaults (64 MiB
# buffers, 8 MiB blocks) each store's metadata memtable counted 8 MiB once a few dozen checkpoints had
# filled its first, inline, block, 64 stores far past a 16 MiB budget, and from then on nearly every write
# flushed a tiny memtable (64 stores checkpointed 200 times each, then 300k new keys: 1,036 flushes, 197
# with this buffer; tests/runtime/test_rocksdb_config.py).
_META_WRITE_BUFFER_BYTES = 64 << 10
_ACTIVE_MEMTABLE_BYTES = "rocksdb.cur-size-active-mem-table"
_pack_timestamp = struct.Struct(">q").pack
# A restore batch this large skips RocksDB's write-ahead log (see `restore_messages`); smaller ones, a
# standby's tail, keep it, so a standby applying a trickle does not flush a memtable at every commit.
UNLOGGED_RESTORE_MIN = 1000


def restored_value(value: bytes | None, timestamp: int, timestamped: bool) -> bytes | None:
    """Changelogs of timestamped stores hold the plain value with the timestamp as record time;
    the store keeps `timestamp (8 bytes, big-endian) + value`, as Kafka Streams' timestamped stores do."""
    if value is None or not timestamped:
        return value
    return timestamp.to_bytes(8, "big", signed=True) + value


class InMemoryKeyValueBytesStore:
    """A dict for lookups plus a sorted key list for ordered scans (bisect keeps inserts cheap in C)."""

    persistent = False

    def __init__(self, name: str, timestamped: bool = False) -> None:
        self._name = name
        self.timestamped = timestamped
        self._data: dict[bytes, bytes] = {}
        self._keys: list[bytes] = []
        self._open = False

    @property
    def name(self) -> str:
        return self._name

    def init(self, context: StoreContext, root: StateStore) -> None:
        self._open = True
        context.register_store(root, self.restore_batch)

    def is_open(self) -> bool:
        return self._open

    def flush(self) -> None:
        return None

    def close(self) -> None:
        self._open = False
        self._data.clear()
        self._keys.clear()

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def put(self, key: bytes, value: bytes | None) -> None:
        if value is None:
            self.delete(key)
            return
        if key not in self._data:
            bisect.insort(self._keys, key)
        self._data[key] = value

    def put_if_absent(self, key: bytes, value: bytes | None) -> bytes | None:
        existing = self._data.get(key)
        if existing is None:
            self.put(key, value)
        return existing

    def put_all(self, entries: list[tuple[bytes, bytes | None]]) -> None:
        for key, value in entries:
            self.put(key, value)

    def delete(self, key: bytes) -> bytes | None:
        old = self._data.pop(key, None)
        if old is not None:
            index = bisect.bisect_left(self._keys, key)
            del self._keys[index]
        return old

    def _slice(self, from_key: bytes | None, to_key: bytes | None) -> list[bytes]:
        if from_key is not None and to_key is not None and from_key > to_key:
            return []
        lo = 0 if from_key is None else bisect.bisect_left(self._keys, from_key)
        hi = len(self._keys) if to_key is None else bisect.bisect_right(self._keys, to_key)
        return self._keys[lo:hi]

    def range(self, from_key: bytes | None, to_key: bytes | None) -> BytesIterator:
        data = self._data
        return iter([(k, data[k]) for k in self._slice(from_key, to_key)])

    def reverse_range(self, from_key: bytes | None, to_key: bytes | None) -> BytesIterator:
        data = self._data
        return iter([(k, data[k]) for k in reversed(self._slice(from_key, to_key))])

    def all(self) -> BytesIterator:
        return self.range(None, None)

    def reverse_all(self) -> BytesIterator:
        return self.reverse_range(None, None)

    def prefix_scan(self, prefix: bytes) -> BytesIterator:
        upper = prefix_upper_bound(prefix)
        return iter([(k, v) for k, v in self.range(prefix, None) if upper is None or k < upper])

    def approximate_num_entries(self) -> int:
        return len(self._data)

    def restore_batch(self, records: list[ChangelogRecord]) -> None:
        for key, value, timestamp in records:
            self.put(key, restored_value(value, timestamp, self.timestamped))

    def committed_changelog_offset(self) -> int | None:
        return None

    def checkpoint(self, changelog_offset: int) -> None:
        return None


class RocksDBKeyValueBytesStore:
    """RocksDB through rocksdict in raw (bytes) mode; one database per store per task directory.

    Transactional once `begin_transactions()` is called: writes then go to `_uncommitted` (which reads
    consult first) until `commit`, and `close` without a commit discards them."""

    persistent = True

    def __init__(self, name: str, timestamped: bool = False) -> None:
        self._name = name
        self.timestamped = timestamped
        self._db: Any = None
        self._meta: Any = None
        self._meta_handle: Any = None
        self._path: Path | None = None
        self._uncommitted: UncommittedWrites | None = None
        # Records written without the write-ahead log (restored, or written outside a transaction) and
        # not yet flushed to SST files.
        self._unflushed = False
        # A flush `flush_in_background` started and no one has seen finish: an offset may count the writes
        # before it only once it has (`background_flush_done`, or a waiting flush).
        self._flushing = False
        self._flush_at_checkpoint = False  # see flush_memtables_at_checkpoint
        self._unlogged = rocksdict.WriteOptions()
        # A property at run time; rocksdict's type stub declares it as a method.
        self._unlogged.disable_wal = True  # type: ignore[method-assign, assignment]
        self._config_setter: RocksDBConfigSetter | None = None
        self._write_buffers: WriteBufferGroup | None = None  # the stores sharing this one's memtable budget
        self._app_config: Mapping[str, Any] = {}

    @property
    def name(self) -> str:
        return self._name

    def _options(self) -> Any:
        options = rocksdict.Options(raw_mode=True)
        options.set_block_based_table_factory(bloom_filtered_table())  # a setter may replace it
        # No compression, as Kafka Streams' stores: Snappy made each flush of restored records (the one
        # a restored task waits for before it runs) ~1.7x slower (0.19-0.25 s vs 0.11-0.13 s for 250k
        # records), for state that a changelog backs anyway. A setter may compress.
        options.set_compression_type(rocksdict.DBCompressionType.none())
        if self._config_setter is not None:
            self._config_setter(self._name, options, self._app_config)
        options.create_if_missing(True)
        options.create_missing_column_families(True)
        return options

    def init(self, context: StoreContext, root: StateStore) -> None:
        config = context.app_config
        self._config_setter = resolve_config_setter(config.get(CONFIG_KEY))
        self._write_buffers = write_buffer_group_of(self._config_setter)
        self._app_config = config.as_dict()
        self._path = path = context.state_dir() / "rocksdb" / self._name
        opens = current_opens()
        if opens is None:
            self.open_at(path)
        else:  # a task manager opening many tasks' stores at once (state/concurrent_opens.py)
            path.parent.mkdir(parents=True, exist_ok=True)
            opens.submit(self._opener(path), self._attach)
        context.register_store(root, self.restore_batch, self.restore_messages)

    def open_at(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._path = path
        self._attach(self._opener(path)())

    def _opener(self, path: Path) -> Callable[[], Any]:
        """The open of the database at `path`, to run on any thread: its options are built here (a
        config setter runs on the calling thread), the `Rdict` call there."""
        options = self._options()
        name = self._name

        def open_db() -> Any:
            try:
                return rocksdict.Rdict(str(path), options, column_families={_META_CF: _meta_options()})
            except Exception as exc:
                raise InvalidStateStoreError(f"store '{name}': cannot open RocksDB at {path}: {exc}") from exc

        return open_db

    def _attach(self, db: Any) -> None:
        self._db = db
        self._meta = db.get_column_family(_META_CF)
        self._meta_handle = db.get_column_family_handle(_META_CF)
        if self._write_buffers is not None:
            self._write_buffers.join(self)

    @property
    def path(self) -> Path | None:
        """The database's directory (None until opened)."""
        return self._path

    def _require(self) -> Any:
        if self._db is None:
            raise InvalidStateStoreError(f"store '{self._name}' is not open")
        return self._db

    def is_open(self) -> bool:
        return self._db is not None

    def flush_memtables_at_checkpoint(self) -> None:
        """From now on `flush` leaves the memtables alone: a task's state manager under at_least_once
        calls this, because it writes an offset only through `checkpoint`/`commit`, which flush the
        memtables first, and only every so many records (tasks/state_manager.py's `checkpoint_due`), as
        Kafka Streams flushes RocksDB only when it checkpoints. A store whose offsets another owner records
        after `flush` (the global stores' checkpoint file) keeps flushing there."""
        self._flush_at_checkpoint = True

    def flush(self) -> None:
        # A transactional store's commits are atomic write batches, durable through the write-ahead log
        # against a process crash: flushing memtables at every (100 ms) commit would only make SST files.
        if self._db is not None and self._uncommitted is None and not self._flush_at_checkpoint:
            self._db.flush()
            self._unflushed = self._flushing = False

    def active_memtable_bytes(self) -> int:
        """The memory of the active memtable (0 once closed): what its write buffer group compares."""
        db = self._db
        return 0 if db is None else int(db.property_int_value(_ACTIVE_MEMTABLE_BYTES) or 0)

    def start_memtable_flush(self) -> None:
        """Flush the active memtable without waiting: the write buffer group's, for a store that went
        quiet holding much of the shared budget. The offset bookkeeping is unchanged: writes stay
        `_unflushed` until a waiting flush (a checkpoint's) has seen them in SST files."""
        if self._db is not None:
            self._db.flush(wait=False)

    def flush_in_background(self) -> None:
        """Start flushing the memtables to SST files without waiting: at the end of a restoration, so that
        the task runs while RocksDB's own threads write what it restored (a synchronous flush of 250k
        restored records held the stream thread 0.07-0.1 s per task). Until `background_flush_done`, an
        offset that counts these writes is written only by `commit`/`checkpoint`, which wait for it."""
        if self._db is not None and self._unflushed:
            self._db.flush(wait=False)
            self._unflushed, self._flushing = False, True

    def background_flush_done(self, wait: bool = False) -> bool:
        """Whether every write made before the last `flush_in_background` is in SST files: no memtable
        older than the active one is left, and no flush is pending or running. Writes made since went to
        the active memtable (switched by that flush), so an offset reached by then counts flushed data.
        `wait`: flush now (which waits for the older memtables too), so the answer is True."""
        db = self._db
        if not self._flushing or db is None:
            return True
        if wait:
            db.flush()
            self._unflushed = self._flushing = False
            return True
        for name in ("rocksdb.num-immutable-mem-table", "rocksdb.mem-table-flush-pending",
                     "rocksdb.num-running-flushes"):  # fmt: skip
            if db.property_int_value(name):
                return False
        self._flushing = False
        return True

    def record_offset(self, changelog_offset: int) -> None:
        """Store the changelog offset alone (logged): only for an offset that counts flushed writes
        (`background_flush_done`), and whatever the store's transaction holds stays uncommitted."""
        if self._flushing:
            raise InvalidStateStoreError(f"store '{self._name}': an offset past an unfinished flush")
        self._require()
        self._meta[_OFFSET_KEY] = str(changelog_offset).encode()

    def close(self) -> None:
        if self._uncommitted is not None:
            self._uncommitted.clear()  # never committed: discarded, as a crash would
        if self._db is None:
            return
        if self._unflushed:  # a clean close keeps what was written; a crash replays it from the changelog
            self._db.flush()
            self._unflushed = False
        self._flushing = False  # closing waits for RocksDB's background flushes
        self._meta = None
        self._meta_handle = None
        if self._write_buffers is not None:
            self._write_buffers.leave(self)
        self._db.close()
        self._db = None

    def destroy(self) -> None:
        """Close and delete the files: used when local state must be wiped and restored."""
        self.close()
        if self._path is not None:
            shutil.rmtree(self._path, ignore_errors=True)

    def reset(self) -> None:
        """Wipe the local state and reopen empty (uncommitted writes included), ready to be restored."""
        path = self._path
        if path is None:
            raise InvalidStateStoreError(f"store '{self._name}' was never opened")
        self.destroy()
        self.open_at(path)

    # ----------------------------------------------------------------- snapshots (runner/snapshots.py)
    def create_snapshot(self, directory: Path) -> int | None:
        """Write a RocksDB checkpoint of the database's contents to `directory` (which must not exist) and
        return the changelog offset stored with them. Hard links to the SST files where `directory` is on
        the same file system, so it costs a memtable flush, not a copy. Writes waiting in a transaction
        (uncommitted) are not in the database, so never in a snapshot."""
        db = self._require()
        if self._unflushed or self._flushing:  # unlogged writes live in the memtables only: include them
            db.flush()
            self._unflushed = self._flushing = False
        rocksdict.Checkpoint(db).create_checkpoint(str(directory))
        return self.committed_changelog_offset()

    def replace_with(self, staged: Path) -> None:
        """Replace this store's files by the database in `staged` (a snapshot of a peer's copy) and reopen
        on them. The swap is a rename, so the store's directory holds either its old database or the whole
        new one: a crash in between leaves no directory, which opens empty (and is restored in full)."""
        path = self._path
        if path is None:
            raise InvalidStateStoreError(f"store '{self._name}' was never opened")
        self.close()
        shutil.rmtree(path, ignore_errors=True)
        staged.rename(path)
        self.open_at(path)

    # ----------------------------------------------------------------- transactions
    def begin_transactions(self) -> None:
        """From now on writes wait for `commit` (see the class docstring)."""
        if self._uncommitted is None:
            self._uncommitted = UncommittedWrites()

    def commit(self, changelog_offset: int | None) -> None:
        """Apply the uncommitted writes and the changelog offset they reach (None: keep the stored one)
        in one atomic write batch: a crash leaves the database before or after it, never in between."""
        db = self._require()
        if self._unflushed or self._flushing:  # restored records reach SST files before an offset counts them
            db.flush()  # waits for a background flush too (the memtables it switched are older)
            self._unflushed = self._flushing = False
        batch = rocksdict.WriteBatch(raw_mode=True)
        if self._uncommitted is not None:
            _add_to_batch(batch, self._uncommitted.drain())
        if changelog_offset is not None:
            batch.put(_OFFSET_KEY, str(changelog_offset).encode(), self._meta_handle)
        if batch.len():
            db.write(batch)
            if self._write_buffers is not None:
                self._write_buffers.after_write()

    def uncommitted_count(self) -> int:
        return 0 if self._uncommitted is None else len(self._uncommitted)

    # ----------------------------------------------------------------- reads and writes
    def get(self, key: bytes) -> bytes | None:
        if self._uncommitted is not None:
            written, pending = self._uncommitted.lookup(key)
            if written:
                return pending
        db = self._db  # `_require` inlined: a get of a new key (past the record cache) is per record
        if db is None:
            raise InvalidStateStoreError(f"store '{self._name}' is not open")
        value: bytes | None = db.get(key)
        return value

    def put(self, key: bytes, value: bytes | None) -> None:
        if self._uncommitted is not None:
            self._require()
            self._uncommitted.put(key, value)
            return
        # Without the write-ahead log, as Kafka Streams writes RocksDB: the changelog is the record of
        # truth, and `commit`/`flush` put the memtables in SST files before an offset counts the writes.
        db = self._require()
        if value is None:
            db.delete(key, self._unlogged)
        else:
            db.put(key, value, self._unlogged)
        self._unflushed = True
        if self._write_buffers is not None:
            self._write_buffers.after_write()

    def put_if_absent(self, key: bytes, value: bytes | None) -> bytes | None:
        existing = self.get(key)
        if existing is None:
            self.put(key, value)
        return existing

    def put_all(self, entries: list[tuple[bytes, bytes | None]]) -> None:
        if self._uncommitted is not None:
            self._require()
            self._uncommitted.put_all(entries)
        else:
            self._write_through(entries)

    def _write_through(self, entries: list[Entry]) -> None:
        batch = rocksdict.WriteBatch(raw_mode=True)
        _add_to_batch(batch, entries)
        self._require().write(batch, self._unlogged)  # see put
        self._unflushed = True
        if self._write_buffers is not None:
            self._write_buffers.after_write()

    def delete(self, key: bytes) -> bytes | None:
        old = self.get(key)
        if old is not None:
            self.put(key, None)
        return old

    def _forward(self, from_key: bytes | None, to_key: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        if from_key is not None and to_key is not None and from_key > to_key:
            return
        items = self._require().items(from_key=from_key) if from_key is not None else self._require().items()
        for key, value in items:
            if to_key is not None and key > to_key:
                return
            yield key, value

    def _backward(self, from_key: bytes | None, to_key: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        if from_key is not None and to_key is not None and from_key > to_key:
            return
        db = self._require()
        items = db.items(from_key=to_key, backwards=True) if to_key is not None else db.items(backwards=True)
        for key, value in items:
            if from_key is not None and key < from_key:
                return
            yield key, value

    def range(self, from_key: bytes | None, to_key: bytes | None) -> BytesIterator:
        if not self._uncommitted or (from_key is not None and to_key is not None and from_key > to_key):
            return self._forward(from_key, to_key)
        return overlay(self._uncommitted.in_range(from_key, to_key), self._forward(from_key, to_key), False)

    def reverse_range(self, from_key: bytes | None, to_key: bytes | None) -> BytesIterator:
        if not self._uncommitted or (from_key is not None and to_key is not None and from_key > to_key):
            return self._backward(from_key, to_key)
        pending = self._uncommitted.in_range(from_key, to_key)
        pending.reverse()
        return overlay(pending, self._backward(from_key, to_key), True)

    def all(self) -> BytesIterator:
        return self.range(None, None)

    def reverse_all(self) -> BytesIterator:
        return self.reverse_range(None, None)

    def prefix_scan(self, prefix: bytes) -> BytesIterator:
        upper = prefix_upper_bound(prefix)
        for key, value in self.range(prefix, None):
            if upper is not None and key >= upper:
                return
            yield key, value

    def approximate_num_entries(self) -> int:
        value = self._require().property_int_value("rocksdb.estimate-num-keys")
        return int(value or 0) + self.uncommitted_count()

    def restore_batch(self, records: list[ChangelogRecord]) -> None:
        # Straight to the database, even in a transaction: these are committed changelog records. The
        # offset they reach is stored later (checkpoint/commit); a crash in between replays them again,
        # which converges to the same state because the changelog is applied in order.
        self._write_through([(k, restored_value(v, ts, self.timestamped)) for k, v, ts in records])

    def restore_messages(
        self, messages: list[ChangelogMessage] | FetchedRun, writer: MessagesWriter | None = None
    ) -> None:
        """`restore_batch` for records as consumed, in one write batch with no per-record tuple: the
        runtime's restore path, where the work per record is what bounds the restore rate. `writer`, the
        native core's, fills the batch from the messages' C structs (runtime/native/src/restore.rs), or
        from a run of records it fetched from librdkafka itself (restore_queue.rs);
        without it, the loop below is the reference (a plain loop: C-level `map` chains over the
        records' accessors measured slower).

        A bulk batch skips the write-ahead log, as every RocksDB write of Kafka Streams does (a third of
        the write's cost here). That is safe because the changelog offset is the only thing that says how
        far the data goes: `commit` (and so `checkpoint`) flushes the memtables to SST files before it
        writes an offset. A crash before that loses unflushed restored records and keeps the old offset,
        so the next start restores them again."""
        batch = rocksdict.WriteBatch(raw_mode=True)
        if writer is not None:
            writer.write(batch, messages, self.timestamped)
        elif isinstance(messages, list):
            _restore_into(batch, messages, self.timestamped)
        else:
            raise TypeError("records fetched by the native core are written by it: no writer given")
        if len(messages) >= UNLOGGED_RESTORE_MIN:
            self._require().write(batch, self._unlogged)
            self._unflushed = True
        else:
            self._require().write(batch)
        if self._write_buffers is not None:
            self._write_buffers.after_write()

    def committed_changelog_offset(self) -> int | None:
        raw = self._meta.get(_OFFSET_KEY) if self._meta is not None else None
        return int(raw.decode()) if raw is not None else None

    def checkpoint(self, changelog_offset: int) -> None:
        """Record the offset with whatever the transaction holds (nothing, outside a transaction)."""
        if self._db is not None:
            self.commit(changelog_offset)

    def changelog_topic_id(self) -> str | None:
        """The id of the changelog topic the stored offset counts in (None: never recorded)."""
        raw = self._meta.get(_TOPIC_ID_KEY) if self._meta is not None else None
        return raw.decode() if raw is not None else None

    def record_changelog_topic_id(self, topic_id: str) -> None:
        """Remember which changelog topic the offsets (and contents) come from; written at once."""
        if self._meta is not None and self.changelog_topic_id() != topic_id:
            self._meta[_TOPIC_ID_KEY] = topic_id.encode()


def _meta_options() -> Any:
    """The metadata column family's options: a small memtable (see `_META_WRITE_BUFFER_BYTES`)."""
    options = rocksdict.Options(raw_mode=True)
    options.set_write_buffer_size(_META_WRITE_BUFFER_BYTES)
    return options


def _restore_into(batch: Any, messages: list[ChangelogMessage], timestamped: bool) -> None:
    """The reference of the native writer (`kappaflow_native.ChangelogMessages.write`): a tombstone
    deletes, any other record puts its value, prefixed with its timestamp in a timestamped store; a
    missing key is b""."""
    put, delete = batch.put, batch.delete
    if timestamped:
        pack = _pack_timestamp
        for msg in messages:
            value = msg.value()
            if value is None:
                delete(msg.key() or b"")
            else:
                put(msg.key() or b"", pack(msg.timestamp()[1]) + value)
    else:
        for msg in messages:
            value = msg.value()
            if value is None:
                delete(msg.key() or b"")
            else:
                put(msg.key() or b"", value)


def _add_to_batch(batch: Any, entries: list[Entry]) -> None:
    for key, value in entries:
        if value is None:
            batch.delete(key)
        else:
            batch.put(key, value)
