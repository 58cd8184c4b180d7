"""`kappaflow run` start-up mistakes: one line naming the setting, a non-zero exit, before any Kafka call.

Each case runs the CLI as a process, as users and pods do. `bootstrap.servers` names a port where no
broker listens: a check made after a Kafka call would retry for `default.api.timeout.ms` instead of failing
within the test's timeout.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_cli(
    tmp_path: Path, properties: dict[str, object], app: str = "examples.wordcount:build_topology", **env: str
) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "app.properties"
    values = {
        "application.id": "startup-errors",
        "bootstrap.servers": f"127.0.0.1:{_free_port()}",  # nothing listens there
        "state.dir": str(tmp_path / "state"),
        "metrics.port": 0,
        "default.api.timeout.ms": 60000,
        **properties,
    }
    config.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return subprocess.run(
        [sys.executable, "-m", "kappaflow.cli", "run", app, "--config", str(config), "--close-timeout", "5"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def error_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("kappaflow: error:")]


def assert_one_line(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode != 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = error_lines(result)
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.fixture
def taken_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_metrics_port_in_use_names_the_setting_and_port(tmp_path, taken_port):
    result = run_cli(tmp_path, {"metrics.host": "127.0.0.1", "metrics.port": taken_port})
    assert_one_line(result, "metrics.port", f"127.0.0.1:{taken_port}", "in use")


def test_query_port_in_use_names_the_setting_and_port(tmp_path, taken_port):
    properties = {
        "query.http.enabled": "true",
        "query.http.host": "127.0.0.1",
        "application.server": f"localhost:{taken_port}",
    }
    assert_one_line(run_cli(tmp_path, properties), "application.server", f"127.0.0.1:{taken_port}", "in use")


def test_state_dir_that_cannot_be_a_directory_names_the_setting_and_path(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    state_dir = blocker / "state"
    assert_one_line(run_cli(tmp_path, {"state.dir": state_dir}), "state.dir", str(state_dir))


def test_unwritable_state_dir_names_the_setting_and_path(tmp_path):
    """A state directory that exists but cannot be written: read-only by its mode for a user, a read-only
    mount for root (whom modes do not stop; CI runs as root)."""
    state_dir = tmp_path / "read-only"
    state_dir.mkdir()
    as_root = os.geteuid() == 0
    if as_root:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "kappaflow-ro", str(state_dir)], check=True
        )
    else:
        state_dir.chmod(0o500)
    try:
        assert_one_line(run_cli(tmp_path, {"state.dir": state_dir}), "state.dir", str(state_dir))
    finally:
        if as_root:
            subprocess.run(["umount", str(state_dir)], check=True)
        else:
            state_dir.chmod(0o700)


def test_type_error_inside_the_topology_function_keeps_its_traceback(tmp_path):
    result = run_cli(tmp_path, {}, app="tests.runtime.startup_apps:raises_type_error")
    assert result.returncode != 0
    assert "take no arguments" not in result.stderr and "taking no arguments" not in result.stderr
    assert "Traceback" in result.stderr and "startup_apps.py" in result.stderr, result.stderr
    assert "TypeError: can only concatenate str" in result.stderr


def test_a_topology_function_with_arguments_is_one_line(tmp_path):
    result = run_cli(tmp_path, {}, app="tests.runtime.startup_apps:needs_an_argument")
    assert_one_line(
        result,
        "tests.runtime.startup_apps:needs_an_argument",
        "taking no arguments",
        "needs_an_argument(name",
    )


def test_sigterm_while_waiting_for_the_broker_stops_promptly_and_says_so(tmp_path):
    """With the broker down, topic preparation retries for `default.api.timeout.ms` (60 s here), each
    metadata call blocking ~15 s: SIGTERM used to wait all of that out. It stops within seconds now, exits
    non-zero, and its last line says what it was waiting for."""
    import signal
    import time

    port = _free_port()
    config = tmp_path / "app.properties"
    values = {
        "application.id": "stopped-waiting",
        "bootstrap.servers": f"127.0.0.1:{port}",
        "state.dir": str(tmp_path / "state"),
        "metrics.port": -1,
        "default.api.timeout.ms": 60000,
    }
    config.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    log = tmp_path / "run.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "kappaflow.cli", "run", "examples.wordcount:build_topology", "--config",
             str(config), "--log-format", "text"],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 20
            while "cannot connect to Kafka" not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert "cannot connect to Kafka" in log.read_text(), log.read_text()
            time.sleep(1.0)  # inside a metadata call that blocks for its 15 s timeout
            stopped = time.monotonic()
            process.send_signal(signal.SIGTERM)
            code = process.wait(30)
            seconds = time.monotonic() - stopped
        finally:
            if process.poll() is None:
                process.kill()
    lines = log.read_text().splitlines()
    assert code != 0
    assert seconds < 5, f"took {seconds:.1f}s to stop"
    assert f"stopped while waiting for the broker at bootstrap.servers=127.0.0.1:{port}" in lines[-1], lines
