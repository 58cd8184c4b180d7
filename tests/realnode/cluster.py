"""What the real-node tests share: Kafka as a StatefulSet pod, the operator installed with its Helm chart,
and the audit of a word count's committed output.

Everything is deployed as a user deploys it: `kubectl apply` of the project's manifests, `helm install`
of its chart, images from `make images`. The tests' own producer and audit reader run on the node's host
and reach the broker through its EXTERNAL listener on the pod IP (the host does not use cluster DNS).
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tests.harness.realnode_fixtures import RealNode

ROOT = Path(__file__).resolve().parents[2]
KAFKA_MANIFEST = ROOT / "examples" / "k8s" / "kafka" / "kafka.yaml"
CHART = ROOT / "charts" / "kappaflow"
OPERATOR_NAMESPACE = "kappaflow-system"
WORDS = [f"w{i:02d}" for i in range(40)]
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 120.0, interval: float = 0.5) -> T:
    """Poll PROBE until it returns something truthy; its last error is part of the timeout message."""
    end = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < end:
        try:
            value = probe()
            if value:
                return value
            last = value
        except (RuntimeError, OSError, KeyError, IndexError, ValueError) as exc:
            last = exc
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in obj.get("status", {}).get("conditions", []) or []:
        if c.get("type") == kind:
            found: dict[str, Any] = c
            return found
    return None


@dataclass(frozen=True)
class ClusterKafka:
    """The broker pod: its address for the node's host, and for pods."""

    host_bootstrap: str
    pod_bootstrap: str = "kafka.kafka.svc:9092"

    def create_topics(self, names: list[str], partitions: int = 4) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.host_bootstrap})
        futures = admin.create_topics([NewTopic(n, partitions, 1) for n in names], operation_timeout=30)
        for future in futures.values():
            future.result(60)


def deploy_kafka(node: RealNode) -> ClusterKafka:
    node.kubectl("apply", "-f", str(KAFKA_MANIFEST))
    node.kubectl("-n", "kafka", "rollout", "status", "statefulset/kafka", "--timeout=300s", timeout=320)
    node.kubectl(
        "-n",
        "kafka",
        "wait",
        "--for=condition=complete",
        "job/create-example-topics",
        "--timeout=300s",
        timeout=320,
    )
    ip = node.get("pod", "kafka-0", "kafka")["status"]["podIP"]
    return ClusterKafka(f"{ip}:9094")


def helm_binary() -> str:
    from tests.harness.helm import helm_binary as build_helm

    helm = build_helm()
    assert helm is not None, "helm could not be built"
    return str(helm)


def install_operator(node: RealNode, replicas: int = 2, *extra: str) -> None:
    """`helm upgrade --install` of charts/kappaflow as a user would, with the locally built image; two
    replicas elect a leader through kopf peering. The image's ID goes on the pod template, as a new tag
    would in a release pipeline, so a rebuilt image under the same tag rolls the operator."""
    from tests.harness.realnode.images_store import docker_id

    # Helm installs a chart's crds/ on the first install only and never upgrades them: apply them first,
    # as a user upgrading the chart does (the node may hold an older StreamApp CRD).
    node.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CHART / "crds"))
    argv = [
        helm_binary(),
        f"--kubeconfig={node.kubeconfig}",
        "upgrade",
        "--install",
        "kappaflow",
        str(CHART),
        "--namespace",
        OPERATOR_NAMESPACE,
        "--create-namespace",
        "-f",
        str(ROOT / "examples" / "k8s" / "operator-values.yaml"),
        "--set",
        f"replicaCount={replicas}",
        "--set",
        f"peering.enabled={'true' if replicas > 1 else 'false'}",
        "--set",
        "verbose=true",
        "--set-string",
        f"podAnnotations.kappaflow\\.io/image-id={docker_id('kappaflow-operator:0.1.0')}",
        *extra,
        "--wait",
        "--timeout",
        "300s",
    ]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=330, check=False)
    if p.returncode:
        pods = node.kubectl("-n", OPERATOR_NAMESPACE, "get", "pods,events", check=False)
        raise RuntimeError(f"helm install failed: {p.stderr.strip()}\n{pods}")


def produce_lines(bootstrap: str, topic: str, lines: list[str], expected: Counter[str]) -> None:
    from confluent_kafka import Producer

    # idempotent: a retry after a broker's failure writes a line once, so `expected` is what the input holds
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "partitioner": "murmur2_random",
            "linger.ms": 5,
            "enable.idempotence": True,
        }
    )
    for i, line in enumerate(lines):
        producer.produce(topic, key=f"{uuid.uuid4().hex[:6]}-{i}", value=line)
        expected.update(line.split())
        if i % 1000 == 999:
            producer.poll(0)
    assert producer.flush(60) == 0, "input records not acknowledged"


