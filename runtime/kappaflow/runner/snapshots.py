"""Serving a snapshot of a standby task's store to a peer: `GET /v1/snapshots/{task}/{store}`.

A peer that opens a task with no local state asks an instance that keeps a standby of it for a copy of
the store (runner/bootstrap.py), instead of replaying the whole changelog. Only standby copies are
served. A standby applies nothing but changelog records (read_committed under exactly_once_v2), so its
database is, at every step boundary, exactly the changelog's committed prefix up to the offset it has
applied. Active tasks are not served: they are the copies under load, and a snapshot would only save the
new owner the standby's lag. (Under exactly_once_v2 an active task's RocksDB would in fact be consistent
too, since transactional stores keep uncommitted writes out of the database, but nothing here relies
on that.)

Taking the snapshot happens under the instance's state lock, which the stream thread holds for each of
its steps (restore batches, processing, commits, and the warm-ups before it joins): the standby is
between two restore batches, its offset is checkpointed into its database (flushing the memtables) and a
RocksDB checkpoint is made beside the task directories, hard links to the SST files, so the lock is held
for a flush, not a copy. The HTTP side then streams the checkpoint as a tar (runner/snapshot_transfer.py)
with the offset in a header, and deletes it. With `num.stream.threads` > 1 the worker process holding the
standby takes the snapshot (`worker_take_snapshot`) in the state directory the workers share.
"""

from __future__ import annotations

import logging
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kappaflow.api.errors import InvalidStateStorePartitionError
from kappaflow.api.processor import TaskId
from kappaflow.runner.snapshot_transfer import Writable, snapshot_files, tar_size, write_tar
from kappaflow.runner.tasks import TaskManager
from kappaflow.state.kv_bytes import RocksDBKeyValueBytesStore
from kappaflow.tasks.state_manager import innermost

log = logging.getLogger(__name__)

SNAPSHOTS_DIR = ".snapshots"  # under the application's state directory, beside the task directories
OFFSET_HEADER = "X-Kappaflow-Changelog-Offset"
LOCK_WAIT_S = 5.0  # longest wait for the state lock before answering 503 (see `local_snapshot`)
STALE_SNAPSHOT_S = 3600.0  # a snapshot directory left by a crash mid-transfer is removed after this
WORKER_TAKE_SNAPSHOT = f"{__name__}:worker_take_snapshot"


