"""Every Grafana panel of the chart's dashboard returns data from a real Prometheus scraping a running app.

The word count runs on the test broker with a dead-letter topic; one line that is not UTF-8 goes to the
dead-letter topic, so the error panels have data too. Debian's `prometheus` scrapes the app's /metrics
every second and also loads the chart's alert rules (a rule that does not parse fails the test). Each
panel target's `expr` is read from the dashboard JSON, Grafana's `$__rate_interval` is replaced by a
window that holds several 1 s scrapes, the namespace/app/instance variables by their "All" value (`.*`,
which also matches a series without the label, as here: a static target has no namespace or app), and
the query must return at least one series.

The operator's panels (`kappaflow_operator_*`) must parse here; they are checked for data against a
running operator in tests/operator/test_operator_dashboard.py. So must the warm-up, async backpressure and
peer-bootstrap series (`NEEDS_ANOTHER_APP`), which a word count does not export.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from kappaflow.runner import KafkaStreams
from tests.harness.prometheus import PrometheusServer, prometheus_binary
from tests.kafka.streams_support import fast_config, produce, wait_running, wordcount_topology

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

CHART = Path(__file__).resolve().parents[2] / "charts" / "kappaflow"
RATE_WINDOW = "10s"
SELECTORS = ("namespace", "app", "instance")  # the dashboard's template variables, "All" = ".*"


#: Series a word count never exports: warm-ups need a static member joining a group whose stateful tasks
#: it must restore first, backpressure pauses an asynchronous operation. Their queries must parse here.
NEEDS_ANOTHER_APP = ("kappaflow_warmup_", "kappaflow_async_", "kappaflow_bootstrap_")


def dashboard() -> dict[str, Any]:
    return dict(json.loads((CHART / "dashboards" / "kappaflow.json").read_text()))


def raw_targets() -> list[tuple[str, str]]:
    """(panel title, PromQL as the dashboard has it) for every target of every panel."""
    return [(p["title"], t["expr"]) for p in dashboard()["panels"] for t in p.get("targets", [])]


def dashboard_targets() -> list[tuple[str, str]]:
    """(panel title, PromQL) for every target of every panel, with Grafana's variables filled in."""
    targets = []
    for title, expr in raw_targets():
        expr = expr.replace("$__rate_interval", RATE_WINDOW)
        for name in SELECTORS:
            expr = expr.replace(f"${name}", ".*")
        targets.append((title, expr))
    return targets


def test_dashboard_lists_every_area():
    titles = " ".join(title.lower() for title, _ in dashboard_targets())
    for area in ("throughput", "process latency", "commit latency", "lag", "restore", "task states"):
        assert area in titles
    assert "dead-letter" in titles and "operator reconciles" in titles
    for area in ("rebalances", "thread utilization", "rocksdb size", "end-to-end latency", "cpu", "memory"):
        assert area in titles, area


def test_every_app_metric_in_the_dashboard_is_filtered_by_namespace_app_and_instance():
    """Every app metric a panel reads carries the three template-variable selectors, so choosing an app
    filters every panel (the operator's metrics carry no app label: their panels say so)."""
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    for name in SELECTORS:
        assert variables[name]["includeAll"] and variables[name]["allValue"] == ".*", name
    wanted = ", ".join(f'{name}=~"${name}"' for name in SELECTORS)
    for title, expr in raw_targets():
        if "kappaflow_operator_" in expr:
            continue
        uses = re.findall(r"(kappaflow_[a-z0-9_]+)(\{[^}]*\})?", expr)
        assert uses, title
        for metric, selector in uses:
            assert selector == "{" + wanted + "}", f"{title}: {metric}{selector}"


def test_every_exported_app_metric_is_plotted():
    """Every family the runtime exports (its `# HELP` table) appears on some panel."""
    from kappaflow.runner.http import HELP, _metric_name

    text = " ".join(expr for _, expr in raw_targets())
    families = {_metric_name(raw) for raw in HELP}
    unplotted = sorted(f for f in families if not re.search(re.escape(f) + r"(_total)?\b", text))
    assert not unplotted, unplotted


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
            app_targets = [
                (t, e)
                for t, e in dashboard_targets()
                if "kappaflow_operator_" not in e and not any(f in e for f in NEEDS_ANOTHER_APP)
            ]
            empty = app_targets
            deadline = time.monotonic() + 60
            while empty and time.monotonic() < deadline:
                time.sleep(1)
                empty = [(t, e) for t, e in empty if not prom.query(e)]
            assert not empty, f"panels without data: {empty}"
            for _title, expr in dashboard_targets():
                prom.query(expr)  # the operator's and NEEDS_ANOTHER_APP's queries must at least parse
            assert prom.query("sum(kappaflow_dead_letter_records_total)")[0]["value"][1] == "1"

            def value(expr: str) -> float:
                return float(prom.query(expr)[0]["value"][1])

            # the new series hold real values, not only exist: the member got its assignment once, the
            # word count's RocksDB store is on disk, the process used CPU and memory, the thread polled,
            # and a record written now is processed within seconds of its timestamp
            assert value("sum(kappaflow_rebalances_total)") >= 1
            assert value("sum(kappaflow_rocksdb_size_bytes)") > 0
            assert value("sum(kappaflow_process_cpu_seconds_total)") > 0
            assert value("sum(kappaflow_process_resident_memory_bytes)") > 10 * 2**20
            assert value(f"sum(rate(kappaflow_poll_seconds_total[{RATE_WINDOW}]))") > 0
            assert 0 <= value("max(kappaflow_record_e2e_latency_ms)") < 30_000
    finally:
        stop.set()
        if feeder.is_alive():
            feeder.join(5)
        app.close(30)
