"""One line per component on the console, the full transcript in a file under `.run/logs/`.

`make run` and `make test` fetch several components (Kafka's jars, the Kubernetes binaries, Spark's
connector); a first-time user should see what is being fetched, which version, whether it came from the
cache and how big it is, not Maven's hundreds of "Downloaded from" lines. Those go to a log file whose
path the line names, so a failure can still be read in full.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def log_dir() -> Path:
    """`.run/logs` of the clone (or `KAPPAFLOW_LOG_DIR`), created on demand."""
    path = Path(os.environ.get("KAPPAFLOW_LOG_DIR", ROOT / ".run" / "logs"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def tree_size(paths: Iterable[Path]) -> int:
    return sum(p.stat().st_size for p in paths if p.is_file())


def component_line(what: str, version: str, status: str, size: int | None = None, detail: str = "") -> str:
    """`==> Apache Kafka 4.3.1 (broker jars): cached, 119.3 MB` - the one line a component gets."""
    parts = [status]
    if size is not None:
        parts.append(human_size(size))
    if detail:
        parts.append(detail)
    return f"==> {what} {version}: " + ", ".join(parts)
