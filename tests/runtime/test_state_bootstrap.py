"""Bootstrapping a store from a peer's standby snapshot (runner/bootstrap.py, runner/snapshots.py,
runner/snapshot_transfer.py): the pure decisions, the tar transfer, and installing a snapshot into a
real RocksDB store through a real state manager, including every way it must fall back to an empty
store (and so a full restore) instead of keeping a half-installed one."""

from __future__ import annotations

import io
import shutil
import tarfile
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kappaflow.api.errors import InvalidStateStorePartitionError
from kappaflow.api.metrics import Metrics
from kappaflow.api.processor import TaskId
from kappaflow.runner import snapshots
from kappaflow.runner.bootstrap import BootstrapSettings, StateBootstrapper, peer_order, wants_snapshot
from kappaflow.runner.snapshot_transfer import (
    SnapshotTransferError,
    read_tar,
    snapshot_files,
    tar_size,
    write_tar,
)
from kappaflow.runner.snapshots import SnapshotRefused, parse_task_id, take_snapshot
from kappaflow.state.builders import Stores
from kappaflow.state.kv_bytes import RocksDBKeyValueBytesStore
from kappaflow.tasks.state_manager import ProcessorStateManager, innermost
from tests.runtime.test_transactional_stores import _task_store

ON = BootstrapSettings(enabled=True, min_records=100, timeout_s=5.0)
TASK = TaskId(1, 0)
FAR = 1e12  # a deadline that never passes


# ----------------------------------------------------------------- pure decisions
def test_a_snapshot_is_wanted_only_for_an_empty_rocksdb_store_with_a_long_changelog() -> None:
    assert wants_snapshot(ON, None, True, 0, 100)
    assert wants_snapshot(ON, None, True, 50, 150)
    assert not wants_snapshot(ON, None, True, 50, 149)  # a short changelog restores as fast
    assert not wants_snapshot(ON, 7, True, 0, 10_000)  # local state: only its tail is restored anyway
    assert not wants_snapshot(ON, None, False, 0, 10_000)  # in-memory: nothing to install into
    assert not wants_snapshot(BootstrapSettings(False, 100, 5.0), None, True, 0, 10_000)
    assert not wants_snapshot(BootstrapSettings(True, 0, 5.0), None, True, 3, 3)  # an empty changelog


def test_peers_are_the_standby_hosts_then_the_others_never_this_instance() -> None:
    assert peer_order(["b:2", "a:1", "me:9", "", "a:1"], [], "me:9") == ["a:1", "b:2"]
    assert peer_order(["c:3"], ["a:1", "c:3", "me:9", "b:2"], "me:9") == ["c:3", "a:1", "b:2"]
    assert peer_order([], ["me:9"], "me:9") == []


def test_task_ids_in_snapshot_paths_are_parsed_strictly() -> None:
    assert parse_task_id("3_12") == TaskId(3, 12)
    for bad in ("3", "a_1", "1_", "_1", "1_2/../x"):
        with pytest.raises(SnapshotRefused) as refused:
            parse_task_id(bad)
        assert refused.value.status == 400


# ----------------------------------------------------------------- the tar transfer
def _files(directory: Path, sizes: dict[str, int]) -> None:
    directory.mkdir(parents=True)
    for name, size in sizes.items():
        (directory / name).write_bytes(bytes((i * 7 + len(name)) % 251 for i in range(size)))


@pytest.mark.parametrize(
    "sizes",
    [{}, {"CURRENT": 16}, {"a.sst": 512, "b.sst": 513, "MANIFEST-000005": 0}, {"big.sst": 300_000}],
)
def test_the_announced_length_is_the_archive_written_and_it_reads_back_whole(
    tmp_path: Path, sizes: dict[str, int]
) -> None:
    _files(tmp_path / "ck", sizes)
    files = snapshot_files(tmp_path / "ck")
    out = io.BytesIO()
    assert write_tar(tmp_path / "ck", files, out) == tar_size(files) == len(out.getvalue())
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as archive:  # a standard archive
        assert sorted(archive.getnames()) == sorted(sizes)
    length = len(out.getvalue())
    assert read_tar(io.BytesIO(out.getvalue()), length, tmp_path / "in", FAR) == length
    for name in sizes:
        assert (tmp_path / "in" / name).read_bytes() == (tmp_path / "ck" / name).read_bytes()


