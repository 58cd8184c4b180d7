"""A task's state manager: builds its stores, knows their changelogs, restores and checkpoints them.

Stores register themselves (with a restore callback) while they initialize; the manager records which
are logged and where each one's changelog partition is. The last restored or written changelog offset is
kept by the innermost store (inside RocksDB for persistent stores), so a restart restores only the tail.

Under exactly_once_v2 the manager makes every persistent store transactional (KIP-892's idea, see
`kappaflow.state.uncommitted`): a commit's writes reach the database only after the Kafka transaction
committed, atomically with the changelog offset they reach. So a crash (kill -9, or an abort and rewind)
never leaves uncommitted writes behind, and a restarted task restores just the changelog records
committed after its store's offset, where Kafka Streams wipes the store and restores the whole changelog.
In-memory stores persist nothing and restore the whole changelog, as before. `restore_offsets` is the one
place that decides where restoration starts.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kappaflow.api.errors import InvalidStateStoreError
from kappaflow.state.api import (
    ChangelogMessage,
    ChangelogRecord,
    MessagesRestoreCallback,
    MessagesWriter,
    RestoreCallback,
    StateStore,
    TransactionalStore,
)
from kappaflow.state.builders import StoreBuilder
from kappaflow.state.kv_layers import CachingKeyValueStore, find_layer

if TYPE_CHECKING:
    from kappaflow.tasks.native import ChangelogRun

log = logging.getLogger(__name__)

# How far (changelog records, summed over a task's stores) the stores' offsets may run ahead of the last
# checkpoint before a commit writes one under at_least_once: Kafka Streams' StateManagerUtil
# OFFSET_DELTA_THRESHOLD_FOR_CHECKPOINT.
CHECKPOINT_OFFSET_DELTA = 10_000


def checkpoint_due(
    checkpointed: Mapping[str, int], offsets: Mapping[str, int], threshold: int = CHECKPOINT_OFFSET_DELTA
) -> bool:
    """Whether a commit's checkpoint is worth writing under at_least_once: the stores' changelog offsets
    moved more than `threshold` records in all since the last checkpoint (a store never checkpointed
    counts from 0, as in Kafka Streams).

    Writing one means flushing RocksDB's memtables to SST files first (the writes skip the write-ahead
    log, so an offset may count only flushed data). At every 30 s commit that flush took 4-45 ms of the
    stream thread (the word count at 39k lines/s), while the input kept arriving. Skipping it is safe:
    an older offset only restores a longer changelog tail, applied in order over newer local data."""
    delta = sum(abs(offset - checkpointed.get(name, 0)) for name, offset in offsets.items())
    return delta > threshold


def flushes_in_background(store: Any) -> bool:
    """Whether a store's innermost layer can checkpoint the end of a restoration in the background
    (`ProcessorStateManager.checkpoint_in_background`): it persists nothing (its checkpoint is a no-op),
    or it can start a flush without waiting, tell when that flush is done, and store an offset alone."""
    bottom = innermost(store)
    if not getattr(bottom, "persistent", False):
        return True
    return all(
        callable(getattr(bottom, name, None))
        for name in ("flush_in_background", "background_flush_done", "record_offset")
    )


# Left in a task directory by kappaflow versions before transactional stores while an exactly-once task
# could hold uncommitted writes: found on open, the persistent stores are wiped and fully restored.
LEGACY_CRASH_MARKER = ".eos-dirty"


@dataclass
class StoreMetadata:
    name: str
    store: Any
    restore: RestoreCallback
    logged: bool
    changelog_topic: str
    partition: int
    restored_records: int = 0
    # The store's bulk path for consumed records, if it has one (see `restore_messages`).
    restore_messages: MessagesRestoreCallback | None = None
    # The next changelog offset the store's contents include (restored, or written and acknowledged);
    # None until known. The state manager is this fact's one owner.
    offset: int | None = None
    # its changelog is its table's source topic (`reuse.ktable.source.topics`): its offset is the
    # committed input offset, and restoring stops there
    source_topic: bool = False


def innermost(store: Any) -> Any:
    while getattr(store, "inner", None) is not None:
        store = store.inner
    return store


class ProcessorStateManager:
    """A task's stores as state: Kafka Streams' ProcessorStateManager (see the module docstring). It
    exists so the task, the changelog reader and the commit deal with stores through one owner: it
    holds each registered store's metadata (logged or not, its changelog partition, its restore
    callbacks) and is the one owner of each store's changelog offset; it decides where restoration
    starts, applies restored records, flushes, checkpoints and closes the stores."""

    def __init__(
        self,
        task_dir: Path,
        partition: int,
        changelog_topic: Any,
        transactional: bool = False,
        source_changelogs: frozenset[str] = frozenset(),
        lazy_checkpoints: bool = False,
    ) -> None:
        """`source_changelogs`: the stores whose changelog is a source topic of the task.
        `lazy_checkpoints` (a stream task's stores; not the global stores, whose offsets a file of the
        runner's records after `flush`): when not `transactional`, a commit checkpoints only when
        `checkpoint_due`, RocksDB's memtables flush only then, and a clean close checkpoints."""
        self.task_dir = task_dir
        self.source_changelogs = source_changelogs
        self.partition = partition
        self._changelog_topic = changelog_topic
        self.transactional = transactional
        self.lazy_checkpoints = lazy_checkpoints and not transactional
        self.stores: dict[str, StoreMetadata] = {}
        self._builders: dict[str, StoreBuilder] = {}
        self._pending: StoreBuilder | None = None
        # the offsets the last checkpoint wrote, per store (`checkpoint_due`)
        self._checkpointed: dict[str, int] = {}
        # the offsets the end of a restoration reached, written once the flush it started is done
        # (`checkpoint_in_background`); None: no such checkpoint is waiting
        self._deferred: dict[str, int] | None = None

    def register_builder(self, builder: StoreBuilder) -> None:
        self._pending = builder
        self._builders[builder.name] = builder

    def register(
        self,
        store: StateStore,
        restore: RestoreCallback,
        restore_messages: MessagesRestoreCallback | None = None,
    ) -> None:
        builder = self._builders.get(store.name)
        source_topic = store.name in self.source_changelogs
        logged = source_topic or (builder.logging_enabled if builder is not None else False)
        if self.transactional and store.persistent:
            bottom = innermost(store)
            if not isinstance(bottom, TransactionalStore):
                raise InvalidStateStoreError(
                    f"store '{store.name}': exactly_once_v2 needs persistent stores that keep uncommitted "
                    f"writes apart (begin_transactions/commit); {type(bottom).__name__} does not"
                )
            bottom.begin_transactions()
        elif self.lazy_checkpoints and store.persistent:
            # at_least_once: the memtables reach SST files when a checkpoint writes an offset (or the
            # store closes), not at every commit's flush (`checkpoint_due`)
            defer = getattr(innermost(store), "flush_memtables_at_checkpoint", None)
            if defer is not None:
                defer()
        self.stores[store.name] = StoreMetadata(
            store.name,
            store,
            restore,
            logged,
            self._changelog_topic(store.name),
            self.partition,
            restore_messages=restore_messages,
            source_topic=source_topic,
        )

    def logged_stores(self) -> list[StoreMetadata]:
        return [m for m in self.stores.values() if m.logged]

    def committed_offset(self, store_name: str) -> int | None:
        value = innermost(self.stores[store_name].store).committed_changelog_offset()
        return None if value is None else int(value)

    def restore_offsets(
        self,
        bounds: Mapping[tuple[str, int], tuple[int, int]] | None = None,
        topic_ids: Mapping[str, str] | None = None,
    ) -> dict[str, int | None]:
        """Per logged store, the changelog offset its restoration starts from; None: the log's start.

        Called once a task's stores are open, before restoring, for active and standby tasks and under
        either guarantee. Each persistent store's local state is trusted up to the offset stored with
        it: under exactly_once_v2 the stores are transactional, so a crash cannot have left writes past
        that offset; under at_least_once it may have, which that guarantee accepts (the changelog
        records from the offset are applied over them, in order). A stale offset (the task ran elsewhere
        meanwhile) is still correct, only a longer tail. Only a crash of a pre-transactional version
        under exactly_once_v2 (its marker file) makes the persistent stores be wiped here first.

        Local state that belongs to another changelog is wiped (with a warning) and restored in full,
        where Kafka Streams would silently keep it: an offset beyond the changelog's end (`bounds`: its
        log start and high watermark), or below its log start, or a changelog topic id (`topic_ids`)
        other than the one the store recorded. That is the state of an instance restarted with its old
        state directory after `kappaflow reset` recreated the changelogs: kept, it counts the re-read
        input on top of the old counts. A store's first check records the topic id it restores from.
        """
        marker = self.task_dir / LEGACY_CRASH_MARKER
        if marker.exists():
            log.warning("%s: state left by a crashed exactly-once run (before transactional stores); "
                        "wiping it", self.task_dir.name)  # fmt: skip
            for meta in self.stores.values():
                bottom = innermost(meta.store)
                if meta.store.persistent and isinstance(bottom, TransactionalStore):
                    bottom.reset()
            marker.unlink()
        starts: dict[str, int | None] = {}
        for meta in self.logged_stores():
            start = self.committed_offset(meta.name)
            bottom = innermost(meta.store)
            topic_id = (topic_ids or {}).get(meta.changelog_topic)
            if start is not None:
                reason = self._foreign_state(meta, start, bounds, topic_id)
                if reason is not None and isinstance(bottom, TransactionalStore):
                    low, high = (bounds or {}).get((meta.changelog_topic, meta.partition), ("?", "?"))
                    log.warning(
                        "store %s partition %d: checkpointed changelog offset %d %s (changelog %s: log "
                        "start %s, end %s): the local state is not this changelog's (recreated, e.g. by "
                        "`kappaflow reset`?); wiping it and restoring from the changelog",
                        meta.name, meta.partition, start, reason, meta.changelog_topic, low, high,
                    )  # fmt: skip
                    bottom.reset()
                    start = None
            if topic_id is not None and hasattr(bottom, "record_changelog_topic_id"):
                bottom.record_changelog_topic_id(topic_id)
            starts[meta.name] = start
            meta.offset = start
        return starts

    @staticmethod
    def _foreign_state(
        meta: StoreMetadata,
        start: int,
        bounds: Mapping[tuple[str, int], tuple[int, int]] | None,
        topic_id: str | None,
    ) -> str | None:
        """Why a store's checkpointed offset cannot be an offset of its changelog; None if it can be."""
        recorded = getattr(innermost(meta.store), "changelog_topic_id", lambda: None)()
        if topic_id is not None and recorded is not None and recorded != topic_id:
            return f"was taken in changelog topic id {recorded}, which now has id {topic_id}"
        low_high = (bounds or {}).get((meta.changelog_topic, meta.partition))
        if low_high is not None:
            low, high = low_high
            if start > high:
                return "is past the changelog's end"
            if start < low:
                return "is below the changelog's log start"
        return None

    def changelog_partitions(self) -> dict[tuple[str, int], str]:
        """(changelog topic, partition) -> store, for every logged store."""
        return {(meta.changelog_topic, meta.partition): meta.name for meta in self.logged_stores()}

    def offset(self, store_name: str) -> int | None:
        return self.stores[store_name].offset

    def restore(self, store_name: str, records: list[ChangelogRecord], next_offset: int) -> None:
        """Apply changelog records to a store; `next_offset` is the changelog offset after them."""
        meta = self.stores[store_name]
        meta.restore(records)
        meta.restored_records += len(records)
        meta.offset = next_offset

    def restore_messages(
        self,
        store_name: str,
        messages: list[ChangelogMessage],
        next_offset: int,
        writer: MessagesWriter | None = None,
    ) -> None:
        """`restore` for records as the client consumed them: the store's bulk path when it has one (no
        per-record tuple; with the native `writer`, when given), else its `restore` callback with the
        records converted."""
        meta = self.stores[store_name]
        if meta.restore_messages is not None:
            meta.restore_messages(messages, writer)
        else:
            meta.restore([(m.key() or b"", m.value(), m.timestamp()[1]) for m in messages])
        meta.restored_records += len(messages)
        meta.offset = next_offset

    def restore_run(
        self, store_name: str, run: ChangelogRun, next_offset: int, writer: MessagesWriter
    ) -> None:
        """`restore_messages` for records the native core fetched itself (`RestoreQueues`): the store's
        bulk path with `writer` (the core's, which reads the run), else its `restore` callback with the
        records converted by the core."""
        meta = self.stores[store_name]
        if meta.restore_messages is not None:
            meta.restore_messages(run, writer)
        else:
            meta.restore(run.records())
        meta.restored_records += len(run)
        meta.offset = next_offset

    def advance(self, store_name: str, next_offset: int) -> None:
        """The changelog has nothing for the store below `next_offset` (transaction markers, the end)."""
        meta = self.stores[store_name]
        if meta.offset is None or next_offset > meta.offset:
            meta.offset = next_offset

    def record_written(self, written: Mapping[tuple[str, int], int]) -> None:
        """Take the last acknowledged offset of each changelog partition this task wrote to."""
        for meta in self.logged_stores():
            last = written.get((meta.changelog_topic, meta.partition))
            if last is not None and not meta.source_topic:  # a sink to a table's own input is not its log
                meta.offset = last + 1

    def record_consumed(self, committed: Mapping[tuple[str, int], int]) -> None:
        """Take the committed input offsets (the next to consume) as the offsets of the stores whose
        changelog is a source topic: they hold what the task processed, which is what was committed.
        Kafka Streams checkpoints such stores at the consumed offsets the same way."""
        for meta in self.stores.values():
            if meta.source_topic:
                offset = committed.get((meta.changelog_topic, meta.partition))
                if offset is not None:
                    meta.offset = offset

    def source_changelog_partitions(self) -> set[tuple[str, int]]:
        """The changelog partitions that are source partitions of the task (restored only up to the
        committed input offset)."""
        return {(m.changelog_topic, m.partition) for m in self.stores.values() if m.source_topic}

    def checkpoint_offsets(self, enforce: bool = True) -> None:
        """Checkpoint every store at the changelog offset this manager holds for it. A commit's
        checkpoint (`enforce=False`) under at_least_once is written only when `checkpoint_due`, as Kafka
        Streams' `maybeCheckpoint`; transactional stores (exactly_once_v2) apply their writes with it at
        every commit."""
        offsets = {m.name: m.offset for m in self.logged_stores() if m.offset is not None}
        if enforce or not self.lazy_checkpoints or checkpoint_due(self._checkpointed, offsets):
            self.checkpoint(offsets)

    def checkpoint_in_background(self) -> bool:
        """Checkpoint the end of a restoration without holding the stream thread for the flush: start
        each persistent store's flush (RocksDB's threads write the memtables) and keep the offsets, which
        `settle_checkpoint` writes once every flush is done. True: such a checkpoint is waiting; False:
        some store cannot (`flushes_in_background`), so this checkpointed as `checkpoint_offsets` does.

        Why it may wait: restored records skip the write-ahead log, so an offset may count them only once
        they are in SST files, and the synchronous flush of 250k restored records took 0.07-0.1 s of the
        stream thread per task, on the way to RUNNING (bench/restore.py). Kafka Streams also writes no
        offset per restored batch, only at the end of the restoration and at commits. A crash before the
        offsets are written keeps the older ones: the next start restores more, over the same data."""
        if not all(flushes_in_background(m.store) for m in self.stores.values()):
            self.checkpoint_offsets()
            return False
        for meta in self.stores.values():
            if meta.store.persistent:
                innermost(meta.store).flush_in_background()
        self._deferred = {m.name: m.offset for m in self.logged_stores() if m.offset is not None}
        return True

    def settle_checkpoint(self, wait: bool = False) -> bool:
        """Write the offsets `checkpoint_in_background` kept, once every flush it started is done (with
        `wait`, after waiting for them); True when no such checkpoint is left waiting. The offsets alone
        are written (an offset the task's later writes have passed counts less than the store holds,
        which the next start restores over), and a transaction the task opened since stays open."""
        deferred = self._deferred
        if deferred is None:
            return True
        bottoms = [innermost(m.store) for m in self.stores.values() if m.store.persistent]
        if not all(bottom.background_flush_done(wait) for bottom in bottoms):
            return False
        for name, offset in deferred.items():
            bottom = innermost(self.stores[name].store)
            if bottom.persistent:
                bottom.record_offset(offset)
            self._checkpointed[name] = offset
        self._deferred = None
        return True

    def flush(self) -> None:
        for meta in self.stores.values():
            meta.store.flush()

    def checkpoint(self, offsets: dict[str, int]) -> None:
        """Record, per store, the next changelog offset its contents include; transactional stores
        apply their uncommitted writes with it, atomically (all of them, offset or not).

        Under exactly_once_v2 call this only after the Kafka transaction holding those writes and
        changelog records committed: that order is what makes a crash at any point recoverable."""
        self._deferred = None  # these offsets are as far or further, and each store waits for its flush
        for name, meta in self.stores.items():
            bottom = innermost(meta.store)
            offset = offsets.get(name)
            if isinstance(bottom, TransactionalStore):
                bottom.commit(offset)
            elif offset is not None:
                bottom.checkpoint(offset)
            if offset is not None:
                self._checkpointed[name] = offset

    def close(self, clean: bool = True) -> None:
        """Close every store. A dirty close (a crash-like exit of the task) first drops the record
        caches' writes unflushed, and transactional stores discard their uncommitted writes."""
        if not clean:
            for meta in self.stores.values():
                caching = find_layer(meta.store, CachingKeyValueStore)
                if caching is not None:
                    caching.discard()
        elif self._deferred is not None and not self.lazy_checkpoints:
            try:  # the end of a restoration no commit checkpointed since (exactly_once_v2)
                self.settle_checkpoint(wait=True)
            except Exception:
                log.exception("checkpointing the stores of %s on close", self.task_dir.name)
        elif self.lazy_checkpoints:
            # the offsets the commits did not checkpoint (`checkpoint_due`): a clean close records them,
            # so a restart restores no tail (exactly_once_v2's stores checkpointed at every commit)
            try:
                self.checkpoint_offsets()
            except Exception:  # the stores must close all the same; an older offset is only a longer tail
                log.exception("checkpointing the stores of %s on close", self.task_dir.name)
        for meta in self.stores.values():
            try:
                meta.store.close()
            except Exception:  # closing must go on for the other stores
                log.exception("error closing store %s", meta.name)

    def wipe(self) -> None:
        """Delete local state: used when it cannot be trusted (e.g. an EOS task that crashed)."""
        self.close()
        shutil.rmtree(self.task_dir, ignore_errors=True)
