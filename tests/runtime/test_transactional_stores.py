"""Transactional stores (exactly_once_v2): uncommitted writes are readable, applied atomically with the
changelog offset on commit, and gone after a crash or a close without a commit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kappaflow.api.errors import InvalidStateStoreError
from kappaflow.api.serdes import Long, String
from kappaflow.state.builders import KeyValueBytesStoreSupplier, Stores
from kappaflow.state.kv_bytes import InMemoryKeyValueBytesStore, RocksDBKeyValueBytesStore
from kappaflow.state.timestamped import ValueAndTimestamp
from kappaflow.state.window_store import WindowStoreBuilder, window_bytes_supplier
from kappaflow.tasks.state_manager import LEGACY_CRASH_MARKER, ProcessorStateManager
from tests.runtime.test_stores import FakeStoreContext, _apply, _queries, keys, ops


def _open(path: Path, transactional: bool = True) -> RocksDBKeyValueBytesStore:
    store = RocksDBKeyValueBytesStore("s")
    store.open_at(path)
    if transactional:
        store.begin_transactions()
    return store


@settings(max_examples=30, deadline=None)
@given(ops, ops, keys, keys, st.binary(max_size=2))
def test_uncommitted_writes_are_read_back_and_discarded_on_reopen(
    committed: list[tuple[str, bytes, bytes | None]],
    uncommitted: list[tuple[str, bytes, bytes | None]],
    lo: bytes,
    hi: bytes,
    prefix: bytes,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "db"
        store = _open(path)
        before = InMemoryKeyValueBytesStore("m")
        after = InMemoryKeyValueBytesStore("m")
        assert _apply(store, committed) == _apply(before, committed)
        store.commit(10)
        _apply(after, committed)
        # read-your-writes: the open transaction's writes overlay the committed state
        assert _apply(store, uncommitted) == _apply(after, uncommitted)
        expected, actual = _queries(after, lo, hi, prefix), _queries(store, lo, hi, prefix)
        expected.pop("count"), actual.pop("count")
        assert actual == expected
        store.close()  # no commit: the transaction's writes must not survive
        reopened = _open(path)
        try:
            assert list(reopened.all()) == list(before.all())
            assert reopened.committed_changelog_offset() == 10
        finally:
            reopened.close()


def test_commit_applies_writes_and_offset_together_and_only_then(tmp_path: Path) -> None:
    store = _open(tmp_path / "db")
    store.put(b"a", b"1")
    store.put(b"b", b"2")
    assert store.uncommitted_count() == 2
    store.close()
    store = _open(tmp_path / "db")
    assert store.get(b"a") is None and store.committed_changelog_offset() is None
    store.put(b"a", b"1")
    store.delete(b"zz")  # a delete of an absent key is not a write
    store.commit(42)
    store.delete(b"a")
    assert store.get(b"a") is None and store.approximate_num_entries() >= 0
    store.commit(None)  # no new offset (a store without changelog records this commit)
    store.close()
    plain = _open(tmp_path / "db", transactional=False)
    try:
        assert plain.get(b"a") is None
        assert plain.committed_changelog_offset() == 42
    finally:
        plain.close()


_CRASHER = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from kappaflow.state.kv_bytes import RocksDBKeyValueBytesStore

    store = RocksDBKeyValueBytesStore("s")
    store.open_at(Path(sys.argv[1]))
    store.begin_transactions()
    for i in range(500):
        store.put(b"k%03d" % i, b"committed")
    store.commit(500)
    for i in range(0, 1000, 2):
        store.put(b"k%03d" % i, b"uncommitted")
    if sys.argv[2] == "commit-then-kill":
        store.commit(1000)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


@pytest.mark.parametrize("mode", ["kill", "commit-then-kill"])
def test_kill_9_leaves_the_last_commit_and_its_offset(tmp_path: Path, mode: str) -> None:
    root = Path(__file__).resolve().parents[2]
    process = subprocess.run(
        [sys.executable, "-c", _CRASHER, str(tmp_path / "db"), mode],
        env={**os.environ, "PYTHONPATH": f"{root}/runtime:{root}"},
        capture_output=True,
        timeout=60,
    )
    assert process.returncode == -signal.SIGKILL, process.stderr.decode()
    store = _open(tmp_path / "db")
    try:
        values = dict(store.all())
        if mode == "kill":
            assert store.committed_changelog_offset() == 500
            assert values == {b"k%03d" % i: b"committed" for i in range(500)}
        else:
            assert store.committed_changelog_offset() == 1000
            assert len(values) == 750
            assert values[b"k000"] == values[b"k998"] == b"uncommitted" and values[b"k001"] == b"committed"
    finally:
        store.close()


class ManagedContext(FakeStoreContext):
    """The fake context, registering stores with a real state manager as a task's context does."""

    def __init__(self, state_dir: Path, manager: ProcessorStateManager, cache_bytes: int | None) -> None:
        super().__init__(state_dir, cache_bytes)
        self.manager = manager

    def register_store(self, store: Any, restore: Any, restore_messages: Any = None) -> None:
        self.manager.register(store, restore, restore_messages)


