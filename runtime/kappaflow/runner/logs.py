"""Logging setup: readable text by default, one JSON object per line one switch away.

Every kappaflow logger is named after its module (`kappaflow.runner.thread`, `kappaflow.tasks.task`,
...), so levels can be tuned per package or module with the standard `logging` API. The format is
chosen by the `format` argument, else `KAPPAFLOW_LOG_FORMAT` (`text` or `json`), else the caller's
default: text for a library user's process, and for `kappaflow run` `auto`, which is text when stderr is a
terminal and JSON otherwise (a pod's log, a file): what log shippers index without parsing text. The level
is `level`, else `KAPPAFLOW_LOG_LEVEL`, else INFO, one of `LEVELS`. A bad value of either variable is a
`LogSettingError` naming the variable and the values allowed (the CLI prints it as its one error line).
`file` sends the full log (at `level`) to a file while the console only gets `console_level` and above,
which is how `make run` stays quiet and keeps the details under `.run/logs/`.
librdkafka's own lines arrive on the `kappaflow.clients.librdkafka` logger (kappaflow.clients.rdkafka_log).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path

FORMAT_ENV = "KAPPAFLOW_LOG_FORMAT"
LEVEL_ENV = "KAPPAFLOW_LOG_LEVEL"
TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per log line (`ts`, `level`, `logger`, `thread`, `msg`, and `exc` with the traceback),
    for log collectors."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "thread": record.threadName,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


FORMATS = ("text", "json")
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class LogSettingError(ValueError):
    """A log level or format that is not one of the allowed values; the message names where it came from."""


def resolve_format(explicit: str | None = None, default: str = "text") -> str:
    """`json` or `text`: the argument, else `KAPPAFLOW_LOG_FORMAT`, else `default` (`auto`: text on a
    terminal, JSON otherwise). Anything else is an error naming the variable."""
    source, value = ("format", explicit) if explicit else (FORMAT_ENV, os.environ.get(FORMAT_ENV))
    chosen = (value or "").strip().lower()
    if not chosen:
        source, chosen = "default", default
        if chosen == "auto":
            chosen = "text" if sys.stderr.isatty() else "json"
    if chosen not in FORMATS:
        raise LogSettingError(f"{source}: expected 'text' or 'json', got {value or chosen!r}")
    return chosen


def resolve_level(explicit: str | None = None) -> str:
    """One of `LEVELS`: the argument, else `KAPPAFLOW_LOG_LEVEL`, else INFO (any case)."""
    source, value = ("level", explicit) if explicit else (LEVEL_ENV, os.environ.get(LEVEL_ENV))
    chosen = (value or "").strip().upper() or "INFO"
    if chosen not in LEVELS:
        raise LogSettingError(f"{source}: expected one of {', '.join(LEVELS)}, got {value!r}")
    return chosen


def make_formatter(fmt: str) -> logging.Formatter:
    """The formatter for `fmt`: `json` gives JsonFormatter, anything else the text format."""
    return JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT)


def configure_logging(
    level: str | None = None,
    format: str | None = None,
    file: Path | str | None = None,
    console_level: str | None = None,
    default_format: str = "text",
) -> None:
    """Replace the root logger's handlers: stderr (at `console_level`, default `level`) and maybe a file.

    `level` defaults to `KAPPAFLOW_LOG_LEVEL`, else INFO; `format` to `KAPPAFLOW_LOG_FORMAT`, else
    `default_format` (`auto`: text on a terminal, else JSON).
    """
    fmt = resolve_format(format, default_format)
    root_level = resolve_level(level)
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(make_formatter(fmt))
    console.setLevel((console_level or root_level).upper())
    handlers: list[logging.Handler] = [console]
    if file is not None:
        path = Path(file)
        path.parent.mkdir(parents=True, exist_ok=True)
        to_file = logging.FileHandler(path)
        to_file.setFormatter(make_formatter(fmt))
        handlers.append(to_file)
    root = logging.getLogger()
    root.handlers[:] = handlers
    root.setLevel(root_level)
