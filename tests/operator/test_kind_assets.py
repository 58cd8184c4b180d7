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
KAFKA3 = ROOT / "examples" / "k8s" / "kafka" / "kafka-3.yaml"


def test_kind_up_script_parses_and_references_existing_files() -> None:
    script = KIND / "kind-up.sh"
    subprocess.run(["bash", "-n", str(script)], check=True, timeout=30)
    text = script.read_text()
    for path in set(re.findall(r"(?:-f|--config|-k) ((?:runtime|operator|examples|charts)/[\w./-]+)", text)):
        assert (ROOT / path).exists(), path
    assert "charts/kappaflow" in text and "kind load docker-image" in text


def test_kind_up_with_spark_builds_and_installs_the_spark_operator_the_real_node_tier_runs() -> None:
    """`KAPPAFLOW_SPARK=1 make kind-up` adds what `upgrade: reprocess` needs: the three Spark images the
    real-node tier builds (same names and tags), loaded into kind, and the Spark operator's own chart with
    the values file the real-node tier installs it with."""
    from tests.harness import images, spark_operator

    text = (KIND / "kind-up.sh").read_text()
    assert f"SPARK_OPERATOR_TAG={spark_operator.VERSION.lstrip('v')} " in text
    version = images.VERSION
    for image in (images.SPARK, images.EXAMPLES_SPARK, images.SPARK_OPERATOR):
        name, tag = image.split(":")
        shell = {version: "$VERSION", spark_operator.VERSION.lstrip("v"): "$SPARK_OPERATOR_TAG"}[tag]
        assert f'"{name}:{shell}"' in text, image
    built = set(re.findall(r"only\+=\(([\w -]+)\)", text)[0].split())
    assert built == {"spark", "examples-spark", "spark-operator"}
    assert built <= {image.alias for image in images.IMAGES.values()}
    assert (
        "tests.harness.spark_operator chart" in text and "-f examples/k8s/spark-operator-values.yaml" in text
    )
    assert '"spark.jobNamespaces={kappaflow-examples}"' in text


def test_kind_cluster_config_is_valid_yaml() -> None:
    config = yaml.safe_load((KIND / "cluster.yaml").read_text())
    assert config["kind"] == "Cluster"
    assert [n["role"] for n in config["nodes"]] == ["control-plane", "worker"]


def test_three_broker_manifest_has_a_voter_per_replica_and_replicates_everything_three_times() -> None:
    """kafka-3.yaml's settings agree with each other: one quorum voter per StatefulSet replica with the
    pod's ordinal as its id, every replication factor 3 with two in sync, and the example topics made with
    three replicas (a mismatch shows only as a cluster that never forms, or a topic that never is made)."""
    docs = {d["kind"]: d for d in yaml.safe_load_all(KAFKA3.read_text()) if d}
    sts = docs["StatefulSet"]
    assert sts["spec"]["replicas"] == 3 and sts["spec"]["podManagementPolicy"] == "Parallel"
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    voters = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")
    assert [v.split("@")[0] for v in voters] == ["0", "1", "2"]
    assert all(v.split("@")[1].startswith(f"kafka-{v.split('@')[0]}.kafka.") for v in voters), voters
    assert env["KAFKA_NODE_ID"] == {
        "fieldRef": {"fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}
    }
    for key in (
        "DEFAULT_REPLICATION_FACTOR",
        "OFFSETS_TOPIC_REPLICATION_FACTOR",
        "TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
        "SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR",
    ):
        assert env[f"KAFKA_{key}"] == "3", key
    for key in (
        "MIN_INSYNC_REPLICAS",
        "TRANSACTION_STATE_LOG_MIN_ISR",
        "SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR",
    ):
        assert env[f"KAFKA_{key}"] == "2", key
    assert docs["Service"]["spec"]["publishNotReadyAddresses"] is True
    assert docs["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1
    (job,) = docs["Job"]["spec"]["template"]["spec"]["containers"]
    assert "--replication-factor 3" in job["command"][-1]


@pytest.mark.kube
@pytest.mark.parametrize("manifest", [KAFKA, KAFKA3], ids=["kafka", "kafka-3"])
def test_kind_kafka_manifests_pass_server_validation(kube_cluster, manifest: Path) -> None:
    from kubernetes.dynamic import DynamicClient

    api = kube_cluster.api_client()
    try:
        client = DynamicClient(api)
        docs = [d for d in yaml.safe_load_all(manifest.read_text()) if d]
        assert {d["kind"] for d in docs} <= {
            "Namespace",
            "Service",
            "StatefulSet",
            "Job",
            "PodDisruptionBudget",
        }
        namespace = kube_cluster.create_namespace("kind")
        for doc in docs:
            resource = client.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            if resource.namespaced:
                doc["metadata"]["namespace"] = namespace
            resource.create(body=doc, namespace=namespace if resource.namespaced else None, dry_run="All")
    finally:
        api.close()