def _task_store(task_dir: Path, exactly_once: bool, supplier: KeyValueBytesStoreSupplier) -> tuple[Any, Any]:
    manager = ProcessorStateManager(task_dir, 0, lambda s: f"app-{s}-changelog", transactional=exactly_once)
    builder = Stores.key_value_store_builder(supplier, String(), Long()).with_caching_enabled()
    manager.register_builder(builder)
    store = builder.build()
    store.init(ManagedContext(task_dir, manager, cache_bytes=1 << 20))
    return manager, store


def test_state_manager_commits_through_the_cache_and_restores_from_the_committed_offset(
    tmp_path: Path,
) -> None:
    supplier = Stores.persistent_key_value_store("counts")
    manager, store = _task_store(tmp_path, True, supplier)
    store.put("a", 1)
    manager.checkpoint({"counts": 7})  # the cache is empty here: only the offset is committed
    store.put("a", 2)
    manager.flush()  # a commit's flush: the cache empties into the transaction's writes
    assert store.get("a") == 2
    manager.close()  # a crash between flush and the Kafka commit: the transaction's writes are lost
    manager, store = _task_store(tmp_path, True, supplier)
    assert manager.restore_offsets() == {"counts": 7} and store.get("a") is None
    store.put("a", 3)
    manager.flush()
    manager.checkpoint({"counts": 9})
    manager.close()
    manager, store = _task_store(tmp_path, True, supplier)
    try:
        assert manager.restore_offsets() == {"counts": 9} and store.get("a") == 3
    finally:
        manager.close()


def test_a_crash_marker_of_a_pre_transactional_run_wipes_persistent_state(tmp_path: Path) -> None:
    supplier = Stores.persistent_key_value_store("counts")
    manager, store = _task_store(tmp_path, False, supplier)
    store.put("a", 1)
    manager.flush()
    manager.checkpoint({"counts": 5})
    manager.close()
    (tmp_path / LEGACY_CRASH_MARKER).touch()
    manager, store = _task_store(tmp_path, True, supplier)
    try:
        assert manager.restore_offsets() == {"counts": None} and store.get("a") is None
        assert not (tmp_path / LEGACY_CRASH_MARKER).exists()
    finally:
        manager.close()


@pytest.mark.parametrize("exactly_once", [False, True])
@pytest.mark.parametrize(
    ("bounds", "topic_id", "kept"),
    [
        ((0, 9), "id-1", True),  # the changelog the state came from: only the tail past 5 is restored
        ((5, 5), None, True),  # no topic id known (not describable): the offsets alone decide
        ((0, 0), "id-2", False),  # `kappaflow reset` recreated it: empty, the checkpoint is past its end
        ((0, 3), None, False),  # past the end, whatever the id
        ((7, 9), "id-1", False),  # records between the checkpoint and the log start are gone
        ((0, 9), "id-2", False),  # recreated and already refilled past the checkpoint by other instances
    ],
)
def test_a_checkpoint_that_is_not_an_offset_of_the_changelog_wipes_the_store(
    tmp_path: Path, caplog: Any, exactly_once: bool, bounds: tuple[int, int], topic_id: str | None, kept: bool
) -> None:
    supplier = Stores.persistent_key_value_store("counts")
    manager, store = _task_store(tmp_path, exactly_once, supplier)
    assert manager.restore_offsets(
        {("app-counts-changelog", 0): (0, 0)}, {"app-counts-changelog": "id-1"}
    ) == {"counts": None}
    store.put("a", 1)
    manager.flush()
    manager.checkpoint({"counts": 5})
    manager.close()
    manager, store = _task_store(tmp_path, exactly_once, supplier)
    ids = {} if topic_id is None else {"app-counts-changelog": topic_id}
    try:
        starts = manager.restore_offsets({("app-counts-changelog", 0): bounds}, ids)
        assert starts == {"counts": 5 if kept else None}
        assert store.get("a") == (1 if kept else None)
        # the state manager's own: a client an earlier test left to the garbage collector may still log
        warnings = [
            r.getMessage()
            for r in caplog.records
            if r.levelname == "WARNING" and r.name == "kappaflow.tasks.state_manager"
        ]
        if kept:
            assert warnings == []
        else:
            assert len(warnings) == 1
            assert warnings[0].startswith("store counts partition 0: checkpointed changelog offset 5 ")
            assert f"(changelog app-counts-changelog: log start {bounds[0]}, end {bounds[1]})" in warnings[0]
    finally:
        manager.close()


