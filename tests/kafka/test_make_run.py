"""The README's order, `make kafka-up` then `make run`: the example reuses the broker already running.

`kafka_broker start` on a running broker used to print only "Kafka ... already running (pid ...) at
127.0.0.1:<port>", and examples/run_wordcount.py took that whole line for the bootstrap address
(hundreds of "Failed to resolve" lines, then a traceback).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.kafka_fixtures import free_port

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]


def _broker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.harness.kafka_broker", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_kafka_up_then_run_reuses_the_running_broker(tmp_path):
    port, data_dir = free_port(), str(tmp_path / "kafka")
    first = _broker("start", "--port", str(port), "--dir", data_dir)  # `make kafka-up`
    assert first.returncode == 0, first.stdout + first.stderr
    try:
        bootstrap = f"127.0.0.1:{port}"
        assert first.stdout.strip().splitlines()[-1] == bootstrap
        again = _broker("start", "--port", str(port), "--dir", data_dir)  # what `make run` does next
        assert again.returncode == 0, again.stdout + again.stderr
        assert "already running" in again.stdout
        assert again.stdout.strip().splitlines()[-1] == bootstrap

        run = subprocess.run(  # `make run`, for a few seconds
            [
                sys.executable,
                "examples/run_wordcount.py",
                "--seconds",
                "8",
                "--port",
                str(port),
                "--kafka-dir",
                data_dir,
                "--state-dir",
                str(tmp_path / "state"),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=150,
            check=False,
        )
        output = run.stdout + run.stderr
        assert run.returncode == 0, output
        assert "Failed to resolve" not in output and "Traceback" not in output, output
        assert f"==> broker at {bootstrap}" in run.stdout
        assert "the=" in run.stdout, output  # counts were printed
        # the broker it found running is left running
        assert _broker("status", "--dir", data_dir).returncode == 0
    finally:
        _broker("stop", "--dir", data_dir)
