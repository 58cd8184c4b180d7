"""`kappaflow run` as a process: health/metrics endpoints, JSON logs, SIGTERM commits and exits 0."""

from __future__ import annotations

import json
import os
import signal
import uuid

import pytest

from kappaflow.clients.admin import InternalTopicManager
from kappaflow.tasks.native import installed_core
from tests.harness.kafka_fixtures import free_port
from tests.kafka.streams_support import (
    fast_config,
    http_get,
    kill_if_running,
    latest_counts,
    produce_lines,
    read_topic,
    start_cli_app,
    wait_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]


def _processed(metrics: str) -> float:
    """The sum of kappaflow_records_processed_total over its tasks, from a Prometheus text page."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("kappaflow_records_processed_total")
    )


def test_run_serves_health_and_metrics_and_stops_cleanly_on_sigterm(kafka_bootstrap, kafka_topics, tmp_path):
    source = kafka_topics("cli-in", partitions=2)
    sink = kafka_topics("cli-out", partitions=2)
    app_id = f"cli-{uuid.uuid4().hex[:8]}"
    port = free_port()
    props = fast_config(kafka_bootstrap, app_id, str(tmp_path / "state"), **{"metrics.port": port})
    props["commit.interval.ms"] = 60000  # only the SIGTERM close commits
    env = {"WC_INPUT": source, "WC_OUTPUT": sink}
    process = start_cli_app("tests.kafka.apps:wordcount", props, tmp_path, env)
    try:
        wait_for(lambda: http_get(port, "/health/live")[0] == 200, 60, "liveness")
        wait_for(lambda: http_get(port, "/health/ready")[0] == 200, 60, "readiness")
        assert json.loads(http_get(port, "/health/ready")[1])["state"] == "RUNNING"
        produce_lines(kafka_bootstrap, source, ["a b", "b c", "c"])
        # 3 lines, then their 5 words back from the repartition topic: all counted before SIGTERM
        wait_for(lambda: _processed(http_get(port, "/metrics")[1]) >= 8, 30, "8 records processed")
        metrics = http_get(port, "/metrics")[1]
        assert "# TYPE kappaflow_records_processed_total counter" in metrics
        assert 'kappaflow_active_tasks{state="RUNNING"} 4.0' in metrics
        # Kafka Streams 4.3's thread ratios, each a share of the last loop iteration
        ratios = {
            line.split()[0]: float(line.split()[1])
            for line in metrics.splitlines()
            if line.startswith("kappaflow_") and line.split()[0].endswith("_ratio")
        }
        assert set(ratios) == {
            f"kappaflow_{p}_ratio" for p in ("poll", "restore", "process", "punctuate", "commit")
        }
        assert all(0.0 <= r <= 1.0 for r in ratios.values()) and sum(ratios.values()) <= 1.0 + 1e-9
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    finally:
        kill_if_running(process)
    assert latest_counts(read_topic(kafka_bootstrap, sink, expected=3, timeout=20)) == {
        "a": 1,
        "b": 2,
        "c": 2,
    }
    log_lines = (tmp_path / "app.log").read_text().splitlines()
    entries = [json.loads(line) for line in log_lines if line.startswith("{")]
    assert any("SIGTERM" in e["msg"] for e in entries)
    assert any(e["msg"].startswith("stopped (clean)") for e in entries)
    assert any(e["msg"].startswith("garbage collector set for stream work") for e in entries)
    # the app ran on the native drain loop wherever `make setup` could build it (CI always can)
    loops = [e["msg"] for e in entries if e["msg"].startswith("drain loop: ")]
    expected = "native (kappaflow_native)" if installed_core() is not None else "Python (kappaflow_native"
    assert loops and all(expected in message for message in loops), loops
    if os.environ.get("CI") == "true":
        assert expected.startswith("native")

    # The offsets were committed on SIGTERM: a restart processes nothing again. This one is a static
    # member told to leave on close (KIP-1153): its SIGTERM removes it from the group at once.
    static = {**props, "group.instance.id": "again", "close.group.membership.operation": "LEAVE_GROUP"}
    process = start_cli_app("tests.kafka.apps:wordcount", static, tmp_path, env, name="again")
    try:
        wait_for(lambda: http_get(port, "/health/ready")[0] == 200, 60, "readiness after restart")
        assert "kappaflow_records_processed_total" not in http_get(port, "/metrics")[1]
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    finally:
        kill_if_running(process)
    assert InternalTopicManager({"bootstrap.servers": kafka_bootstrap}).group_members(app_id)[1] == []