def test_a_truncated_archive_is_refused_even_when_cut_at_a_member_boundary(tmp_path: Path) -> None:
    _files(tmp_path / "ck", {"a.sst": 1024, "b.sst": 1024})
    files = snapshot_files(tmp_path / "ck")
    out = io.BytesIO()
    write_tar(tmp_path / "ck", files, out)
    data = out.getvalue()
    for cut in (
        512 + 1024,
        100,
        len(data) - 1,
    ):  # after a.sst (reads as a valid smaller tar), mid-header, the end
        staging = tmp_path / f"in-{cut}"
        with pytest.raises(SnapshotTransferError):
            read_tar(io.BytesIO(data[:cut]), len(data), staging, FAR)


def _archive(member: tarfile.TarInfo, data: bytes = b"") -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        archive.addfile(member, io.BytesIO(data) if data else None)
    return out.getvalue()


@pytest.mark.parametrize("kind", ["path", "dotdot", "symlink", "directory", "hidden"])
def test_an_archive_member_that_is_not_a_plain_file_is_refused(tmp_path: Path, kind: str) -> None:
    member = tarfile.TarInfo({"path": "x/a.sst", "dotdot": "../a.sst", "hidden": ".a"}.get(kind, "a"))
    if kind == "symlink":
        member.type, member.linkname = tarfile.SYMTYPE, "/etc/passwd"
    elif kind == "directory":
        member.type = tarfile.DIRTYPE
    else:
        member.size = 3
    data = _archive(member, b"abc" if member.isreg() else b"")
    with pytest.raises(SnapshotTransferError, match="unexpected archive member"):
        read_tar(io.BytesIO(data), len(data), tmp_path / "in", FAR)
    assert not (tmp_path / "a.sst").exists() and not (tmp_path / "x").exists()


def test_a_transfer_past_its_deadline_is_refused(tmp_path: Path) -> None:
    _files(tmp_path / "ck", {"a.sst": 100_000})
    out = io.BytesIO()
    write_tar(tmp_path / "ck", snapshot_files(tmp_path / "ck"), out)
    now = iter([0.0, 0.0, 10.0, 10.0, 10.0, 10.0])
    with pytest.raises(SnapshotTransferError, match="timed out"):
        read_tar(
            io.BytesIO(out.getvalue()),
            len(out.getvalue()),
            tmp_path / "in",
            5.0,
            clock=lambda: next(now, 10.0),
        )


# ----------------------------------------------------------------- snapshots of real stores
def _counts_task(task_dir: Path, exactly_once: bool = True) -> tuple[ProcessorStateManager, Any]:
    return _task_store(task_dir, exactly_once, Stores.persistent_key_value_store("counts"))


def _standby_with(tmp_path: Path, entries: int, offset: int) -> tuple[Any, ProcessorStateManager]:
    """A task manager stand-in holding a standby of TASK whose store applied `entries` keys up to
    changelog offset `offset` (applied, not yet checkpointed: take_snapshot must checkpoint it)."""
    manager, _store = _counts_task(tmp_path / "peer" / "app" / str(TASK))
    messages = [_Message(b"k%05d" % i, (i + 1).to_bytes(8, "big")) for i in range(entries)]
    manager.restore_messages("counts", messages, offset)  # type: ignore[arg-type]
    tm = SimpleNamespace(
        standby={TASK: SimpleNamespace(state_manager=manager)},
        active={},
        state_root=tmp_path / "peer" / "app",
    )
    return tm, manager


class _Message:
    def __init__(self, key: bytes, value: bytes | None) -> None:
        self._key, self._value = key, value

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return (1, 0)


def test_a_standby_snapshot_holds_its_contents_with_the_offset_it_applied(tmp_path: Path) -> None:
    tm, manager = _standby_with(tmp_path, 2000, offset=2500)
    try:
        snapshot = take_snapshot(tm, "1_0", "counts")
        assert snapshot.offset == 2500
        copy = RocksDBKeyValueBytesStore("counts")
        copy.open_at(snapshot.directory)
        try:
            assert copy.committed_changelog_offset() == 2500
            assert sum(1 for _ in copy.all()) == 2000
        finally:
            copy.close()
        with pytest.raises(SnapshotRefused) as refused:
            take_snapshot(tm, "1_1", "counts")
        assert refused.value.status == 404
        with pytest.raises(SnapshotRefused) as refused:
            take_snapshot(tm, "1_0", "other")
        assert refused.value.status == 404
    finally:
        manager.close()


