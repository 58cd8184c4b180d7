"""The getting-started flow on a real broker, as written: the page's topic-creation step (run twice: the
second run finds the topics), its `examples/app.properties` (the page shows the file's settings), and
`kappaflow run examples.wordcount:build_topology --config examples/app.properties` counting a line, with
the broker address and state directory given as the page says, by `KAPPAFLOW_*` variables."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.kafka.streams_support import (
    kill_if_running,
    latest_counts,
    produce_lines,
    read_topic,
    wait_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "getting-started.md"
PROPERTIES = ROOT / "examples" / "app.properties"
PAGE_BROKER = "127.0.0.1:9092"


def _block(language: str, containing: str) -> str:
    blocks = re.findall(rf"^```{language}\n(.*?)^```", PAGE.read_text(), re.MULTILINE | re.DOTALL)
    (found,) = [b for b in blocks if containing in b]
    return str(found)


def test_the_page_shows_the_example_properties_file() -> None:
    lines = PROPERTIES.read_text().splitlines()
    while lines[0].startswith("#"):  # the file's header says how to use it
        lines.pop(0)
    assert _block("properties", "application.id=") == "\n".join(lines) + "\n"


def test_create_topics_then_run_with_app_properties(kafka_bootstrap: str, tmp_path: Path) -> None:
    script = _block("bash", "create_topics").split("<<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0]
    script = script.replace(PAGE_BROKER, kafka_bootstrap)
    for expected in ("created|exists", "exists"):
        ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        assert ran.returncode == 0, ran.stderr
        assert re.fullmatch(rf"(({expected}) wordcount-(input|output)\n){{2}}", ran.stdout), ran.stdout

    command = _block("bash", "kappaflow run").split()
    assert command[0] == ".venv/bin/kappaflow"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "KAPPAFLOW_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "KAPPAFLOW_APPLICATION_ID": f"getting-started-{uuid.uuid4().hex[:8]}",
        "KAPPAFLOW_STATE_DIR": str(tmp_path / "state"),
        "KAPPAFLOW_METRICS_PORT": "0",
    }
    log = open(tmp_path / "run.log", "wb")  # noqa: SIM115 - the child's
    app = subprocess.Popen(
        [sys.executable, "-m", "kappaflow.cli", *command[1:]], cwd=ROOT, env=env, stdout=log, stderr=log
    )
    try:
        word = f"w{uuid.uuid4().hex[:10]}"
        produce_lines(kafka_bootstrap, "wordcount-input", [f"{word} {word}"])

        def counted() -> bool:
            assert app.poll() is None, (tmp_path / "run.log").read_text()
            return latest_counts(read_topic(kafka_bootstrap, "wordcount-output", timeout=3)).get(word) == 2

        wait_for(counted, 90, "the word counted twice in wordcount-output")
    finally:
        kill_if_running(app)
        log.close()
