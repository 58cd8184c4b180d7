"""The chart's monitoring objects: off by default, and accepted by a real kube-apiserver that has the real
Prometheus Operator CRDs (pinned release, tests/harness/prometheus.py), with strict field validation so
a misspelt or misplaced field is an error rather than silently pruned.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.harness.helm import helm_binary
from tests.harness.prometheus import monitoring_crds

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "kappaflow"
ALL_ON = (
    "monitoring.podMonitor.enabled=true,monitoring.serviceMonitor.enabled=true,"
    "monitoring.prometheusRule.enabled=true,monitoring.dashboard.enabled=true"
)
MONITORING_KINDS = {"PodMonitor", "ServiceMonitor", "PrometheusRule"}


@pytest.fixture(scope="module")
def helm() -> Path:
    binary = helm_binary(build=True)
    if binary is None:
        pytest.fail("helm is not cached and could not be built (needs Go and the Go module proxy)")
    return binary


def _render(helm: Path, namespace: str, *args: str) -> list[dict]:
    result = subprocess.run(
        [str(helm), "template", "kf", str(CHART), "--namespace", namespace, *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def test_monitoring_is_off_by_default(helm):
    kinds = {d["kind"] for d in _render(helm, "kappaflow-system")}
    assert not kinds & (MONITORING_KINDS | {"ConfigMap"})


def test_dashboard_configmap_is_labelled_for_the_grafana_sidecar(helm):
    docs = _render(helm, "kappaflow-system", "--set", "monitoring.dashboard.enabled=true")
    (configmap,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(configmap["data"]["kappaflow.json"])
    assert dashboard["uid"] == "kappaflow-overview"
    assert dashboard == json.loads((CHART / "dashboards" / "kappaflow.json").read_text())


@pytest.mark.kube
def test_monitoring_objects_pass_the_real_prometheus_operator_crds(helm, kube_cluster):
    from kubernetes import client

    namespace = kube_cluster.create_namespace("mon")
    docs = _render(helm, namespace, "--set", ALL_ON)
    with kube_cluster.api_client() as api:
        extensions = client.ApiextensionsV1Api(api)
        names = []
        for path in monitoring_crds():
            crd = yaml.safe_load(path.read_text())
            names.append(crd["metadata"]["name"])
            try:
                extensions.create_custom_resource_definition(crd)
            except client.ApiException as err:
                if err.status != 409:  # already there from an earlier test in this session
                    raise
        deadline = time.monotonic() + 30
        while not all(_established(extensions, name) for name in names):
            assert time.monotonic() < deadline, f"CRDs not established: {names}"
            time.sleep(0.2)
        custom = client.CustomObjectsApi(api)
        created = set()
        for doc in docs:
            if doc["kind"] in MONITORING_KINDS:
                group, version = doc["apiVersion"].split("/")
                plural = doc["kind"].lower() + "s"
                custom.create_namespaced_custom_object(
                    group, version, namespace, plural, doc, field_validation="Strict"
                )
                created.add(doc["kind"])
            elif doc["kind"] == "ConfigMap":
                client.CoreV1Api(api).create_namespaced_config_map(namespace, doc, field_validation="Strict")
                created.add("ConfigMap")
        assert created == MONITORING_KINDS | {"ConfigMap"}
        stored = custom.get_namespaced_custom_object(
            "monitoring.coreos.com", "v1", namespace, "podmonitors", "kf-kappaflow-apps"
        )
        assert stored["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"


def _established(extensions: object, name: str) -> bool:
    crd = extensions.read_custom_resource_definition(name)  # type: ignore[attr-defined]
    return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])


def test_prometheus_rule_is_the_alert_file_and_monitors_name_the_job_it_watches(helm):
    docs = _render(helm, "kappaflow-system", "--set", ALL_ON)
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    assert rule["spec"] == yaml.safe_load((CHART / "dashboards" / "alerts.yaml").read_text())
    exprs = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert 'up{job="kappaflow-apps"} == 0' in exprs
    for doc in docs:
        if doc["kind"] in ("PodMonitor", "ServiceMonitor"):
            (endpoint,) = doc["spec"].get("podMetricsEndpoints") or doc["spec"]["endpoints"]
            assert {"targetLabel": "job", "replacement": "kappaflow-apps"} in endpoint["relabelings"]
