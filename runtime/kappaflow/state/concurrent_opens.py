"""Opening the RocksDB databases of several tasks at once: what a rebalance that assigns a thread many
tasks waits for before its first restored record.

Opening a database is mostly file-system work (its directory, MANIFEST, OPTIONS and their syncs), in
RocksDB without Python's lock: four stores opened one after another took 0.14-0.39 s of a restore's
start (bench/restore.py's phase table), time that overlaps when the opens run on threads. Only the
`rocksdict.Rdict` call runs there; the store's options (a user's config setter included) are built on
the calling thread, and a store gets its handle back on that thread, in `wait`. The caller opens its
tasks' stores inside `concurrent_opens()` and touches none of them before `wait` returned (the task
manager opens every task of an assignment, then registers them: runner/tasks.py `create_actives`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from typing import Any

# threads for the opens of one assignment: a thread's tasks are typically a handful, and past a few the
# opens contend for the same disk
MAX_OPEN_THREADS = 4

_current = threading.local()


class ConcurrentOpens:
    """The opens submitted while `concurrent_opens()` is active, and their completion."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(MAX_OPEN_THREADS, thread_name_prefix="rocksdb-open")
        self._pending: list[tuple[Future[Any], Callable[[Any], None]]] = []

    def submit(self, open_db: Callable[[], Any], attach: Callable[[Any], None]) -> None:
        """Run `open_db` on a thread; `wait` hands its result to `attach` (on the calling thread)."""
        self._pending.append((self._pool.submit(open_db), attach))

    def wait(self) -> None:
        """Attach every database opened so far, in the order submitted; then raise the first open's
        error, if any (every successful open is attached first, so its store closes normally)."""
        pending, self._pending = self._pending, []
        first: BaseException | None = None
        for future, attach in pending:
            try:
                db = future.result()
            except BaseException as exc:  # re-raised below, once the others are attached
                first = first or exc
                continue
            attach(db)
        if first is not None:
            raise first

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def current_opens() -> ConcurrentOpens | None:
    """The opens of this thread's `concurrent_opens()` block, or None: open synchronously."""
    opens: ConcurrentOpens | None = getattr(_current, "opens", None)
    return opens


@contextmanager
def concurrent_opens() -> Iterator[ConcurrentOpens]:
    """Stores initialized in the block open their databases on threads; leaving the block waits for all
    of them (attached, and on an error inside the block the opens' own errors are not raised)."""
    if current_opens() is not None:
        raise RuntimeError("concurrent_opens() blocks do not nest")
    opens = ConcurrentOpens()
    _current.opens = opens
    try:
        yield opens
        opens.wait()
    except BaseException:
        with suppress(BaseException):  # the block's own error is the one that matters
            opens.wait()
        raise
    finally:
        _current.opens = None
        opens.close()
