"""`kappaflow reprocess module:attr --application-id NEW`: progress, a summary, and a usable new app id."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

from tests.spark.support import BASE_TS, committed, end_offsets, latest_per_key, produce_records, read_all

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]


def run_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kappaflow.cli", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_cli_reprocesses_into_a_new_application_id(kafka_bootstrap, kafka_topics, tmp_path):
    source = kafka_topics("cli-in", partitions=2)
    sink = kafka_topics("cli-out", partitions=2)
    lines = [f"x{i % 5} y{i % 3}" for i in range(300)]
    produce_records(
        kafka_bootstrap, source, [(None, line.encode(), BASE_TS + i) for i, line in enumerate(lines)]
    )
    app_id = f"cli-rp-{uuid.uuid4().hex[:8]}"
    config = tmp_path / "streams.properties"
    config.write_text(f"bootstrap.servers={kafka_bootstrap}\nstate.dir={tmp_path / 'state'}\n")
    env = {"KAPPAFLOW_TEST_INPUT": source, "KAPPAFLOW_TEST_OUTPUT": sink}
    args = ["reprocess", "tests.spark.apps:wordcount", "--application-id", app_id, "--config", str(config)]

    done = run_cli([*args, "--json"], env)

    assert done.returncode == 0, done.stderr[-3000:]
    assert f"WARNING: reprocess writes to the live output topic(s) {sink}:" in done.stderr
    assert f"--output-map {sink}={sink}-reprocessed" in done.stderr
    assert "==> stage 1/2" in done.stdout and "==> stage 2/2" in done.stdout
    assert f"==> reprocessed '{app_id}': 300 records read" in done.stdout
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["records_read"] == 300 and result["tasks"] == 4
    counts = Counter(w for line in lines for w in line.split())
    expected = {w.encode(): n.to_bytes(8, "big", signed=True) for w, n in counts.items()}
    assert latest_per_key(read_all(kafka_bootstrap, sink)) == expected
    assert committed(kafka_bootstrap, app_id, source) == end_offsets(kafka_bootstrap, source)
    assert sorted(p.name for p in (tmp_path / "state" / app_id).iterdir()) == ["1_0", "1_1"]

    # The same id again is refused: its changelog already holds state.
    again = run_cli(args, env)
    assert again.returncode == 2
    assert f"application id '{app_id}' was used before" in again.stderr