def _bootstrapper(
    snapshot_dir: Path, announced: int | None, metrics: Metrics, fail: bool = False
) -> StateBootstrapper:
    """A bootstrapper whose 'peer' hands over `snapshot_dir` through the real tar code."""

    def fetch(peer: str, task: str, store: str, staging: Path, deadline: float) -> tuple[int, int]:
        if fail:
            raise SnapshotTransferError(f"{peer} answered 404")
        out = io.BytesIO()
        files = snapshot_files(snapshot_dir)
        write_tar(snapshot_dir, files, out)
        read_tar(io.BytesIO(out.getvalue()), len(out.getvalue()), staging, deadline)
        return len(out.getvalue()), announced if announced is not None else -1

    return StateBootstrapper(ON, lambda task_id: (["peer:1", "me:2"], ["me:2"]), "me:2", metrics, fetch)


@pytest.mark.parametrize("exactly_once", [True, False])
def test_an_empty_store_is_installed_from_the_snapshot_and_restores_only_the_tail(
    tmp_path: Path, exactly_once: bool
) -> None:
    tm, peer_manager = _standby_with(tmp_path, 3000, offset=3000)
    snapshot = take_snapshot(tm, "1_0", "counts")
    peer_manager.close()
    manager, store = _counts_task(tmp_path / "fresh" / str(TASK), exactly_once)
    metrics = Metrics()
    try:
        bounds = {("app-counts-changelog", 0): (0, 3400)}
        assert _bootstrapper(snapshot.directory, 3000, metrics)(TASK, manager, bounds)
        assert manager.restore_offsets(bounds) == {"counts": 3000}  # the tail: 400 records, not 3400
        assert store.get("k02999") == 3000  # read through the task's own store layers
        assert sum(1 for _ in innermost(manager.stores["counts"].store).all()) == 3000
        assert metrics.counter("bootstrap-records-total", task="1_0", store="counts") == 3000
        assert metrics.counter("bootstrap-bytes-total", task="1_0", store="counts") > 0
        assert not (tmp_path / "fresh" / str(TASK) / "rocksdb" / ".counts.bootstrap").exists()
        # a store with local state is never replaced; a staging directory a crash left is removed
        leftover = tmp_path / "fresh" / str(TASK) / "rocksdb" / ".counts.bootstrap"
        leftover.mkdir()
        (leftover / "000009.sst").write_bytes(b"partial")
        assert not _bootstrapper(snapshot.directory, 3000, metrics)(TASK, manager, bounds)
        assert not leftover.exists()
    finally:
        manager.close()


@pytest.mark.parametrize(
    "failure", ["refused", "offset-mismatch", "no-peers", "short-changelog", "empty-standby"]
)
def test_any_failure_leaves_the_store_empty_for_a_full_restore(tmp_path: Path, failure: str) -> None:
    # "empty-standby": a standby placed a moment ago, which has applied nothing yet (offset 0): taking
    # its snapshot would "bootstrap" nothing and then replay the whole changelog anyway
    offset = 0 if failure == "empty-standby" else 500
    tm, peer_manager = _standby_with(tmp_path, 0 if failure == "empty-standby" else 500, offset=offset)
    snapshot = take_snapshot(tm, "1_0", "counts")
    peer_manager.close()
    manager, _store = _counts_task(tmp_path / "fresh" / str(TASK))
    metrics = Metrics()
    bounds = {("app-counts-changelog", 0): (0, 50 if failure == "short-changelog" else 600)}
    bootstrap = _bootstrapper(snapshot.directory, offset - 1 if failure == "offset-mismatch" else offset,
                              metrics, fail=failure == "refused")  # fmt: skip
    if failure == "no-peers":
        bootstrap = StateBootstrapper(ON, lambda task_id: (["me:2"], ["me:2"]), "me:2", metrics)
    try:
        assert not bootstrap(TASK, manager, bounds)
        assert manager.restore_offsets(bounds) == {"counts": None}  # restored from the log start
        assert sum(1 for _ in innermost(manager.stores["counts"].store).all()) == 0
        failures = metrics.counter("bootstrap-failures-total", task="1_0", store="counts")
        assert failures == (1 if failure in ("refused", "offset-mismatch", "empty-standby") else 0)
        assert metrics.counter("bootstrap-records-total", task="1_0", store="counts") == 0
        assert list((tmp_path / "fresh" / str(TASK) / "rocksdb").iterdir()) == [
            tmp_path / "fresh" / str(TASK) / "rocksdb" / "counts"
        ]
    finally:
        manager.close()
        shutil.rmtree(snapshot.directory, ignore_errors=True)


