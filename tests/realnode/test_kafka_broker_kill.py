"""A Kafka broker crashing under the word count: the three-broker cluster of examples/k8s/kafka/kafka-3.yaml
(every topic replicated 3 times, min.insync.replicas=2), the example StreamApp on it with
`kafka.replicationFactor: 3` and exactly_once_v2, steady input, and the broker leading the most input and
changelog partitions SIGKILLed inside its pod (no controlled shutdown: its leaderships move when the
controllers notice, its open requests fail). The app's transactions in flight abort and are retried on the
new leaders; the kubelet restarts the broker, which catches up from the others. The audit: every input
line counted exactly once (the final counts equal the input topic's words), no count ever going down.

The rest of the tier runs on the single broker of kafka.yaml: replication is what this test is about, and
three brokers for every test would triple Kafka's memory and CPU on the 2-core machine for nothing the
other tests look at. Its cluster runs in a namespace of the session's own, started with the single broker
when the session starts (tests/realnode/conftest.py), so the test itself waits for none of it.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from tests.harness.realnode.images_store import ctr
from tests.harness.realnode_fixtures import RealNode
from tests.realnode.cluster import (
    ROOT,
    ClusterKafka,
    CountAudit,
    SteadyInput,
    condition,
    input_word_counts,
    lines_for,
    produce_lines,
    wait_for,
)
from tests.realnode.kafka3 import busiest_leader, partition_replicas, wait_all_in_sync

pytestmark = [pytest.mark.realnode, pytest.mark.timeout(600)]

APP = "wordcount"
INPUT, OUTPUT, CHANGELOG = "wordcount-input", "wordcount-output", "wordcount-counts-changelog"


@dataclass
class Deployed:
    node: RealNode
    namespace: str
    kafka: ClusterKafka
    timings: dict[str, float]


def _streamapp(namespace: str, bootstrap: str) -> dict[str, Any]:
    """The example's StreamApp as a user would point it at the three brokers: their Service, and its
    internal topics replicated 3 times (which the operator gives min.insync.replicas=2)."""
    app: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "k8s" / "wordcount-streamapp.yaml").read_text())
    app["metadata"]["namespace"] = namespace
    app["spec"]["kafka"] = {"bootstrapServers": bootstrap, "replicationFactor": 3}
    assert app["spec"]["processingGuarantee"] == "exactly_once_v2"
    return app


def _app_ready(node: RealNode, namespace: str) -> bool:
    app = node.get("streamapp", APP, namespace)
    ready, status = condition(app, "Ready"), app.get("status", {})
    return bool(
        ready
        and ready["status"] == "True"
        and status.get("observedGeneration") == app["metadata"]["generation"]
        and status.get("readyReplicas") == status.get("replicas")
    )


@pytest.fixture
def deployed(real_node: RealNode, kafka3: ClusterKafka, operator_release: str) -> Iterator[Deployed]:
    namespace = kafka3.pod_bootstrap.split(".")[1]  # kafka.<namespace>.svc:9092
    timings: dict[str, float] = {}
    try:
        started = time.monotonic()
        real_node.kubectl("apply", "-f", "-", input=json.dumps(_streamapp(namespace, kafka3.pod_bootstrap)))
        wait_for("the StreamApp Ready", lambda: _app_ready(real_node, namespace), 300, interval=1)
        timings["StreamApp Ready"] = time.monotonic() - started
        yield Deployed(real_node, namespace, kafka3, timings)
    finally:
        started = time.monotonic()
        # while the operator and the brokers are there for its cleanup (the brokers go with their
        # namespace at the session's end)
        real_node.kubectl(
            "-n",
            namespace,
            "delete",
            "streamapp",
            APP,
            "--ignore-not-found",
            "--timeout=90s",
            check=False,
            timeout=100,
        )
        timings["StreamApp deleted"] = time.monotonic() - started
        print("timings:", ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()))


def _changelog_config(bootstrap: str) -> dict[str, str]:
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, CHANGELOG)
    entries = admin.describe_configs([resource])[resource].result(30)
    return {name: entry.value for name, entry in entries.items()}


def _restart_count(node: RealNode, pod: str, namespace: str) -> int:
    return int(node.get("pod", pod, namespace)["status"]["containerStatuses"][0]["restartCount"])


def _pod_ready(node: RealNode, pod: str, namespace: str) -> bool:
    ready = condition(node.get("pod", pod, namespace), "Ready")
    return bool(ready and ready["status"] == "True")


def test_a_sigkilled_partition_leader_broker_loses_and_duplicates_nothing(deployed: Deployed) -> None:
    node, ns, bootstrap = deployed.node, deployed.namespace, deployed.kafka.host_bootstrap
    expected: Counter[str] = Counter()
    audit = CountAudit(bootstrap, OUTPUT)
    try:
        produce_lines(bootstrap, INPUT, lines_for(0, 2000), expected)
        audit.wait_exact(expected)
        # the internal topic as the spec asked: 3 replicas, acknowledged writes on at least 2 of them
        replicas = partition_replicas(bootstrap, [INPUT, CHANGELOG])
        assert {len(r) for _, r, _ in replicas.values()} == {3}, replicas
        assert _changelog_config(bootstrap)["min.insync.replicas"] == "2"
        with SteadyInput(bootstrap, INPUT, expected) as steady:
            time.sleep(3)
            broker = busiest_leader(partition_replicas(bootstrap, [INPUT, CHANGELOG]))
            pod = f"kafka-{broker}"
            restarts = _restart_count(node, pod, ns)
            status = node.get("pod", pod, ns)["status"]["containerStatuses"][0]
            started = time.monotonic()
            ctr("tasks", "kill", "-s", "SIGKILL", str(status["containerID"]).split("://", 1)[1])
            # the other two lead every partition while it is down
            wait_for(
                f"leaderships moved off broker {broker}",
                lambda: all(
                    leader not in (broker, -1)
                    for leader, _, _ in partition_replicas(bootstrap, [INPUT, CHANGELOG]).values()
                ),
                120,
            )
            deployed.timings["leaderships moved"] = time.monotonic() - started
            at_failover = steady.sent
            wait_for("input written to the two brokers left", lambda: steady.sent >= at_failover + 200, 60)
        # the input holds what the producer sent, once (it is idempotent): the truth the output must match
        assert input_word_counts(bootstrap, INPUT) == expected, "the input topic differs from what was sent"
        # exact while the killed broker may still be restarting: two in sync are all a commit needs
        audit.wait_exact(expected)
        deployed.timings["counts exact"] = time.monotonic() - started
        # the kubelet restarted it on its volume, with its node id: it catches up from the other two
        wait_for("the broker restarted", lambda: _restart_count(node, pod, ns) > restarts, 120)
        wait_for("the broker Ready", lambda: _pod_ready(node, pod, ns), 120)
        wait_all_in_sync(bootstrap, [INPUT, CHANGELOG, OUTPUT])
        deployed.timings["broker back in sync"] = time.monotonic() - started
        print(f"broker {broker} killed; {sum(expected.values())} words counted exactly once")
    finally:
        audit.close()