def input_word_counts(bootstrap: str, topic: str) -> Counter[str]:
    """The words of every line the input topic holds now: what a word count over it must have counted
    (Kafka keeps the input of earlier runs on a cluster that is reused)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"input-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        counts: Counter[str] = Counter()
        positions = dict.fromkeys(partitions, 0)
        while any(positions[p] < ends[p] for p in partitions):
            for msg in consumer.consume(1000, 1.0):
                if msg.error() is None:
                    positions[msg.partition()] = msg.offset() + 1
                    with contextlib.suppress(UnicodeDecodeError):  # a poison record: the dead letters' own
                        counts.update(msg.value().decode().lower().split())
        return counts
    finally:
        consumer.close()


def lines_for(batch: int, count: int) -> list[str]:
    return [f"{WORDS[(i + batch) % len(WORDS)]} {WORDS[(i * 7 + batch) % len(WORDS)]}" for i in range(count)]


class SteadyInput:
    """A producer thread writing lines at a steady rate while a scenario runs (scaling, upgrades, kills)."""

    def __init__(self, bootstrap: str, topic: str, expected: Counter[str], per_second: int = 200) -> None:
        self.bootstrap, self.topic, self.expected, self.per_second = bootstrap, topic, expected, per_second
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self.sent = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> SteadyInput:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        batch = 1000
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                produce_lines(
                    self.bootstrap, self.topic, lines_for(batch, self.per_second // 5), self.expected
                )
                self.sent += self.per_second // 5
                batch += 1
                self._stop.wait(max(0.0, 0.2 - (time.monotonic() - started)))
        except BaseException as exc:
            self._error = exc


class CountAudit:
    """Reads the output as a consumer would (read_committed) and keeps every update per word: the final
    counts must equal the input's and no word's count may ever go down (a regression is a lost or
    re-applied update)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Consumer

        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"audit-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        self.consumer.subscribe([topic])
        self.latest: dict[str, int] = {}
        self.regressions: list[str] = []

    def poll(self, seconds: float = 1.0) -> dict[str, int]:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for msg in self.consumer.consume(1000, 0.2):
                if msg.error():
                    continue
                word = msg.key().decode()
                count = int.from_bytes(msg.value(), "big", signed=True)
                if count < self.latest.get(word, 0):
                    self.regressions.append(
                        f"{word}: {self.latest[word]} -> {count} (partition {msg.partition()})"
                    )
                self.latest[word] = count
        return self.latest

    def wait_exact(self, expected: Counter[str], timeout: float = 180.0) -> None:
        def exact() -> bool:
            return self.poll() == dict(expected)

        try:
            wait_for("exact committed counts", exact, timeout, interval=0)
        except TimeoutError:
            diff = {w: (self.latest.get(w), n) for w, n in expected.items() if self.latest.get(w) != n}
            raise AssertionError(
                f"counts differ (word: (output, input)): {dict(list(diff.items())[:10])}"
            ) from None
        assert not self.regressions, f"counts went down: {self.regressions[:10]}"

    def close(self) -> None:
        self.consumer.close()


def pod_names(node: RealNode, namespace: str, selector: str) -> list[str]:
    out = node.kubectl("-n", namespace, "get", "pods", "-l", selector, "-o", "json")
    return sorted(p["metadata"]["name"] for p in json.loads(out)["items"])


#: The operator's pods, as the chart labels them.
OPERATOR_SELECTOR = "app.kubernetes.io/name=kappaflow-operator"
#: kopf's own log lines (the chart's `verbose: true`) when a replica holds back or resumes for peering.
_PAUSED = "Pausing the watch-stream for streamapps.v1alpha1.kappaflow.io"
_RESUMED = "Resuming the watch-stream for streamapps.v1alpha1.kappaflow.io"


def operator_logs(node: RealNode, pod: str) -> str:
    """The operator pod's current container's log (a restarted container starts a new one)."""
    return node.kubectl("-n", OPERATOR_NAMESPACE, "logs", pod, check=False)


def operator_leaders(node: RealNode) -> list[str]:
    """The replicas handling StreamApps now: never paused, or resumed after their last pause."""
    pods = pod_names(node, OPERATOR_NAMESPACE, OPERATOR_SELECTOR)
    return [p for p in pods if (logs := operator_logs(node, p)).rfind(_RESUMED) >= logs.rfind(_PAUSED)]


def one_operator_leader(node: RealNode) -> str | None:
    """The leader, when exactly one replica handles StreamApps (None while none or both do)."""
    leaders = operator_leaders(node)
    return leaders[0] if len(leaders) == 1 else None


def restored_records(node: RealNode, namespace: str, pod: str) -> tuple[int, list[str]]:
    """The changelog records a pod's current container restored, and its restoration log lines."""
    text = node.kubectl("-n", namespace, "logs", pod, check=False)
    total, lines = 0, []
    for line in text.splitlines():
        m = re.search(r"restored (\d+) records", line)
        if m:
            total += int(m.group(1))
            lines.append(line[:300])
    return total, lines


