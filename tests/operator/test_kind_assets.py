"""`make kind-up` cannot run here (no Docker): check what can be checked of it.

The script parses, names only files that exist, and the Kafka manifests it applies pass the real
kube-apiserver's server-side validation. (The same manifests and chart values run on real pods in the
real-node tier, tests/realnode.)
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KIND = ROOT / "examples" / "k8s" / "kind"
KAFKA = ROOT / "examples" / "k8s" / "kafka" / "kafka.yaml"


def test_kind_up_script_parses_and_references_existing_files() -> None:
    script = KIND / "kind-up.sh"
    subprocess.run(["bash", "-n", str(script)], check=True, timeout=30)
    text = script.read_text()
    for path in set(re.findall(r"(?:-f|--config|-k) ((?:runtime|operator|examples|charts)/[\w./-]+)", text)):
        assert (ROOT / path).exists(), path
    assert "charts/kappaflow" in text and "kind load docker-image" in text


def test_kind_cluster_config_is_valid_yaml() -> None:
    config = yaml.safe_load((KIND / "cluster.yaml").read_text())
    assert config["kind"] == "Cluster"
    assert [n["role"] for n in config["nodes"]] == ["control-plane", "worker"]


@pytest.mark.kube
def test_kind_kafka_manifests_pass_server_validation(kube_cluster) -> None:
    from kubernetes.dynamic import DynamicClient

    api = kube_cluster.api_client()
    try:
        client = DynamicClient(api)
        docs = [d for d in yaml.safe_load_all(KAFKA.read_text()) if d]
        assert {d["kind"] for d in docs} == {"Namespace", "Service", "StatefulSet", "Job"}
        namespace = kube_cluster.create_namespace("kind")
        for doc in docs:
            resource = client.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            if resource.namespaced:
                doc["metadata"]["namespace"] = namespace
            resource.create(body=doc, namespace=namespace if resource.namespaced else None, dry_run="All")
    finally:
        api.close()