def test_a_snapshot_request_waits_for_the_state_lock_only_so_long(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stream thread holds the lock while it opens tasks, possibly fetching from the very peer that
    asks it for a snapshot now: the request answers 503 rather than wait for that."""
    monkeypatch.setattr(snapshots, "LOCK_WAIT_S", 0.05)
    lock = threading.RLock()
    streams = SimpleNamespace(runs_workers=False, state_lock=lock, stream_thread=None)
    with pytest.raises(SnapshotRefused) as refused:
        snapshots.local_snapshot(streams, "1_0", "counts")
    assert refused.value.status == 404  # free lock, no tasks yet
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            release.wait(5)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(5)
    try:
        with pytest.raises(SnapshotRefused) as refused:
            snapshots.local_snapshot(streams, "1_0", "counts")
        assert refused.value.status == 503
    finally:
        release.set()
        holder.join(5)


def test_with_worker_processes_the_worker_holding_the_standby_takes_the_snapshot(tmp_path: Path) -> None:
    """`num.stream.threads` > 1: the parent's server asks the workers in turn (runner/workers.py
    `call_for_key`); a worker without the standby answers with the retryable error, the one holding
    it with the checkpoint's directory and offset, which the parent then streams."""
    tm, manager = _standby_with(tmp_path, 100, offset=120)
    holder = SimpleNamespace(
        runs_workers=False, state_lock=threading.RLock(), stream_thread=SimpleNamespace(tm=tm)
    )
    empty = SimpleNamespace(
        runs_workers=False,
        state_lock=threading.RLock(),
        stream_thread=SimpleNamespace(tm=SimpleNamespace(standby={}, active={}, state_root=tmp_path)),
    )

    def ask_workers(target: str, payload: Any, task_id: str | None = None) -> list[Any]:
        assert target == snapshots.WORKER_TAKE_SNAPSHOT and task_id == payload[0]
        for worker in (empty, holder):
            try:
                return [snapshots.worker_take_snapshot(worker, payload)]
            except InvalidStateStorePartitionError:
                continue
        raise InvalidStateStorePartitionError("no worker has it")

    parent = SimpleNamespace(runs_workers=True, ask_workers=ask_workers)
    try:
        snapshot = snapshots.local_snapshot(parent, "1_0", "counts")
        assert snapshot.offset == 120 and (snapshot.directory / "CURRENT").is_file()
        with pytest.raises(SnapshotRefused) as refused:
            snapshots.local_snapshot(parent, "1_1", "counts")
        assert refused.value.status == 404
        out = io.BytesIO()
        headers: list[tuple[int, int]] = []
        sent = snapshots.send_snapshot(snapshot, lambda length, offset: headers.append((length, offset)), out)
        assert headers == [(sent, 120)] and len(out.getvalue()) == sent
        assert not snapshot.directory.exists()  # deleted once sent
    finally:
        manager.close()


def test_the_timeout_bounds_the_whole_bootstrap_of_a_store_over_every_peer(tmp_path: Path) -> None:
    """The stream thread waits for the transfer: unresponsive peers share one deadline, not one each."""
    manager, _store = _counts_task(tmp_path / "fresh" / str(TASK))
    now = [0.0]
    asked: list[tuple[str, float]] = []

    def hanging(peer: str, task: str, store: str, staging: Path, deadline: float) -> tuple[int, int]:
        asked.append((peer, deadline))
        now[0] += 3.0  # each peer hangs 3 s, then times out
        raise SnapshotTransferError(f"{peer}: timed out")

    settings = BootstrapSettings(enabled=True, min_records=100, timeout_s=5.0)
    peers = (["a:1", "b:1"], ["c:1", "d:1"])
    bootstrap = StateBootstrapper(settings, lambda task_id: peers, "me:2", Metrics(), hanging, lambda: now[0])
    try:
        assert not bootstrap(TASK, manager, {("app-counts-changelog", 0): (0, 1000)})
        assert asked == [("a:1", 5.0), ("b:1", 5.0)]  # c and d were never asked: the 5 s were spent
    finally:
        manager.close()
