"""`kappaflow run`'s logging, as documented: the variables, both formats, librdkafka's lines routed.

Every case runs the CLI as a process with `bootstrap.servers` naming a port where no broker listens, as a
first run with the broker down does; none needs a broker.
"""

from __future__ import annotations

import json
import os
import pty
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from kappaflow import cli
from kappaflow.runner import logs

ROOT = Path(__file__).resolve().parents[2]
TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR)\s+[\w.]+: ")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Run:
    """`kappaflow run` started in the background, its output (stdout and stderr) collected line by line."""

    def __init__(self, tmp_path: Path, *args: str, tty: bool = False, **env: str) -> None:
        self.bootstrap = f"127.0.0.1:{_free_port()}"
        config = tmp_path / "app.properties"
        config.write_text(
            f"application.id=logging\nbootstrap.servers={self.bootstrap}\nstate.dir={tmp_path / 'state'}\n"
            "metrics.port=0\ndefault.api.timeout.ms=60000\n"
        )
        command = [sys.executable, "-m", "kappaflow.cli", "run", "examples.wordcount:build_topology"]
        command += ["--config", str(config), "--close-timeout", "5", *args]
        self.lines: list[tuple[float, str]] = []
        self.started = time.monotonic()
        if tty:  # a terminal, as a developer's shell gives
            master, slave = pty.openpty()
            out: int = slave
        else:
            out = subprocess.PIPE
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), **env},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT if not tty else slave,
        )
        if tty:
            os.close(slave)
            stream = os.fdopen(master, "rb", buffering=0)
        else:
            assert self.process.stdout is not None
            stream = self.process.stdout
        self._reader = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._reader.start()

    def _read(self, stream: object) -> None:
        buffer = b""
        while True:
            try:
                chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)  # type: ignore[attr-defined]
            except OSError:  # the pty's other end closed
                chunk = b""
            if not chunk:
                break
            buffer += chunk
            *complete, buffer = buffer.split(b"\n")
            now = time.monotonic() - self.started
            self.lines.extend((now, line.decode(errors="replace").rstrip("\r")) for line in complete)
        if buffer:
            self.lines.append((time.monotonic() - self.started, buffer.decode(errors="replace")))

    def wait_for(self, predicate, timeout: float) -> tuple[float, str] | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for entry in list(self.lines):
                if predicate(entry[1]):
                    return entry
            if self.process.poll() is not None:
                self._reader.join(2)
                return next((e for e in self.lines if predicate(e[1])), None)
            time.sleep(0.05)
        return None

    def stop(self) -> list[str]:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)
        self._reader.join(5)
        return [line for _, line in self.lines if line.strip()]


def test_env_level_and_json_format_are_honoured_not_read_as_config_keys(tmp_path):
    # KAPPAFLOW_LOG_LEVEL used to fail start-up: "config 'log.level' is not a kappaflow config key"
    run = Run(tmp_path, KAPPAFLOW_LOG_LEVEL="warning", KAPPAFLOW_LOG_FORMAT="json")
    try:
        assert run.wait_for(lambda line: "bootstrap.servers=" in line, 20), run.lines
    finally:
        lines = run.stop()
    entries = [json.loads(line) for line in lines]  # every line is a JSON object
    assert entries and all(e["level"] in ("WARNING", "ERROR") for e in entries), entries
    assert not any("config key" in line for line in lines)


def test_debug_level_from_the_environment_runs(tmp_path):
    run = Run(tmp_path, KAPPAFLOW_LOG_LEVEL="DEBUG")
    try:
        assert run.wait_for(lambda line: "drain loop:" in line, 20), run.lines
    finally:
        lines = run.stop()
    assert not any("kappaflow: error" in line for line in lines), lines


def test_text_format_by_flag_and_by_variable(tmp_path):
    for args, env in ((("--log-format", "text"), {}), ((), {"KAPPAFLOW_LOG_FORMAT": "text"})):
        run = Run(tmp_path, *args, **env)
        try:
            assert run.wait_for(lambda line: "drain loop:" in line, 20), run.lines
        finally:
            lines = run.stop()
        assert lines and all(TEXT_LINE.match(line) for line in lines), lines


def test_default_is_json_off_a_terminal_and_text_on_one(tmp_path):
    run = Run(tmp_path)
    try:
        assert run.wait_for(lambda line: "drain loop:" in line, 20), run.lines
    finally:
        lines = run.stop()
    assert lines and all(line.startswith("{") for line in lines), lines
    run = Run(tmp_path, tty=True)
    try:
        assert run.wait_for(lambda line: "drain loop:" in line, 20), run.lines
    finally:
        lines = run.stop()
    assert lines and all(TEXT_LINE.match(line) for line in lines), lines


def test_flag_level_overrides_the_variable(tmp_path):
    run = Run(tmp_path, "--log-level", "error", KAPPAFLOW_LOG_LEVEL="DEBUG")
    try:
        time.sleep(3)
        assert run.process.poll() is None, run.lines  # still running: it retries the broker
    finally:
        lines = run.stop()
    assert not any('"level": "INFO"' in line or '"level": "WARNING"' in line for line in lines), lines


def _one_error_line(env: dict[str, str], *args: str) -> str:
    config = ROOT / "tests" / "runtime" / "does-not-matter.properties"
    command = [sys.executable, "-m", "kappaflow.cli", "run", "examples.wordcount:build_topology"]
    result = subprocess.run(
        [*command, "--config", str(config), *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr
    return lines[-1]


def test_invalid_values_are_one_line_naming_the_variable_and_the_values():
    line = _one_error_line({"KAPPAFLOW_LOG_LEVEL": "verbose"})
    assert line == (
        "kappaflow: error: KAPPAFLOW_LOG_LEVEL: expected one of DEBUG, INFO, WARNING, ERROR, got 'verbose'"
    )
    line = _one_error_line({"KAPPAFLOW_LOG_FORMAT": "xml"})
    assert line == "kappaflow: error: KAPPAFLOW_LOG_FORMAT: expected 'text' or 'json', got 'xml'"
    line = _one_error_line({}, "--log-level", "verbose")
    assert "--log-level" in line and "DEBUG" in line and "ERROR" in line


def test_broker_down_is_one_warning_naming_the_address_not_librdkafkas_raw_lines(tmp_path):
    run = Run(tmp_path)
    try:
        found = run.wait_for(lambda line: f"bootstrap.servers={run.bootstrap}" in line, 15)
        assert found is not None, run.lines
        assert found[0] < 5.0, found  # seconds after the start
        time.sleep(3)  # librdkafka retries every few tens of milliseconds meanwhile
    finally:
        lines = run.stop()
    assert not any(line.startswith("%") or "|FAIL|" in line for line in lines), lines[:5]
    entries = [json.loads(line) for line in lines]
    warning = next(e for e in entries if run.bootstrap in e["msg"] and e["logger"] == "kappaflow.clients")
    assert warning["level"] == "WARNING" and "Connection refused" in warning["msg"]
    routed = [e for e in entries if e["logger"] == "kappaflow.clients.librdkafka"]
    assert 1 <= len(routed) <= 3, routed  # repeats within 30 s are counted, not written
    assert len(entries) < 20, entries


def test_the_cli_offers_the_levels_the_logs_module_accepts():
    assert cli.LOG_LEVELS == logs.LEVELS
