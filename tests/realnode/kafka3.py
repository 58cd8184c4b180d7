"""The three-broker Kafka of examples/k8s/kafka/kafka-3.yaml on the real node, in a namespace of its own, and
what a broker-failure test asks of it: which broker leads which partitions, and when every replica is back
in sync.

The manifest is applied as a user applies it, with two changes:
- its namespace (the Namespace object and every `namespace:` field), so that it runs beside the session's
  single broker in `kafka` without taking its names (nothing else in it names the namespace: the pods
  build their DNS names from their own);
- a CPU request of 100m per broker instead of 250m. The tier applies it when the session starts (the
  brokers start while the single broker does, instead of inside the test) and it idles through the other
  tests, so its requests must leave room on the 2-CPU node for their pods (the word count scaled to 4).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import yaml

from tests.harness.realnode_fixtures import RealNode
from tests.realnode.cluster import ROOT, ClusterKafka, wait_for

KAFKA3_MANIFEST = ROOT / "examples" / "k8s" / "kafka" / "kafka-3.yaml"
BROKERS = 3
#: what each idle broker asks of the node's 2 CPUs while the rest of the tier runs
CPU_REQUEST = "100m"


def for_the_tier(docs: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    """The manifest's objects moved to NAMESPACE, the brokers' CPU request lowered to CPU_REQUEST (a pure
    rewrite; the input is left as it was)."""
    moved = []
    for doc in docs:
        doc = json.loads(json.dumps(doc))
        if doc["kind"] == "Namespace":
            doc["metadata"]["name"] = namespace
        else:
            doc["metadata"]["namespace"] = namespace
        if doc["kind"] == "StatefulSet":
            for container in doc["spec"]["template"]["spec"]["containers"]:
                container["resources"]["requests"]["cpu"] = CPU_REQUEST
        moved.append(doc)
    return moved


def start_kafka3(node: RealNode, namespace: str) -> None:
    """Apply the three-broker manifest into NAMESPACE, without waiting for it."""
    docs = [d for d in yaml.safe_load_all(KAFKA3_MANIFEST.read_text()) if d]
    listed = {"apiVersion": "v1", "kind": "List", "items": for_the_tier(docs, namespace)}
    node.kubectl("apply", "-f", "-", input=json.dumps(listed))


def wait_kafka3(node: RealNode, namespace: str) -> ClusterKafka:
    """Wait for the brokers and the example topics. The host's clients bootstrap from all three pod IPs
    (EXTERNAL listener): any one of them down, the others answer."""
    node.kubectl("-n", namespace, "rollout", "status", "statefulset/kafka", "--timeout=300s", timeout=320)
    node.kubectl(
        "-n",
        namespace,
        "wait",
        "--for=condition=complete",
        "job/create-example-topics",
        "--timeout=300s",
        timeout=320,
    )
    ips = [node.get("pod", f"kafka-{i}", namespace)["status"]["podIP"] for i in range(BROKERS)]
    return ClusterKafka(",".join(f"{ip}:9094" for ip in ips), f"kafka.{namespace}.svc:9092")


#: (topic, partition) -> (leader, replicas, in-sync replicas)
Replicas = dict[tuple[str, int], tuple[int, list[int], list[int]]]


def partition_replicas(bootstrap: str, topics: list[str]) -> Replicas:
    """(topic, partition) -> (leader, replicas, in-sync replicas), from the cluster's metadata now."""
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30)
    found: Replicas = {}
    for topic in topics:
        for p, meta in metadata.topics[topic].partitions.items():
            found[(topic, p)] = (meta.leader, list(meta.replicas), list(meta.isrs))
    return found


def busiest_leader(replicas: Replicas) -> int:
    """The broker leading the most of these partitions (the lowest id on a tie): the one whose loss moves
    the most leaderships."""
    leaders = Counter(leader for leader, _, _ in replicas.values())
    return min(leaders, key=lambda broker: (-leaders[broker], broker))


def all_in_sync(bootstrap: str, topics: list[str]) -> bool:
    """Every partition of TOPICS has a leader and all three replicas in sync."""
    replicas = partition_replicas(bootstrap, topics)
    return all(leader >= 0 and len(isr) == BROKERS for leader, _, isr in replicas.values())


def wait_all_in_sync(bootstrap: str, topics: list[str], timeout: float = 120) -> None:
    wait_for(f"{BROKERS} replicas of {topics} in sync", lambda: all_in_sync(bootstrap, topics), timeout, 1)
