"""Logging setup: readable text by default, one JSON object per line one switch away.

Every kappaflow logger is named after its module (`kappaflow.runner.thread`, `kappaflow.tasks.task`,
...), so levels can be tuned per package or module with the standard `logging` API. The format is
chosen by `KAPPAFLOW_LOG_FORMAT` (`text` or `json`) or the `format` argument; JSON is what log shippers
index without parsing text.
`file` sends the full log (at `level`) to a file while the console only gets `console_level` and above,
which is how `make run` stays quiet and keeps the details under `.run/logs/`.
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
    def format(self, record: logging.LogRecord) -> str:
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


def resolve_format(explicit: str | None = None) -> str:
    """`json` or `text`: the argument, else `KAPPAFLOW_LOG_FORMAT`, else text. Anything else is an error."""
    chosen = (explicit or os.environ.get(FORMAT_ENV) or "text").strip().lower()
    if chosen not in ("text", "json"):
        raise ValueError(f"{FORMAT_ENV}: expected 'text' or 'json', got {chosen!r}")
    return chosen


def make_formatter(fmt: str) -> logging.Formatter:
    return JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT)


def configure_logging(
    level: str | None = None,
    format: str | None = None,
    file: Path | str | None = None,
    console_level: str | None = None,
) -> None:
    """Replace the root logger's handlers: stderr (at `console_level`, default `level`) and maybe a file.

    `level` defaults to `KAPPAFLOW_LOG_LEVEL`, else INFO.
    """
    fmt = resolve_format(format)
    root_level = (level or os.environ.get(LEVEL_ENV) or "INFO").upper()
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


def configure_json_logging(level: str = "INFO") -> None:
    """JSON lines on stderr (what `kappaflow run` uses in pods)."""
    configure_logging(level, "json")