class _PlainStore(InMemoryKeyValueBytesStore):
    persistent = True  # claims persistence without keeping a transaction's writes apart


def test_exactly_once_refuses_a_persistent_store_without_transactions(tmp_path: Path) -> None:
    supplier = KeyValueBytesStoreSupplier("plain", True, lambda name, ts: _PlainStore(name, ts))
    with pytest.raises(InvalidStateStoreError, match="store 'plain': exactly_once_v2 needs"):
        _task_store(tmp_path, True, supplier)
    _task_store(tmp_path, False, supplier)[0].close()  # at_least_once: as before


def test_a_dirty_close_drops_cached_writes_unlogged_and_the_store_reopens(tmp_path: Path) -> None:
    supplier = Stores.persistent_key_value_store("counts")
    manager = ProcessorStateManager(tmp_path, 0, lambda s: f"app-{s}-changelog", transactional=True)
    builder = Stores.key_value_store_builder(supplier, String(), Long()).with_caching_enabled()
    manager.register_builder(builder)
    store = builder.build()
    context = ManagedContext(tmp_path, manager, cache_bytes=1 << 20)
    store.init(context)
    store.put("a", 1)
    manager.close(clean=False)  # an aborted transaction: nothing forwarded, logged or kept
    assert context.logged == []
    manager, store = _task_store(tmp_path, True, supplier)
    try:
        assert store.get("a") is None and manager.restore_offsets() == {"counts": None}
    finally:
        manager.close()


@pytest.mark.parametrize("kind", ["window", "timestamped"])
def test_uncached_window_and_timestamped_stores_are_transactional(tmp_path: Path, kind: str) -> None:
    """Without a cache every write reaches the bytes store at once: still only a commit makes it stay."""

    def open_store() -> tuple[ProcessorStateManager, Any]:
        manager = ProcessorStateManager(tmp_path, 0, lambda s: f"app-{s}-changelog", transactional=True)
        builder: Any
        if kind == "window":
            supplier = window_bytes_supplier("w", True)
            builder = WindowStoreBuilder(supplier, String(), Long(), window_size=1000, retention_ms=10**9)
        else:
            supplier = Stores.persistent_timestamped_key_value_store("w")
            builder = Stores.timestamped_key_value_store_builder(supplier, String(), Long())
        manager.register_builder(builder)
        store = builder.build()
        store.init(ManagedContext(tmp_path, manager, cache_bytes=None))
        return manager, store

    def write(store: Any, value: int) -> None:
        if kind == "window":
            store.put("k", ValueAndTimestamp.make(value, 5), 0)
        else:
            store.put("k", ValueAndTimestamp.make(value, 5))

    def read(store: Any) -> Any:
        found = list(store.fetch("k", 0, 0)) if kind == "window" else [store.get("k")]
        return [v.value for v in (pair[1] if kind == "window" else pair for pair in found) if v is not None]

    manager, store = open_store()
    write(store, 1)
    manager.checkpoint({"w": 3})
    write(store, 2)
    assert read(store) == [2]  # read-your-writes without a cache
    manager.close(clean=False)
    manager, store = open_store()
    try:
        assert read(store) == [1] and manager.restore_offsets() == {"w": 3}
    finally:
        manager.close()
