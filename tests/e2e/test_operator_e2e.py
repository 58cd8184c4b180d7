"""End to end: the operator runs a StreamApp whose pods are real `kappaflow run` processes.

A fake kubelet plays the node (tests/harness/fake_kubelet.py): it runs each StatefulSet pod with the
pod's own env, the operator's ConfigMap as its properties file, and the manifest's readiness probe. A
reset upgrade must recount from scratch. (Scaling, rolling upgrades and kills with exact counts run on
real pods in tests/realnode/test_wordcount_lifecycle.py.)
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest

from tests.e2e.operator_env import ENTRY, RuntimePods, install_crd, running_operator, wait_for

pytestmark = [pytest.mark.kube, pytest.mark.kafka, pytest.mark.timeout(600)]

GROUP, VERSION, PLURAL = "kappaflow.io", "v1alpha1", "streamapps"
PARTITIONS = 4
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
#: The pods are static group members (group.instance.id = pod name): one that stops keeps its partitions
#: until its session expires, which a scale-down and a reset wait for. librdkafka's 45 s default session
#: would make each of those waits 45 s; 10 s takes the same path and still outlasts a pod's restart in a
#: rolling update, so that one rejoins without a rebalance as on a cluster.
APP_CONFIG = {"commit.interval.ms": "200", "session.timeout.ms": "10000", "heartbeat.interval.ms": "1000"}


def _produce(bootstrap: str, topic: str, batch: int, expected: Counter[str]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for i in range(40):
        line = f"{WORDS[i % len(WORDS)]} {WORDS[(i * 3 + batch) % len(WORDS)]}"
        expected.update(line.split())
        producer.produce(topic, key=f"b{batch}-{i}", value=line)
    assert producer.flush(30) == 0


class CountReader:
    """Reads the output topic as a consumer would (read_committed): the latest count per word."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Consumer

        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        self.consumer.subscribe([topic])
        self.latest: dict[str, int] = {}

    def poll(self) -> dict[str, int]:
        for msg in self.consumer.consume(500, timeout=0.5):
            if msg.error() is None:
                self.latest[msg.key().decode()] = int.from_bytes(msg.value(), "big", signed=True)
        return self.latest

    def close(self) -> None:
        self.consumer.close()


def test_reset_upgrade_recounts_from_scratch(
    kube_cluster: Any, kafka_bootstrap: str, kafka_topics: Any, tmp_path: Any
) -> None:
    """upgrade.mode reset: pods stop, state volumes go, `kappaflow reset` rewinds the group and drops the
    internal topics, the new version recounts the whole log: exact counts again, from empty state."""
    from kubernetes import client

    from tests.harness.fake_kubelet import FakeKubelet, http_readiness

    install_crd(kube_cluster)
    namespace = kube_cluster.create_namespace("e2e")
    input_topic = kafka_topics("lines", partitions=2)
    output_topic = kafka_topics("counts", partitions=2)
    expected: Counter[str] = Counter()
    reader = CountReader(kafka_bootstrap, output_topic)
    with kube_cluster.api_client() as api:
        pods = RuntimePods(api, namespace, tmp_path, input_topic, output_topic)
        kubelet = FakeKubelet(
            api, namespace, pods.launch, readiness=http_readiness(pods.port), max_grace_seconds=30
        )
        custom = client.CustomObjectsApi(api)
        core = client.CoreV1Api(api)

        def status() -> dict[str, Any]:
            obj = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "wc")
            return obj.get("status") or {}

        def claims() -> dict[str, str]:
            items = core.list_namespaced_persistent_volume_claim(namespace).items
            return {c.metadata.name: c.metadata.uid for c in items if c.metadata.deletion_timestamp is None}

        try:
            with kubelet, running_operator(kube_cluster.kubeconfig, namespace):
                spec = {
                    "image": "registry.example/wordcount:1.0.0",
                    "entryPoint": ENTRY,
                    "applicationId": f"wc-reset-{uuid.uuid4().hex[:8]}",
                    "replicas": 1,
                    "processingGuarantee": "exactly_once_v2",
                    "kafka": {"bootstrapServers": kafka_bootstrap, "replicationFactor": 1},
                    "config": APP_CONFIG,
                    "upgrade": {"mode": "reset"},
                    "topicCleanupPolicy": "Delete",
                }
                body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "StreamApp", "metadata": {"name": "wc"}}
                custom.create_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, {**body, "spec": spec}
                )
                wait_for("Running", lambda: status().get("phase") == "Running", timeout=180)
                _produce(kafka_bootstrap, input_topic, 0, expected)
                wait_for("first counts", lambda: reader.poll() == dict(expected), timeout=120, interval=0.1)
                before = claims()
                assert list(before) == ["state-wc-0"]

                custom.patch_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    namespace,
                    PLURAL,
                    "wc",
                    {"spec": {"image": "registry.example/wordcount:2"}},
                )

                def reasons() -> set[str]:
                    found = core.list_namespaced_event(namespace, field_selector="involvedObject.name=wc")
                    return {e.reason for e in found.items}

                wait_for("the reset Job to complete", lambda: "ResetCompleted" in reasons(), timeout=180)
                wait_for(
                    "Running on the new image",
                    lambda: (
                        status().get("phase") == "Running"
                        and status()["lastStableSpec"]["image"] == "registry.example/wordcount:2"
                    ),
                    timeout=180,
                )
                after = claims()
                assert list(after) == ["state-wc-0"] and after != before, "a fresh state volume"
                assert {"ResetStopping", "StateVolumesDeleted", "ResetStarted", "TopicsCreated"} <= reasons()
                # The rewound group recounts the whole log from empty state: the same totals, re-emitted.
                # Without the rewind the counts would restart at 0; without dropped state, double.
                _produce(kafka_bootstrap, input_topic, 1, expected)
                wait_for("exact counts after the reset", lambda: reader.poll() == dict(expected), timeout=120)
        finally:
            reader.close()
        assert not kubelet.errors, kubelet.errors
