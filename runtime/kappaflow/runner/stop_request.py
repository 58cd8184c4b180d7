"""A stop flag that a signal handler may set: the SIGTERM of a worker process and of `kappaflow run`.

Python runs a signal handler on the main thread between two bytecodes, wherever that thread is, also
inside a section it holds a lock for. `threading.Event.set()` takes the event's internal lock, and
`Event.wait()` holds that lock around its bookkeeping before and after it sleeps; a SIGTERM handled at one
of those bytecodes makes the handler wait for a lock its own thread holds. The main thread then blocks for
good: the instance is never closed, SIGTERM has no further effect, and a worker of `num.stream.threads` > 1
is killed by its parent once close()'s timeout has passed, the symptom of a 69 s replay in
bench/reprocess.py (13 s with one thread). The window is narrow, so it is rare, but nothing bounds it.
Python's `signal` documentation warns against locks in handlers.

`StopRequest.set()` takes no lock: it stores a flag and writes a byte to a pipe, which `wait()` polls,
so a wait ends as soon as a stop is asked, from a handler or from any thread.
"""

from __future__ import annotations

import contextlib
import os
import select


class StopRequest:
    """Set once, by a signal handler or any thread; waited for by the main thread (`threading.Event`'s
    `set` / `is_set` / `wait`, without its lock)."""

    def __init__(self) -> None:
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)  # the handler must never block on a full pipe
        # poll, not select: a process with many files open (stores, sockets) may number the pipe past
        # select's 1024 descriptors
        self._poller = select.poll()
        self._poller.register(self._read_fd, select.POLLIN)
        self._set = False

    def set(self) -> None:
        self._set = True
        write_fd = self._write_fd
        if write_fd < 0:
            return  # closed: nobody waits any more, and the number may name another file by now
        # a full pipe holds earlier requests: a wait wakes up all the same
        with contextlib.suppress(BlockingIOError):
            os.write(write_fd, b"\0")

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float) -> bool:
        """True as soon as a stop is asked (at once if it was), False after `timeout` seconds without."""
        if not self._set:
            self._poller.poll(max(0, round(timeout * 1000)))  # a signal's handler runs, then it resumes
        return self._set

    def close(self) -> None:
        """Release the pipe (a process-long request needs not: its exit does). A later `set()` only sets
        the flag: it never writes to a descriptor number that another file may have taken."""
        write_fd, self._write_fd = self._write_fd, -1
        self._poller.unregister(self._read_fd)
        os.close(self._read_fd)
        os.close(write_fd)
