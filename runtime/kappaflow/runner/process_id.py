"""A process id kept in `state.dir`, so an instance restarted on its volume is the same producer.

Under exactly_once_v2 the transactional id must be stable across restarts of one instance: a restart's
`init_transactions` then fences its killed predecessor and aborts the transaction it left open at once.
With a random id that transaction stays open until `transaction.timeout.ms` and holds back the last
stable offset of every partition it wrote (issue 11). `group.instance.id`, when set, is that identity
already; without it the id is generated once and persisted in `<state.dir>/<application.id>/`, as Kafka
Streams persists its process id.

The file is locked (flock) for the life of the process: two instances pointed at one state directory by
mistake must not share a transactional id (they would fence each other forever), so the second gets a
fresh id of its own and a warning.
"""

from __future__ import annotations

import fcntl
import logging
import os
import uuid
from pathlib import Path

log = logging.getLogger(__name__)

PROCESS_ID_FILE = "kappaflow-process-id"


class ProcessId:
    """The id and the lock that makes it this process's own; `release()` on shutdown."""

    def __init__(self, value: str, fd: int) -> None:
        self.value = value
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1


def acquire_process_id(app_dir: Path) -> ProcessId:
    """Read (or create) the persisted id under `app_dir`; a random one when another process holds it."""
    app_dir.mkdir(parents=True, exist_ok=True)
    path = app_dir / PROCESS_ID_FILE
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        value = uuid.uuid4().hex
        log.warning(
            "%s is held by another process sharing this state directory; using the temporary id %s",
            path,
            value,
        )
        return ProcessId(value, -1)
    stored = os.read(fd, 64).decode(errors="replace").strip()
    if not stored or not all(c in "0123456789abcdef" for c in stored):
        stored = uuid.uuid4().hex
        os.ftruncate(fd, 0)
        os.pwrite(fd, stored.encode(), 0)
        os.fsync(fd)
    return ProcessId(stored, fd)
