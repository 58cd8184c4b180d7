"""Every Grafana panel of the chart's dashboard returns data from a real Prometheus scraping a running app.

The word count runs on the test broker with a dead-letter topic; one line that is not UTF-8 goes to the
dead-letter topic, so the error panels have data too. Debian's `prometheus` scrapes the app's /metrics
every second and also loads the chart's alert rules (a rule that does not parse fails the test). Each
panel target's `expr` is read from the dashboard JSON, Grafana's `$__rate_interval` is replaced by a
window that holds several 1 s scrapes, and the query must return at least one series.

The operator's panels (`kappaflow_operator_*`) must parse here; they are checked for data against a
running operator in tests/operator/test_operator_dashboard.py.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

import pytest

from kappaflow.runner import KafkaStreams
from tests.harness.prometheus import PrometheusServer, prometheus_binary
from tests.kafka.streams_support import fast_config, produce, wait_running, wordcount_topology

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

CHART = Path(__file__).resolve().parents[2] / "charts" / "kappaflow"
RATE_WINDOW = "10s"


def dashboard_targets() -> list[tuple[str, str]]:
    """(panel title, PromQL) for every target of every panel, with Grafana's variables filled in."""
    dashboard = json.loads((CHART / "dashboards" / "kappaflow.json").read_text())
    targets = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            targets.append((panel["title"], target["expr"].replace("$__rate_interval", RATE_WINDOW)))
    return targets


def test_dashboard_lists_every_area():
    titles = " ".join(title.lower() for title, _ in dashboard_targets())
    for area in ("throughput", "process latency", "commit latency", "lag", "restore", "task states"):
        assert area in titles
    assert "dead-letter" in titles and "operator reconciles" in titles


def test_every_panel_query_returns_data(kafka_bootstrap, kafka_topics, tmp_path):
    if prometheus_binary() is None:
        pytest.fail("prometheus is not installed: `make prometheus` (apt-get install prometheus)")
    source = kafka_topics("dash-in", partitions=2)
    sink = kafka_topics("dash-out", partitions=2)
    dead = kafka_topics("dash-dlq")
    config = fast_config(
        kafka_bootstrap,
        f"dash-{uuid.uuid4().hex[:8]}",
        str(tmp_path / "state"),
        **{
            "default.deserialization.exception.handler": "log_and_continue",
            "errors.dead.letter.queue.topic.name": dead,
        },
    )
    app = KafkaStreams(wordcount_topology(source, sink), config)
    stop = threading.Event()

    def feed() -> None:
        while not stop.wait(0.2):
            produce(kafka_bootstrap, source, [(None, b"a stream is a table is a stream")])

    app.start()
    feeder = threading.Thread(target=feed, daemon=True)
    try:
        wait_running(app)
        produce(kafka_bootstrap, source, [(b"poison", b"\xff\xfe not utf-8")])
        feeder.start()
        rules = CHART / "dashboards" / "alerts.yaml"
        with PrometheusServer(tmp_path / "prom", [f"127.0.0.1:{app.metrics_port}"], [rules]) as prom:
            (group,) = prom.rules()
            assert {r["health"] for r in group["rules"]} <= {"ok", "unknown"}, group["rules"]
            app_targets = [(t, e) for t, e in dashboard_targets() if "kappaflow_operator_" not in e]
            empty = app_targets
            deadline = time.monotonic() + 60
            while empty and time.monotonic() < deadline:
                time.sleep(1)
                empty = [(t, e) for t, e in empty if not prom.query(e)]
            assert not empty, f"panels without data: {empty}"
            for _title, expr in dashboard_targets():
                prom.query(expr)  # the operator's queries must at least parse
            assert prom.query("sum(kappaflow_dead_letter_records_total)")[0]["value"][1] == "1"
    finally:
        stop.set()
        if feeder.is_alive():
            feeder.join(5)
        app.close(30)
