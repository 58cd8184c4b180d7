"""A quiet first run: each component `make run`/`make test` prepares prints one progress line.

What, version, cached or downloading, and size - and nothing else (Maven's and Go's transcripts go to
.run/logs). Run against the warm cache, as `make test` does after its download targets.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINE = re.compile(r"^==> [A-Za-z][\w ()]+ v?\d[\w.+-]*.*: cached, \d+\.\d (KB|MB|GB)$")


@pytest.mark.parametrize(
    "module",
    ["tests.harness.kafka_broker download", "tests.harness.kube_control_plane build", "kappaflow.spark.jars"],
)
def test_a_cached_component_prints_one_line(module):
    from kappaflow.spark.jars import jars_dir, spark_version
    from tests.harness.kafka_broker import kafka_home
    from tests.harness.kube_control_plane import bin_dir

    cached = {
        "tests.harness.kafka_broker download": (kafka_home() / "libs" / ".complete").exists(),
        "tests.harness.kube_control_plane build": (bin_dir() / ".complete").exists(),
        "kappaflow.spark.jars": (jars_dir(spark_version()) / ".complete").exists(),
    }
    if not cached[module]:
        # `make test` (and so CI) fetches everything first: there a missing cache is a failure
        if os.environ.get("CI"):
            pytest.fail(f"{module}: not cached although `make test` fetched it")
        pytest.skip(f"{module}: not cached on this machine (make test fetches it before the tests)")
    result = subprocess.run(
        [sys.executable, "-m", *module.split()], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    lines = (result.stdout + result.stderr).splitlines()
    assert len(lines) == 1 and LINE.match(lines[0]), lines
