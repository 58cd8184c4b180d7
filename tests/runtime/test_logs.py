"""Logging setup: text or JSON one switch away, full log to a file while the console stays quiet."""

from __future__ import annotations

import json
import logging

import pytest

from kappaflow.runner.logs import configure_logging, resolve_format


@pytest.fixture
def restore_root_logger():
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for handler in root.handlers:
        if handler not in handlers:
            handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)


def test_env_switches_to_json_and_file_keeps_what_the_console_drops(
    restore_root_logger, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("KAPPAFLOW_LOG_FORMAT", "json")
    log_file = tmp_path / "logs" / "app.log"
    configure_logging(level="INFO", file=log_file, console_level="WARNING")
    log = logging.getLogger("kappaflow.tasks.task")
    log.info("task %s: restored", "0_1")
    log.warning("slow commit")
    console = capsys.readouterr().err.splitlines()
    assert [json.loads(line)["msg"] for line in console] == ["slow commit"]
    entries = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert [(e["level"], e["logger"], e["msg"]) for e in entries] == [
        ("INFO", "kappaflow.tasks.task", "task 0_1: restored"),
        ("WARNING", "kappaflow.tasks.task", "slow commit"),
    ]


def test_text_is_the_default_and_a_bad_format_names_the_variable(monkeypatch):
    monkeypatch.delenv("KAPPAFLOW_LOG_FORMAT", raising=False)
    assert resolve_format() == "text"
    monkeypatch.setenv("KAPPAFLOW_LOG_FORMAT", "xml")
    with pytest.raises(ValueError, match="KAPPAFLOW_LOG_FORMAT.*'xml'"):
        resolve_format()


def test_runtime_loggers_are_named_by_module():
    import kappaflow.state.window_store as window_store
    import kappaflow.tasks.task as task

    assert task.log.name == "kappaflow.tasks.task"
    assert window_store.log.name == "kappaflow.state.window_store"
