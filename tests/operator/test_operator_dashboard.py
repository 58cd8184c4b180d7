"""The dashboard's operator panels return data from a real Prometheus scraping a running operator.

kopf runs the operator in-process against the local control plane (as in test_reconcile_kube) with its
metrics port on; a StreamApp is created so the operator reconciles it, and Debian's `prometheus` scrapes
the operator's /metrics every second. Every panel target over `kappaflow_operator_*` metrics, read from
the chart's dashboard JSON, must return at least one series. (The app panels are checked against a
running app in tests/kafka/test_dashboard_prometheus.py.)
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness.kafka_fixtures import free_port
from tests.harness.prometheus import PrometheusServer, prometheus_binary
from tests.kafka.test_dashboard_prometheus import dashboard_targets
from tests.operator import test_reconcile_kube
from tests.operator.test_reconcile_kube import Env, operator_env

pytestmark = [pytest.mark.kube, pytest.mark.kafka, pytest.mark.timeout(240)]

crd_installed = test_reconcile_kube.crd_installed  # the module-scoped fixture, shared by name


@pytest.fixture
def operator_metrics_port(monkeypatch: pytest.MonkeyPatch) -> int:
    port = free_port()
    monkeypatch.setenv("KAPPAFLOW_OPERATOR_METRICS_PORT", str(port))
    return port


@pytest.fixture
def env(
    operator_metrics_port: int, crd_installed: Any, kafka_bootstrap: str, kafka_topics: Any
) -> Iterator[Env]:
    """test_reconcile_kube's operator environment, started after the metrics port is set."""
    yield from operator_env(crd_installed, kafka_bootstrap, kafka_topics)


def test_operator_panels_return_data(env: Env, operator_metrics_port: int, tmp_path: Any) -> None:
    if prometheus_binary() is None:
        pytest.fail("prometheus is not installed: `make prometheus` (apt-get install prometheus)")
    env.create("wc", env.spec(f"wc-{uuid.uuid4().hex[:8]}", replicas=1))
    targets = [(title, expr) for title, expr in dashboard_targets() if "kappaflow_operator_" in expr]
    assert targets, "the dashboard has operator panels"
    with PrometheusServer(tmp_path / "prom", [f"127.0.0.1:{operator_metrics_port}"]) as prom:
        empty = targets
        deadline = time.monotonic() + 90
        while empty and time.monotonic() < deadline:
            time.sleep(1)
            empty = [(title, expr) for title, expr in empty if not prom.query(expr)]
        assert not empty, f"operator panels without data: {empty}"
