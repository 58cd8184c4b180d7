"""The I/O modules' pure corners: REST paths, librdkafka config, describe-outcome selection."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from kappaflow_operator.k8s import Kube, object_path
from kappaflow_operator.kafka import client_config


@pytest.mark.parametrize(
    ("api_version", "kind", "name", "path"),
    [
        ("v1", "ConfigMap", "a", "/api/v1/namespaces/ns/configmaps/a"),
        ("apps/v1", "StatefulSet", "a", "/apis/apps/v1/namespaces/ns/statefulsets/a"),
        ("policy/v1", "PodDisruptionBudget", None, "/apis/policy/v1/namespaces/ns/poddisruptionbudgets"),
        ("kappaflow.io/v1alpha1", "StreamApp", "x", "/apis/kappaflow.io/v1alpha1/namespaces/ns/streamapps/x"),
    ],
)
def test_object_path(api_version: str, kind: str, name: str | None, path: str) -> None:
    assert object_path(api_version, kind, "ns", name) == path


def test_client_config_writes_pem_material_to_private_files() -> None:
    conf = client_config(
        "k:9093",
        "SASL_SSL",
        {"sasl.username": "u", "sasl.password": "p", "ssl.ca.location": "-----BEGIN CERTIFICATE-----\n"},
    )
    assert conf["bootstrap.servers"] == "k:9093" and conf["security.protocol"] == "SASL_SSL"
    assert conf["sasl.username"] == "u" and conf["sasl.password"] == "p"
    ca = Path(conf["ssl.ca.location"])
    try:
        assert ca.read_text().startswith("-----BEGIN CERTIFICATE-----")
        assert ca.stat().st_mode & 0o077 == 0, "credentials readable only by the operator"
    finally:
        os.unlink(ca)


class _Pods(Kube):
    """Kube with `list` answered from memory: job_outcome's choice among retried pods."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods

    def list(self, api_version: str, kind: str, namespace: str, selector: str) -> list[dict[str, Any]]:
        assert (kind, selector) == ("Pod", "job-name=j")
        return self.pods


def _pod(state: dict[str, Any]) -> dict[str, Any]:
    return {"status": {"containerStatuses": [{"name": "kappaflow", "state": state}]}}


def test_job_outcome_is_the_newest_finished_pod() -> None:
    failed = _pod({"terminated": {"exitCode": 1, "message": "boom", "finishedAt": "2026-01-01T00:00:01Z"}})
    ok = _pod({"terminated": {"exitCode": 0, "message": "{}", "finishedAt": "2026-01-01T00:00:09Z"}})
    running = _pod({"running": {"startedAt": "2026-01-01T00:00:10Z"}})
    outcome = _Pods([failed, ok, running]).job_outcome("ns", "j")
    assert outcome is not None and (outcome.exit_code, outcome.message) == (0, "{}")
    assert _Pods([running]).job_outcome("ns", "j") is None


def test_an_apps_admin_client_for_an_old_bootstrap_is_dropped() -> None:
    """A changed bootstrap address must not leave a client reconnecting to the old one forever."""
    from kappaflow_operator.admins import KafkaAdmins
    from kappaflow_operator.models import StreamAppSpec

    def spec(bootstrap: str) -> StreamAppSpec:
        wire = {
            "image": "r/i:1",
            "entryPoint": "m:f",
            "applicationId": "wc",
            "kafka": {"bootstrapServers": bootstrap},
        }
        return StreamAppSpec.model_validate(wire)

    admins = KafkaAdmins(kube=None)  # type: ignore[arg-type]  # PLAINTEXT: no Secret to read
    old = admins(spec("old-kafka:9092"), "ns", owner="ns/a")
    shared = admins(spec("old-kafka:9092"), "ns", owner="ns/b")
    assert shared is old, "apps on one connection share a client"
    new = admins(spec("new-kafka:9092"), "ns", owner="ns/a")
    assert new is not old and len(admins.clients) == 2, "ns/b still uses the old connection"
    admins(spec("new-kafka:9092"), "ns", owner="ns/b")
    assert list(admins.clients.values()) == [new], "no app uses the old address: its client is gone"
    admins.release("ns/a")
    admins.release("ns/b")
    assert admins.clients == {}
