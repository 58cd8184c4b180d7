"""A task as the runner holds it: the StreamTask, the lock on its state directory, its restore status.

Each task directory is locked (flock on `.lock`) while a task uses it, so two processes sharing a state
volume by mistake fail loudly instead of corrupting RocksDB. Worker processes of one instance
(`num.stream.threads` > 1) share the state directory on purpose: a task handed from one worker to another
by a rebalance may still be closing in its previous owner, so the lock is retried for a while
(`wait_s`) before it counts as held by a stranger.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from kappaflow.api.errors import StreamsError
from kappaflow.tasks.state_manager import ProcessorStateManager
from kappaflow.tasks.task import StreamTask


class TaskDirLock:
    def __init__(self, task_dir: Path, wait_s: float = 0.0) -> None:
        task_dir.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(task_dir / ".lock", os.O_CREAT | os.O_RDWR, 0o644)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError as exc:
                if time.monotonic() >= deadline:
                    os.close(self._fd)
                    raise StreamsError(
                        f"state directory {task_dir} is locked by another process"
                        + (f" (waited {wait_s:.0f}s for it to close the task)" if wait_s else "")
                    ) from exc
                time.sleep(0.05)

    def release(self) -> None:
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1


class ManagedTask:
    """A StreamTask plus its directory lock and, while it reads its changelogs, where they end and which
    are still pending. Its stores' changelog offsets are its state manager's."""

    def __init__(self, task: StreamTask, lock: TaskDirLock, standby: bool) -> None:
        self.task = task
        self.lock = lock
        self.standby = standby
        self.end_offsets: dict[tuple[str, int], int] = {}
        self.pending: set[tuple[str, int]] = set()

    @property
    def state_manager(self) -> ProcessorStateManager:
        """The task's stores and their changelog offsets: what the changelog reader restores into."""
        return self.task.state_manager
