"""A `kappaflow run` process aborted from inside a client library (a librdkafka assertion is a SIGABRT)
leaves a trace: every thread's Python stack on stderr, naming the call each was in (issue 29 item 3)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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
        for line in process.stdout:  # until the stream thread has started (it logs its drain loop)
            lines.append(line)
            if "drain loop" in line or time.monotonic() > deadline:
                break
        os.kill(process.pid, signal.SIGABRT)  # what a failed librdkafka assertion raises
        rest, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    output = "".join(lines) + rest
    assert process.returncode == -signal.SIGABRT
    assert "Fatal Python error: Aborted" in output
    assert "kappaflow/runner/thread.py" in output  # the stream thread's frames, with their calls
    # a process-directed SIGABRT lands on any thread, a librdkafka one too: then no Python thread is
    # "Current thread" and every Python thread is listed as "Thread 0x..."; either way, all of them
    stacks = output.count("Thread 0x") + output.count("Current thread 0x")
    assert stacks >= 2, output
