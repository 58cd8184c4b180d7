"""The stop flag SIGTERM sets in a worker process and in `kappaflow run` (runner/stop_request.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

from kappaflow.runner.stop_request import StopRequest

# Runs in a child: a handler that deadlocks its own main thread can only be seen from outside.
SIGTERM_AT_EVERY_LINE_OF_WAIT = textwrap.dedent(
    """
    import signal
    import sys

    from kappaflow.runner.stop_request import StopRequest
    from kappaflow.runner.worker_process import stop_on_sigterm


    def traced_wait(stop, signal_at):
        # stop.wait(0), its n-th executed line raising SIGTERM: Python runs the handler right there,
        # on this thread, as it does for a signal arriving between two bytecodes of that line.
        seen = 0

        def tracer(frame, event, arg):
            nonlocal seen
            if event == "line":
                seen += 1
                if seen == signal_at:
                    signal.raise_signal(signal.SIGTERM)
            return tracer

        sys.settrace(tracer)
        try:
            return stop.wait(0)
        finally:
            sys.settrace(None)


    probe = StopRequest()
    lines = 0

    def count(frame, event, arg):
        global lines
        lines += event == "line"
        return count

    sys.settrace(count)
    probe.wait(0)
    sys.settrace(None)
    assert lines > 0, "the wait ran no traced line"
    for signal_at in range(1, lines + 1):
        stop = StopRequest()
        stop_on_sigterm(stop)
        assert traced_wait(stop, signal_at), f"SIGTERM at line {signal_at} of the wait was lost"
        stop.close()
    print(f"stopped with SIGTERM at each of the wait's {lines} lines")
    """
)


def test_sigterm_at_any_point_of_the_workers_wait_stops_it():
    """A worker's main thread waits on its stop flag between status reports; SIGTERM's handler sets the
    flag on that same thread, wherever it is. With a threading.Event the handler waits for the lock
    Event.wait() holds at some of those points: the worker never stops and its parent kills it after
    close()'s 60 s (the symptom of a 69 s replay of bench/reprocess.py). The child delivers SIGTERM at
    each line the wait executes, in turn; a deadlock would leave it running until the (generous) timeout."""
    result = subprocess.run(
        [sys.executable, "-c", SIGTERM_AT_EVERY_LINE_OF_WAIT],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "stopped with SIGTERM at each of the wait's" in result.stdout


def test_a_stop_asked_from_another_thread_ends_the_wait():
    stop = StopRequest()
    try:
        assert not stop.wait(0) and not stop.is_set()
        threading.Thread(target=stop.set).start()
        assert stop.wait(60)  # returns as soon as the byte arrives
        assert stop.is_set() and stop.wait(0)
        for _ in range(100_000):  # far more requests than the pipe holds: set() never blocks
            stop.set()
        assert stop.wait(0)
    finally:
        stop.close()


def test_a_stop_asked_after_close_writes_to_no_descriptor():
    """A signal handled after close() must not write its byte to whatever file reuses the pipe's number."""
    stop = StopRequest()
    stop.close()
    read_fd, write_fd = os.pipe()  # likely takes the numbers the request just released
    try:
        os.set_blocking(read_fd, False)
        stop.set()
        assert stop.is_set()
        try:
            leaked = os.read(read_fd, 1)
        except BlockingIOError:
            leaked = b""
        assert leaked == b""
    finally:
        os.close(read_fd)
        os.close(write_fd)
