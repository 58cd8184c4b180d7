"""The typed public DSL: `mypy --strict` on a user's module sees key and value types through a chain."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

USER_MODULE = """
from kappaflow import StreamsBuilder, TimeWindows
from kappaflow.serdes import String

builder = StreamsBuilder()
words = builder.stream("words", key_serde=String(), value_serde=String())
counts = words.filter(lambda k, v: v != "").map_values(lambda v: len(v)).group_by_key().count()
reveal_type(counts)
reveal_type(counts.to_stream())
windows = TimeWindows.of_size_with_no_grace(10)
sums = words.group_by_key().windowed_by(windows).aggregate(lambda: 0.0, lambda k, v, agg: agg + len(v))
reveal_type(sums)
reveal_type(words.select_key(lambda k, v: len(v)).group_by_key().reduce(lambda a, b: a + b))
reveal_type(builder.table("t", key_serde=String(), value_serde=String()).map_values(lambda k, v: [k, v]))
"""

MISTYPED_MODULE = """
from kappaflow import StreamsBuilder
from kappaflow.serdes import Long, String

builder = StreamsBuilder()
builder.stream("t", key_serde=String(), value_serde=Long()).map_values(lambda v: v.upper())
"""


def mypy(tmp_path: Path, source: str) -> list[str]:
    module = tmp_path / "user_app.py"
    module.write_text(source)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", str(module)],
        cwd=ROOT,  # the project's mypy settings find the package from its source folders
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    return [line.split(": ", 1)[1] for line in result.stdout.splitlines() if ": " in line]


def test_mypy_strict_infers_types_through_a_chain(tmp_path: Path) -> None:
    assert mypy(tmp_path, USER_MODULE) == [
        'note: Revealed type is "kappaflow.dsl.ktable.KTable[str, int]"',
        'note: Revealed type is "kappaflow.dsl.kstream.KStream[str, int]"',
        'note: Revealed type is "kappaflow.dsl.ktable.KTable[kappaflow.api.windows.Windowed[str], float]"',
        'note: Revealed type is "kappaflow.dsl.ktable.KTable[int, str]"',
        'note: Revealed type is "kappaflow.dsl.ktable.KTable[str, list[str]]"',
    ]


def test_mypy_strict_reports_a_value_type_mistake(tmp_path: Path) -> None:
    errors = mypy(tmp_path, MISTYPED_MODULE)
    assert errors == ['error: "int" has no attribute "upper"  [attr-defined]']
