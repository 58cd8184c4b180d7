"""at_least_once checkpoints as Kafka Streams writes them: a commit checkpoints a task's stores only once
their changelog offsets moved more than 10,000 records since the last checkpoint, RocksDB's memtables
reach SST files only then (not at every commit's flush), and a clean close checkpoints what is left.
The global stores' state manager (not lazy) keeps flushing at every flush: its checkpoint file relies
on it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kappaflow.api.serdes import Long, String
from kappaflow.state.builders import Stores
from kappaflow.tasks.state_manager import (
    CHECKPOINT_OFFSET_DELTA,
    ProcessorStateManager,
    checkpoint_due,
    innermost,
)
from tests.runtime.test_transactional_stores import ManagedContext

CHANGELOG = ("app-counts-changelog", 0)


def test_a_checkpoint_is_due_once_the_offsets_moved_past_the_threshold_in_all():
    assert CHECKPOINT_OFFSET_DELTA == 10_000  # Kafka Streams' OFFSET_DELTA_THRESHOLD_FOR_CHECKPOINT
    assert not checkpoint_due({"a": 100}, {"a": 10_100})
    assert checkpoint_due({"a": 100}, {"a": 10_101})
    assert checkpoint_due({"a": 0, "b": 0}, {"a": 6_000, "b": 4_001})  # summed over the task's stores
    assert not checkpoint_due({}, {"a": 9_000})  # never checkpointed: counted from 0
    assert checkpoint_due({}, {"a": 10_001})
    assert not checkpoint_due({"a": 5}, {})


def _counts(task_dir: Path, lazy: bool) -> tuple[ProcessorStateManager, Any]:
    manager = ProcessorStateManager(task_dir, 0, lambda s: f"app-{s}-changelog", lazy_checkpoints=lazy)
    builder = Stores.key_value_store_builder(Stores.persistent_key_value_store("counts"), String(), Long())
    manager.register_builder(builder.with_caching_enabled())
    store = builder.build()
    store.init(ManagedContext(task_dir, manager, cache_bytes=1 << 20))
    return manager, store


def _in_memtable(store: Any) -> int:
    return int(innermost(store)._require().property_int_value("rocksdb.num-entries-active-mem-table"))


def test_commits_checkpoint_only_past_the_threshold_and_a_clean_close_checkpoints_the_rest(tmp_path: Path):
    manager, store = _counts(tmp_path, lazy=True)
    store.put("a", 1)
    manager.flush()  # a commit's flush: the cache empties into RocksDB, the memtable stays
    assert _in_memtable(store) == 1
    manager.record_written({CHANGELOG: 99})
    manager.checkpoint_offsets(enforce=False)
    assert manager.committed_offset("counts") is None and _in_memtable(store) == 1
    store.put("a", 2)
    manager.flush()
    manager.record_written({CHANGELOG: 10_000})
    manager.checkpoint_offsets(enforce=False)  # 10,001 records since none: written, memtable flushed first
    assert manager.committed_offset("counts") == 10_001 and _in_memtable(store) == 0
    store.put("b", 3)
    manager.flush()
    manager.record_written({CHANGELOG: 10_050})
    manager.checkpoint_offsets(enforce=False)
    assert manager.committed_offset("counts") == 10_001
    manager.close()  # clean: the commits' offset is recorded with the data it counts
    manager, store = _counts(tmp_path, lazy=True)
    try:
        assert manager.restore_offsets() == {"counts": 10_051}
        assert store.get("a") == 2 and store.get("b") == 3
    finally:
        manager.close()


def test_a_crash_keeps_the_last_checkpoint_so_the_tail_is_restored_again(tmp_path: Path):
    manager, store = _counts(tmp_path, lazy=True)
    store.put("a", 1)
    manager.flush()
    manager.record_written({CHANGELOG: 20_000})
    manager.checkpoint_offsets(enforce=False)
    store.put("a", 2)
    manager.flush()
    manager.record_written({CHANGELOG: 20_010})
    manager.checkpoint_offsets(enforce=False)
    manager.close(clean=False)  # no checkpoint: the offset stays at the last one written
    manager, store = _counts(tmp_path, lazy=True)
    try:
        assert manager.restore_offsets() == {"counts": 20_001}
    finally:
        manager.close()


def test_a_state_manager_that_is_not_lazy_flushes_and_checkpoints_at_every_call(tmp_path: Path):
    manager, store = _counts(tmp_path, lazy=False)
    try:
        store.put("a", 1)
        manager.flush()
        assert _in_memtable(store) == 0
        manager.record_written({CHANGELOG: 5})
        manager.checkpoint_offsets(enforce=False)
        assert manager.committed_offset("counts") == 6
    finally:
        manager.close()
