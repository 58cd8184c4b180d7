"""The end of a restoration checkpoints in the background: the stream thread starts RocksDB's flush of
what it restored and goes on (the task runs); the offsets are written once the flush is done, never
before (restored records skip the write-ahead log, so an offset written first could count records a
crash loses). A commit's checkpoint or a close in between writes its own offsets after a waiting flush.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kappaflow.api.errors import InvalidStateStoreError
from kappaflow.state.kv_bytes import (
    UNLOGGED_RESTORE_MIN,
    InMemoryKeyValueBytesStore,
    RocksDBKeyValueBytesStore,
)
from kappaflow.tasks.state_manager import ProcessorStateManager, flushes_in_background
from tests.runtime.test_bulk_restore import Consumed, open_rocksdb

N = UNLOGGED_RESTORE_MIN  # a batch this large skips the write-ahead log


def restored(store: RocksDBKeyValueBytesStore, start: int, end: int, value: bytes = b"v") -> None:
    store.restore_messages([Consumed("log", 0, i, b"k%06d" % i, value, i) for i in range(start, end)])


def manager_with(tmp_path: Path, store: Any, transactional: bool = False) -> ProcessorStateManager:
    manager = ProcessorStateManager(
        tmp_path, 0, lambda s: f"app-{s}-changelog", transactional=transactional, lazy_checkpoints=True
    )
    manager.register(store, store.restore_batch)
    manager.stores[store.name].logged = True
    return manager


def test_which_stores_can_checkpoint_in_the_background(tmp_path: Path) -> None:
    assert flushes_in_background(InMemoryKeyValueBytesStore("mem"))  # persists nothing: nothing to wait for
    store = open_rocksdb(tmp_path, "s", timestamped=False)
    try:
        assert flushes_in_background(store)
    finally:
        store.close()

    class Persistent:  # a persistent store that can only flush synchronously
        persistent = True

    assert not flushes_in_background(Persistent())


def test_an_offset_cannot_be_stored_alone_past_an_unfinished_flush(tmp_path: Path) -> None:
    store = open_rocksdb(tmp_path, "s", timestamped=False)
    try:
        restored(store, 0, N)
        store.flush_in_background()
        if not store.background_flush_done():
            with pytest.raises(InvalidStateStoreError):
                store.record_offset(N)
        assert store.background_flush_done(wait=True)
        store.record_offset(N)
        assert store.committed_changelog_offset() == N
    finally:
        store.close()


@pytest.mark.parametrize("transactional", [False, True])
def test_the_offsets_are_written_only_once_the_flush_is_done(tmp_path: Path, transactional: bool) -> None:
    store = open_rocksdb(tmp_path, "s", timestamped=False)
    manager = manager_with(tmp_path, store, transactional)
    try:
        restored(store, 0, N)
        manager.stores["s"].offset = N
        assert manager.checkpoint_in_background()
        assert store.committed_changelog_offset() is None  # nothing written while the flush may run
        while not manager.settle_checkpoint():
            pass
        assert store.committed_changelog_offset() == N
        assert manager.settle_checkpoint()  # nothing left waiting
        assert int(store._require().property_int_value("rocksdb.num-entries-active-mem-table")) == 0
    finally:
        manager.close()


def test_a_checkpoint_in_between_supersedes_the_waiting_one(tmp_path: Path) -> None:
    store = open_rocksdb(tmp_path, "s", timestamped=False)
    manager = manager_with(tmp_path, store)
    try:
        restored(store, 0, N)
        manager.stores["s"].offset = N
        assert manager.checkpoint_in_background()
        restored(store, N, 2 * N)
        manager.stores["s"].offset = 2 * N
        manager.checkpoint_offsets()  # waits for the flush, writes the later offset
        assert store.committed_changelog_offset() == 2 * N
        assert manager.settle_checkpoint()  # and the earlier one is never written over it
        assert store.committed_changelog_offset() == 2 * N
    finally:
        manager.close()


def test_a_store_that_cannot_flush_in_the_background_checkpoints_at_once(tmp_path: Path) -> None:
    store = open_rocksdb(tmp_path, "s", timestamped=False)
    manager = manager_with(tmp_path, store)
    try:
        restored(store, 0, N)
        manager.stores["s"].offset = N
        store.flush_in_background = None  # type: ignore[assignment, method-assign]
        assert not manager.checkpoint_in_background()
        assert store.committed_changelog_offset() == N
    finally:
        manager.close()


@pytest.mark.parametrize("transactional", [False, True])
def test_a_clean_close_writes_the_waiting_checkpoint(tmp_path: Path, transactional: bool) -> None:
    store = open_rocksdb(tmp_path, "s", timestamped=False)
    manager = manager_with(tmp_path, store, transactional)
    restored(store, 0, N)
    manager.stores["s"].offset = N
    assert manager.checkpoint_in_background()
    manager.close()
    reopened = open_rocksdb(tmp_path, "s", timestamped=False)
    try:
        assert reopened.committed_changelog_offset() == N
    finally:
        reopened.close()


CRASH_AFTER_BACKGROUND_CHECKPOINT = """
import os, sys
from pathlib import Path
from tests.runtime.test_background_checkpoint import N, manager_with, restored
from tests.runtime.test_bulk_restore import open_rocksdb

store = open_rocksdb(Path(sys.argv[1]), "s", timestamped=True)
manager = manager_with(Path(sys.argv[1]), store, transactional=sys.argv[2] == "eos")
restored(store, 0, N)
manager.stores["s"].offset = N
manager.checkpoint_in_background()
while not manager.settle_checkpoint():
    pass
restored(store, N, 2 * N, b"w")  # the task goes on: later writes, unflushed, past the offset
manager.stores["s"].offset = 2 * N
manager.checkpoint_in_background()  # and a crash before this second flush is seen done
os._exit(0)
"""


@pytest.mark.parametrize("guarantee", ["at_least_once", "eos"])
def test_a_crash_keeps_every_record_the_written_offset_counts(tmp_path: Path, guarantee: str) -> None:
    root = Path(__file__).resolve().parents[2]
    subprocess.run(
        [sys.executable, "-c", CRASH_AFTER_BACKGROUND_CHECKPOINT, str(tmp_path), guarantee],
        cwd=root,
        check=True,
        timeout=60,
    )
    store = open_rocksdb(tmp_path, "s", timestamped=True)
    try:
        offset = store.committed_changelog_offset()
        assert offset == N  # the second offset was never written without its flush
        counted = [k for k, _ in store.range(None, b"k%06d" % (offset - 1))]
        assert counted == [b"k%06d" % i for i in range(offset)]
    finally:
        store.close()
