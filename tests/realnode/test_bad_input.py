"""What users get wrong, on real pods (a wrong image tag, PodSecurity, a missing Secret, a crash loop, a
namespace quota, a volume no StorageClass provisions): each mistake ends in the StreamApp's status with
the real kubelet's, scheduler's or API server's reason, and fixing the spec recovers without deleting
anything.

The apps run `examples.windowed_fraud` (its own topics), so they never touch the word count's output
that test_wordcount_lifecycle audits. What the real node shows that the stand-in kubelet could not: the
pull error is containerd's own (the registry at the closed loopback port refuses the connection), a
crash loop is a real process exiting under the kubelet's back-off, and PodSecurity admission is the API
server's own.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness.realnode.images_store import docker_binary, import_images
from tests.harness.realnode_fixtures import RealNode
from tests.realnode.cluster import ClusterKafka, condition, wait_for

pytestmark = [pytest.mark.realnode, pytest.mark.timeout(400)]

IMAGE = "kappaflow-examples:0.1.0"
CRASHING = "kappaflow-examples:crash"


def _spec(app_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "image": IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "entryPoint": "examples.windowed_fraud:build_topology",
        "applicationId": app_id,
        "replicas": 1,
        "kafka": {"bootstrapServers": "kafka.kafka.svc:9092"},
        "processingGuarantee": "at_least_once",
        "state": {"size": "256Mi"},
        "config": {"commit.interval.ms": "200"},
        **extra,
    }


class Apps:
    def __init__(self, node: RealNode, namespace: str) -> None:
        self.node, self.namespace = node, namespace

    def create(self, name: str, spec: dict[str, Any]) -> None:
        body = {
            "apiVersion": "kappaflow.io/v1alpha1",
            "kind": "StreamApp",
            "metadata": {"name": name},
            "spec": spec,
        }
        self.node.kubectl("-n", self.namespace, "apply", "-f", "-", input=json.dumps(body))

    def patch(self, name: str, spec: dict[str, Any]) -> None:
        self.node.kubectl(
            "-n", self.namespace, "patch", "streamapp", name, "--type=merge", "-p", json.dumps({"spec": spec})
        )

    def get(self, name: str) -> dict[str, Any]:
        return self.node.get("streamapp", name, self.namespace)

    def degraded(self, name: str, reason: str, timeout: float = 120) -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            c = condition(self.get(name), "Degraded")
            return c if c and c["status"] == "True" and c["reason"] == reason else None

        found: dict[str, Any] = wait_for(f"{name} Degraded with {reason}", probe, timeout, interval=1)
        return found

    def running(self, name: str, timeout: float = 240) -> None:
        def probe() -> bool:
            app = self.get(name)
            ready = condition(app, "Ready")
            degraded = condition(app, "Degraded")
            return bool(
                ready
                and ready["status"] == "True"
                and (degraded is None or degraded["status"] == "False")
                and app["status"].get("readyReplicas") == app["spec"]["replicas"]
            )

        wait_for(f"{name} Running again", probe, timeout, interval=1)


@pytest.fixture
def apps(real_node: RealNode, cluster_kafka: ClusterKafka, operator_release: str) -> Iterator[Apps]:
    cluster_kafka_topics(cluster_kafka)
    namespace = real_node.create_namespace("bad", {"pod-security.kubernetes.io/enforce": "restricted"})
    try:
        yield Apps(real_node, namespace)
    finally:
        real_node.kubectl("delete", "namespace", namespace, "--wait=false")


def cluster_kafka_topics(kafka: ClusterKafka) -> None:
    from confluent_kafka.admin import AdminClient

    existing = AdminClient({"bootstrap.servers": kafka.host_bootstrap}).list_topics(timeout=30).topics
    missing = [t for t in ("payments", "fraud-alerts") if t not in existing]
    if missing:
        kafka.create_topics(missing)


def _app_id() -> str:
    return f"fraud-{uuid.uuid4().hex[:6]}"


def test_an_image_that_cannot_be_pulled_is_in_status_and_a_fixed_tag_recovers(apps: Apps) -> None:
    typo = "kappaflow-examples:0.1.9"
    apps.create("pull", _spec(_app_id(), image=typo))
    cond = apps.degraded("pull", "ImagePullFailed")
    assert f"cannot pull image {typo}" in cond["message"], cond["message"]
    assert "127.0.0.1:9" in cond["message"], (
        "the kubelet's own reason: the pull went to the closed loopback port"
    )
    apps.patch("pull", {"image": IMAGE})
    apps.running("pull")


def test_pods_refused_by_pod_security_are_in_status_and_a_fixed_spec_recovers(apps: Apps) -> None:
    escalating = {"containerSecurityContext": {"allowPrivilegeEscalation": True}}
    apps.create("psa", _spec(_app_id(), podTemplate=escalating))
    cond = apps.degraded("psa", "JobFailed")
    assert "violates PodSecurity" in cond["message"] and "allowPrivilegeEscalation" in cond["message"], cond
    apps.patch("psa", {"podTemplate": {"containerSecurityContext": {"allowPrivilegeEscalation": False}}})
    apps.running("psa")


def test_a_missing_secret_is_in_status(apps: Apps) -> None:
    sasl = {
        "mechanism": "PLAIN",
        "usernameSecretRef": {"name": "kafka-user", "key": "username"},
        "passwordSecretRef": {"name": "kafka-user", "key": "password"},
    }
    spec = _spec(_app_id())
    spec["kafka"] |= {"securityProtocol": "SASL_PLAINTEXT", "sasl": sasl}
    apps.create("sasl", spec)
    cond = apps.degraded("sasl", "SecretReferenceInvalid")
    assert "kafka-user" in cond["message"] and "kafka.sasl.usernameSecretRef" in cond["message"], cond[
        "message"
    ]


def test_a_crash_looping_image_is_reported_then_rolled_back(apps: Apps) -> None:
    # A real image whose `kappaflow run` exits at start-up (an invalid setting in its environment), while
    # `kappaflow describe` still works: the upgrade passes the describe Job and crash-loops in the pods.
    dockerfile = f"FROM {IMAGE}\nENV KAPPAFLOW_COMMIT_INTERVAL_MS=soon\n"
    subprocess.run(
        [docker_binary(), "build", "-q", "-t", CRASHING, "-"],
        input=dockerfile,
        text=True,
        check=True,
        capture_output=True,
    )
    import_images([CRASHING], print)
    apps.create("crash", _spec(_app_id(), upgrade={"progressDeadlineSeconds": 30}))
    apps.running("crash")
    wait_for(
        "the first spec recorded as stable", lambda: apps.get("crash")["status"].get("lastStableSpec"), 60
    )
    apps.patch("crash", {"image": CRASHING})
    crashing = apps.degraded("crash", "CrashLoopBackOff", timeout=150)
    assert "crash-0" in crashing["message"], crashing["message"]
    rolled = apps.degraded("crash", "UpgradeRolledBack", timeout=180)
    assert IMAGE in rolled["message"], rolled["message"]

    def stable_running() -> bool:
        sts = apps.node.get("statefulset", "crash", apps.namespace)
        image = sts["spec"]["template"]["spec"]["containers"][0]["image"]
        return image == IMAGE and sts["status"].get("readyReplicas") == 1

    wait_for("the stable image running again", stable_running, 180, interval=1)


def test_a_namespace_quota_is_in_status_and_a_spec_within_it_recovers(apps: Apps) -> None:
    # a team namespace with room for one state volume: the second replica's claim is refused
    apps.node.kubectl(
        "-n", apps.namespace, "create", "quota", "state-volumes", "--hard=requests.storage=300Mi"
    )
    apps.create("quota", _spec(_app_id(), replicas=2))
    cond = apps.degraded("quota", "PodsRefused", timeout=180)
    assert "exceeded quota: state-volumes" in cond["message"], cond["message"]
    assert "requests.storage=256Mi" in cond["message"], cond["message"]
    apps.patch("quota", {"replicas": 1})
    apps.running("quota")


def test_a_volume_that_cannot_be_provisioned_is_in_status_and_a_fixed_class_recovers(apps: Apps) -> None:
    apps.create("volume", _spec(_app_id(), state={"size": "256Mi", "storageClassName": "fast-ssd"}))
    cond = apps.degraded("volume", "VolumeProvisioningFailed", timeout=180)
    # the volume controller's own words, and the scheduler's for the pod that waits for the claim
    assert 'storageclass.storage.k8s.io "fast-ssd" not found' in cond["message"], cond["message"]
    assert "unbound immediate PersistentVolumeClaims" in cond["message"], cond["message"]
    apps.patch("volume", {"state": {"size": "256Mi", "storageClassName": "standard"}})
    apps.running("volume")
    claim = apps.node.get("persistentvolumeclaim", "state-volume-0", apps.namespace)
    assert claim["spec"]["storageClassName"] == "standard" and claim["status"]["phase"] == "Bound"
