"""The lag autoscaler on real pods: a StreamApp with `autoscaling.enabled` starts on one replica over a
backlog, the operator measures the group's lag, scales up (capped at the input's 4 partitions), and once
the backlog is worked off scales back down after its cooldown; each decision is in status with its lag
and reason. The app is `examples.windowed_fraud` on a `payments` topic of its own making, removed at the
end so the other tests' apps start on an empty one."""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.harness.realnode_fixtures import RealNode
from tests.realnode.cluster import ClusterKafka, wait_for

pytestmark = [pytest.mark.realnode, pytest.mark.timeout(420)]

TOPICS = ["payments", "fraud-alerts"]
BACKLOG = 200_000


def _produce_backlog(bootstrap: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 20})
    rng = random.Random(7)
    for i in range(BACKLOG):
        card = f"card-{rng.randrange(5000)}"
        value = json.dumps({"amount": rng.randrange(1, 400)})
        while True:
            try:
                producer.produce("payments", key=card, value=value)
                break
            except BufferError:  # the local queue (100k records) is full while a loaded broker catches up
                producer.poll(0.5)
        if i % 10_000 == 9_999:
            producer.poll(0)
    assert producer.flush(120) == 0


@pytest.fixture
def payments(cluster_kafka: ClusterKafka) -> Iterator[str]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cluster_kafka.host_bootstrap})

    def drop() -> None:
        existing = [t for t in TOPICS if t in admin.list_topics(timeout=30).topics]
        if not existing:
            return
        for future in admin.delete_topics(existing, operation_timeout=30).values():
            future.result(60)
        wait_for("the topics gone", lambda: not set(TOPICS) & set(admin.list_topics(timeout=30).topics), 60)

    drop()
    cluster_kafka.create_topics(TOPICS)
    _produce_backlog(cluster_kafka.host_bootstrap)
    try:
        yield cluster_kafka.host_bootstrap
    finally:
        drop()


def test_lag_scales_up_under_a_backlog_and_back_down(
    real_node: RealNode, payments: str, operator_release: str
) -> None:
    namespace = real_node.create_namespace("scale", {"pod-security.kubernetes.io/enforce": "restricted"})
    spec = {
        "image": "kappaflow-examples:0.1.0",
        "imagePullPolicy": "IfNotPresent",
        "entryPoint": "examples.windowed_fraud:build_topology",
        "applicationId": f"fraud-scale-{uuid.uuid4().hex[:6]}",
        "replicas": 1,
        "kafka": {"bootstrapServers": "kafka.kafka.svc:9092"},
        "processingGuarantee": "at_least_once",
        "state": {"size": "256Mi"},
        "autoscaling": {
            "enabled": True,
            "minReplicas": 1,
            "maxReplicas": 6,
            "lagPerReplica": 20_000,
            "scaleUpCooldownSeconds": 0,
            "scaleDownCooldownSeconds": 20,
            "intervalSeconds": 5,
        },
    }
    body = {
        "apiVersion": "kappaflow.io/v1alpha1",
        "kind": "StreamApp",
        "metadata": {"name": "fraud"},
        "spec": spec,
    }
    try:
        started = time.monotonic()
        real_node.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(body))

        def replicas() -> int:
            return int(real_node.get("statefulset", "fraud", namespace)["spec"]["replicas"])

        def decision() -> dict:
            return real_node.get("streamapp", "fraud", namespace)["status"]["autoscaler"]["lastDecision"]

        wait_for("a scale-up on the backlog's lag", lambda: replicas() > 1, 240, interval=1)
        up = decision()
        print(f"scaled up after {time.monotonic() - started:.0f}s: {up}")
        assert up["toReplicas"] > up["fromReplicas"] and up["lag"] > 20_000, up
        assert up["toReplicas"] <= 4, "capped at the input's 4 partitions"
        wait_for(
            "the backlog worked off and the app scaled back to 1", lambda: replicas() == 1, 300, interval=2
        )
        down = decision()
        print(f"scaled down after {time.monotonic() - started:.0f}s: {down}")
        assert down["toReplicas"] < down["fromReplicas"], down
    finally:
        real_node.kubectl(
            "delete", "namespace", namespace, "--wait=true", "--timeout=120s", check=False, timeout=150
        )
