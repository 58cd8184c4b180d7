"""`kappaflow --version`, the start-up banner's text and the summary line, without a broker."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

from kappaflow.cli_status import Snapshot, banner_lines, non_default_settings, snapshot, summary_line


def test_version_flag_prints_the_installed_version():
    result = subprocess.run([sys.executable, "-m", "kappaflow.cli", "--version"], capture_output=True,
                            text=True, timeout=60, check=True)  # fmt: skip
    assert result.stdout.strip() == f"kappaflow {importlib.metadata.version('kappaflow')}"


def test_banner_shows_what_differs_from_the_defaults_and_masks_secrets():
    values = {
        "application.id": "orders",
        "bootstrap.servers": "kafka:9092",
        "processing.guarantee": "at_least_once",  # the default: not shown
        "commit.interval.ms": 1000,
        "sasl.password": "hunter2",
        "sasl.jaas.config": "x required password=hunter2;",
    }
    assert "processing.guarantee" not in non_default_settings(values)
    lines = banner_lines("1.2.3", values, "http://localhost:8080", "http://orders-0:7070")
    assert lines[0] == "kappaflow 1.2.3: application.id=orders bootstrap.servers=kafka:9092"
    assert "commit.interval.ms=1000" in lines[1] and "hunter2" not in "\n".join(lines)
    assert "sasl.password=********" in lines[1] and "application.id" not in lines[1]
    assert lines[2] == (
        "metrics http://localhost:8080/metrics, health http://localhost:8080/health/ready; "
        "interactive queries http://orders-0:7070"
    )
    assert (
        banner_lines("1", values, None, None)[2]
        == "metrics and health off (metrics.port=-1); interactive queries off"
    )


def test_summary_line_totals_every_task_and_the_rate_since_the_last_line():
    counters = {"records-processed-total": {(("task", "0_0"),): 700.0, (("task", "0_1"),): 500.0},
                "records-sent-total": {(): 900.0}}  # fmt: skip
    gauges = {"consumer-lag": {(("partition", "0"),): 10.0, (("partition", "1"),): 5.0},
              "active-tasks": {(("state", "RUNNING"),): 2.0}}  # fmt: skip
    previous = Snapshot(100.0, 200.0, 100.0, None, "REBALANCING", None)
    current = snapshot(110.0, "RUNNING", counters, gauges)
    assert summary_line(previous, current) == (
        "summary: RUNNING, 2 active tasks; in 1,200 (+1,000, 100.0/s), out 900 (+800); lag 15"
    )