def topic_records(bootstrap: str, topic: str) -> int:
    """Records a topic holds (end minus start offsets, over its partitions)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"size-{uuid.uuid4().hex[:8]}"})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        marks = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30) for p in partitions]
        return sum(high - low for low, high in marks)
    finally:
        consumer.close()


def pod_scrape_configs(workdir: Path) -> list[dict[str, Any]]:
    """Two scrape jobs over target files that `write_pod_targets` keeps current. (Debian's Prometheus is
    built without Kubernetes service discovery; the test discovers the pods from the API server by the
    same rules a `kubernetes_sd_configs` pod role with the usual relabelling would apply.)"""
    return [
        {
            "job_name": job,
            "file_sd_configs": [{"files": [str(workdir / f"{job}.json")], "refresh_interval": "1s"}],
        }
        for job in ("kappaflow-apps", "kappaflow-operator")
    ]


def write_pod_targets(node: RealNode, workdir: Path) -> int:
    """The scrape targets from the pods the API server lists: app pods by the `prometheus.io/scrape`,
    `port` and `path` annotations the operator puts on them, the operator's pods by their `metrics` port
    (what the chart's PodMonitor selects); labelled with namespace and pod. Returns the target count."""
    pods = json.loads(node.kubectl("get", "pods", "-A", "-o", "json"))["items"]
    jobs: dict[str, list[dict[str, Any]]] = {"kappaflow-apps": [], "kappaflow-operator": []}
    for pod in pods:
        meta, ip = pod["metadata"], pod.get("status", {}).get("podIP")
        if not ip or pod["status"].get("phase") != "Running":
            continue
        labels = {"namespace": meta["namespace"], "pod": meta["name"]}
        notes = meta.get("annotations") or {}
        if notes.get("prometheus.io/scrape") == "true":
            path = notes.get("prometheus.io/path", "/metrics")
            target = {
                "targets": [f"{ip}:{notes['prometheus.io/port']}"],
                "labels": {**labels, "__metrics_path__": path},
            }
            jobs["kappaflow-apps"].append(target)
        if (meta.get("labels") or {}).get("app.kubernetes.io/name") == "kappaflow-operator":
            ports = [
                p for c in pod["spec"]["containers"] for p in c.get("ports", []) if p.get("name") == "metrics"
            ]
            jobs["kappaflow-operator"] += [
                {"targets": [f"{ip}:{p['containerPort']}"], "labels": labels} for p in ports
            ]
    workdir.mkdir(parents=True, exist_ok=True)
    for job, targets in jobs.items():
        tmp = workdir / f".{job}.json"
        tmp.write_text(json.dumps(targets))
        tmp.replace(workdir / f"{job}.json")
    return sum(len(v) for v in jobs.values())


SPARK_OPERATOR_NAMESPACE = "spark-operator"
SPARK_OPERATOR_VALUES = ROOT / "examples" / "k8s" / "spark-operator-values.yaml"


def install_spark_operator(node: RealNode, job_namespaces: list[str]) -> None:
    """`helm upgrade --install` of the Kubeflow Spark operator's own chart (from its Go module) with
    examples/k8s/spark-operator-values.yaml, watching `job_namespaces` (they must exist: the chart puts
    the Spark ServiceAccount and its Role there). The image's ID goes on the pod, as for kappaflow's."""
    from tests.harness import spark_operator
    from tests.harness.images import SPARK_OPERATOR
    from tests.harness.realnode.images_store import docker_id

    spark_operator.build()
    argv = [
        helm_binary(),
        f"--kubeconfig={node.kubeconfig}",
        "upgrade",
        "--install",
        "spark-operator",
        str(spark_operator.chart_dir()),
        "--namespace",
        SPARK_OPERATOR_NAMESPACE,
        "--create-namespace",
        "-f",
        str(SPARK_OPERATOR_VALUES),
        "--set",
        f"spark.jobNamespaces={{{','.join(job_namespaces)}}}",
        "--set-string",
        f"controller.annotations.kappaflow\\.io/image-id={docker_id(SPARK_OPERATOR)}",
        "--wait",
        "--timeout",
        "300s",
    ]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=330, check=False)
    if p.returncode:
        pods = node.kubectl("-n", SPARK_OPERATOR_NAMESPACE, "get", "pods,events", check=False)
        raise RuntimeError(f"helm install of the Spark operator failed: {p.stderr.strip()}\n{pods}")


def uninstall_spark_operator(node: RealNode) -> None:
    subprocess.run(
        [
            helm_binary(),
            f"--kubeconfig={node.kubeconfig}",
            "uninstall",
            "spark-operator",
            "-n",
            SPARK_OPERATOR_NAMESPACE,
            "--wait",
            "--timeout",
            "120s",
        ],
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
