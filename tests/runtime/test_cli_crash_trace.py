"""A `kappaflow run` process aborted from inside a client library (a librdkafka assertion is a SIGABRT)
leaves a trace: every thread's Python stack on stderr, naming the call each was in (issue 29 item 3).

When to send the signal matters. faulthandler's handler walks every thread's frames from inside the
signal handler, without the GIL and without stopping the other threads (CPython's
`_Py_DumpTracebackThreads` reads each thread state's frame chain, code objects and `sys.modules` as they
are). A process-directed SIGABRT lands on any thread, often one waiting without the GIL (a librdkafka
thread, the main thread in `Thread.start()`), while another thread holds the GIL and runs: if that one
returns from a deep call (its data-stack chunk is unmapped), finishes an import, or a thread ends, the
dump reads freed memory and the process dies of SIGSEGV half-way through the trace ("Fatal Python
error: Aborted", part of a stack, "Fatal Python error: Segmentation fault"). That is CPython's, not
kappaflow's, and reproduces without kappaflow: with two threads recursing 300 deep (past a 16 KiB
data-stack chunk) while a sleeping thread takes the SIGABRT, 3 runs of 90 ended that way; recursing 5
deep, none of 100.

So the test signals the process once its thread set is complete and idle, not while it starts: the
"drain loop" line it used to wait for is logged by the stream thread as it starts, with the GIL,
before it imports and builds its admin client (whose log thread is the last Python thread to start).
The connect warning is written by that log thread 0.5 s after the admin client exists, by which time
the stream thread waits in librdkafka's metadata call (up to 15 s, without the GIL) and every other
thread waits too: nothing the dump reads is being freed, and every thread's stack must be in it.

"By which time" is a timing, though, and on a loaded machine (CI runs the Kafka lane beside this one) a
thread can be held off the CPU for longer than the log thread's 0.5 s, still running Python when the
warning is written. So after the warning the test also waits until the kernel shows every thread of the
process asleep (no thread running or waiting for a CPU) in `QUIET_SAMPLES` readings in a row of
/proc/<pid>/task/*/stat: then the stream thread is inside the metadata call. The threads that wake now
and then (the main loop every 0.2 s, the log and metrics threads every 0.5 s) run a few shallow lines,
which the dump survives (the reproduction above needed 300-deep returns).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# one frame file per Python thread of the process: the main thread's loop, the stream thread (waiting
# for the broker), the admin clients' log server, the application-shutdown watcher
QUIET_SAMPLES = 10
QUIET_INTERVAL_S = 0.01

THREAD_FILES = (
    "kappaflow/cli.py",
    "kappaflow/runner/thread.py",
    "kappaflow/clients/rdkafka_log.py",
    "kappaflow/runner/app_shutdown.py",
)


def test_an_abort_prints_every_threads_stack(tmp_path):
    config = tmp_path / "app.properties"
    # nothing listens on port 1: the stream thread waits for the broker
    config.write_text(
        f"application.id=crash-trace\nbootstrap.servers=127.0.0.1:1\nstate.dir={tmp_path}\nmetrics.port=0\n"
    )
    env = {**os.environ, "WC_INPUT": "in", "WC_OUTPUT": "out", "PYTHONPATH": str(ROOT)}
    command = [
        sys.executable,
        "-m",
        "kappaflow.cli",
        "run",
        "tests.kafka.apps:wordcount",
        "--config",
        str(config),
    ]
    process = subprocess.Popen(
        command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert process.stdout is not None
    lines = []
    deadline = time.monotonic() + 60
    try:
        # until every thread has started and waits: the admin clients' log thread has reported the
        # stream thread's first failed connection (see the module's docstring)
        for line in process.stdout:
            lines.append(line)
            if "cannot connect to Kafka" in line or time.monotonic() > deadline:
                break
        assert _wait_until_quiet(process.pid, deadline=time.monotonic() + 30), "the process never went idle"
        os.kill(process.pid, signal.SIGABRT)  # what a failed librdkafka assertion raises
        rest, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    output = "".join(lines) + rest
    assert process.returncode == -signal.SIGABRT, output
    assert "Fatal Python error: Aborted" in output
    # a process-directed SIGABRT lands on any thread, a librdkafka one too: then no Python thread is
    # "Current thread" and every Python thread is listed as "Thread 0x..."; either way, all of them,
    # each with its frames (the metrics server's is the fifth)
    for name in THREAD_FILES:
        assert name in output, (name, output)
    stacks = output.count("Thread 0x") + output.count("Current thread 0x")
    assert stacks >= 5, output


def _thread_states(pid: int) -> list[str]:
    """Each thread's scheduler state letter (R running or runnable, S/D asleep, ...), from /proc."""
    states = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:  # the thread ended between the listing and the read
            continue
        states.append(stat[stat.rindex(")") + 2])  # the field after "(comm)"; comm may hold spaces
    return states


def _wait_until_quiet(pid: int, deadline: float) -> bool:
    """True once every thread of `pid` was asleep in QUIET_SAMPLES readings in a row."""
    quiet = 0
    while time.monotonic() < deadline:
        states = _thread_states(pid)
        quiet = quiet + 1 if states and all(state in "SD" for state in states) else 0
        if quiet >= QUIET_SAMPLES:
            return True
        time.sleep(QUIET_INTERVAL_S)
    return False