class SnapshotRefused(Exception):
    """No snapshot of this task's store here: `status` 404 (no standby of it), 409 (not a RocksDB
    store), 503 (the state is busy: ask another peer, or restore) or 400 (a malformed request)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Snapshot:
    """A checkpoint directory of one store and the changelog offset its contents reach."""

    directory: Path
    offset: int


def parse_task_id(text: str) -> TaskId:
    """`<sub-topology>_<partition>` -> TaskId; SnapshotRefused(400) for anything else."""
    sub, sep, partition = text.partition("_")
    if not sep or not sub.isdigit() or not partition.isdigit():
        raise SnapshotRefused(400, f"'{text}' is not a task id (<sub-topology>_<partition>)")
    return TaskId(int(sub), int(partition))


def take_snapshot(tm: TaskManager, task: str, store: str) -> Snapshot:
    """Checkpoint the standby copy of `store` of task `task` held by `tm` (call with the state lock held;
    see the module docstring). Raises SnapshotRefused when there is none to give."""
    task_id = parse_task_id(task)
    managed = tm.standby.get(task_id)
    if managed is None:
        held = "an active task" if task_id in tm.active else "no copy"
        raise SnapshotRefused(
            404, f"task {task} is not a standby here ({held}): snapshots come from standbys"
        )
    manager = managed.state_manager
    meta = manager.stores.get(store)
    if meta is None or not meta.logged:
        raise SnapshotRefused(404, f"task {task} has no changelogged store '{store}'")
    bottom = innermost(meta.store)
    if not isinstance(bottom, RocksDBKeyValueBytesStore):
        raise SnapshotRefused(409, f"store '{store}' is {type(bottom).__name__}, not a RocksDB store")
    if manager.offset(store) is None:
        raise SnapshotRefused(409, f"the standby of task {task} has applied nothing of '{store}' yet")
    root = tm.state_root / SNAPSHOTS_DIR
    root.mkdir(parents=True, exist_ok=True)
    remove_stale_snapshots(root)
    manager.flush()
    manager.checkpoint_offsets()  # the database's offset is then what its contents reach
    directory = root / f"{task}-{store}-{uuid.uuid4().hex[:12]}"
    offset = bottom.create_snapshot(directory)
    if offset is None:  # cannot be after the checkpoint above; refuse rather than serve an unknown offset
        shutil.rmtree(directory, ignore_errors=True)
        raise SnapshotRefused(409, f"the standby of task {task} has no checkpointed offset for '{store}'")
    return Snapshot(directory, offset)


def remove_stale_snapshots(root: Path, now: float | None = None) -> None:
    """Delete snapshot directories older than STALE_SNAPSHOT_S (a transfer that crashed its instance)."""
    now = time.time() if now is None else now
    for entry in root.iterdir():
        try:
            if now - entry.stat().st_mtime > STALE_SNAPSHOT_S:
                shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            continue  # removed meanwhile by the transfer that made it


def local_snapshot(streams: Any, task: str, store: str) -> Snapshot:
    """Take the snapshot in this process, or in the worker holding the task's standby (module
    docstring). `streams` is the instance (KafkaStreams) whose query server was asked."""
    if streams.runs_workers:
        try:
            [answer] = streams.ask_workers(WORKER_TAKE_SNAPSHOT, (task, store), task)
        except InvalidStateStorePartitionError as exc:
            raise SnapshotRefused(404, str(exc)) from exc
        if isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[0], int):
            raise SnapshotRefused(*answer)
        directory, offset = answer
        return Snapshot(Path(directory), int(offset))
    # Bounded: this instance's stream thread may itself be fetching a snapshot while it opens a task,
    # holding the lock, possibly from the very peer asking here; waiting longer would only hold both.
    if not streams.state_lock.acquire(timeout=LOCK_WAIT_S):
        raise SnapshotRefused(503, f"busy: the stream thread held its state for {LOCK_WAIT_S:.0f} s")
    try:
        thread = streams.stream_thread
        tm = thread.tm if thread is not None else None
        if tm is None:
            raise SnapshotRefused(404, "this instance holds no tasks yet")
        return take_snapshot(tm, task, store)
    finally:
        streams.state_lock.release()


def worker_take_snapshot(streams: Any, payload: tuple[str, str]) -> Any:
    """Run in a worker (runner/worker_process.py): (directory, offset), or (status, reason) when this
    worker has nothing to give; a worker without the standby answers with the retryable error, so the
    parent goes on to ask the next worker."""
    task, store = payload
    try:
        snapshot = local_snapshot(streams, task, store)
    except SnapshotRefused as refused:
        if refused.status == 404:
            raise InvalidStateStorePartitionError(refused.reason) from refused
        return refused.status, refused.reason
    return str(snapshot.directory), snapshot.offset


def send_snapshot(snapshot: Snapshot, send_headers: Callable[[int, int], None], out: Writable) -> int:
    """Stream `snapshot` as a tar to `out` after `send_headers(length, offset)`; delete its directory in
    any case. Returns the bytes sent."""
    try:
        files = snapshot_files(snapshot.directory)
        send_headers(tar_size(files), snapshot.offset)
        sent = write_tar(snapshot.directory, files, out)
        log.info(
            "sent a snapshot (%s, changelog offset %d): %d files, %.1f MB",
            snapshot.directory.name, snapshot.offset, len(files), sent / 1e6,
        )  # fmt: skip
        return sent
    finally:
        shutil.rmtree(snapshot.directory, ignore_errors=True)
