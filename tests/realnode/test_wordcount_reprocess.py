"""`upgrade: reprocess` on real pods: the Kubeflow Spark operator (v2.5.0, built from its Go module,
installed with its own chart and examples/k8s/spark-operator-values.yaml) runs the kappaflow operator's
SparkApplication with Spark's Kubernetes backend: a driver pod, which creates an executor pod. Nothing
writes a SparkApplication status but the Spark operator's controller.

The word count example runs under steady input; its image is changed to one with Spark and
`upgrade.mode` set to reprocess. The old version keeps counting while Spark rebuilds the counts and the
`counts` changelog under a new application id from the input's log; on COMPLETED the pods roll onto the
new id, restore the changelog Spark wrote and consume from the offsets Spark committed. Asserted: the
SparkApplication's states as its controller wrote them, the driver and executor pods, the StreamApp's
phases, exact final counts read with read_committed, and that the new pods consumed only what came after
Spark's range (their records-processed metric), never the input from offset 0.

Own namespace, topics and application id per run (the example reads its topic names from the env), so
the word count lifecycle's audit of `wordcount-output` never sees this scenario's output: while two
application ids write one output topic, a count may be rewritten lower for a moment (Spark's rebuild lags
the old version's count) - inherent to any blue/green reprocess, and why only the final counts are
compared here.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness.realnode_fixtures import RealNode
from tests.realnode.cluster import (
    ROOT,
    ClusterKafka,
    CountAudit,
    SteadyInput,
    condition,
    install_spark_operator,
    lines_for,
    produce_lines,
    topic_records,
    uninstall_spark_operator,
    wait_for,
)

pytestmark = [pytest.mark.realnode, pytest.mark.timeout(900)]

NAMESPACE = "kappaflow-reprocess"
APP = "wordcount"
SPARK_IMAGE = "kappaflow-examples-spark:0.1.0"
SELECTOR = f"kappaflow.io/streamapp={APP},!job-name,!spark-role"  # the app pods: not Jobs, not Spark
#: Small enough for a 2-CPU node shared with Kafka, both operators and the app's pods.
SPARK = {
    "serviceAccountName": "kappaflow-spark",
    "timeoutSeconds": 600,
    "driver": {"cores": 1, "coreRequest": "100m", "memory": "512m"},
    "executor": {"instances": 1, "cores": 1, "coreRequest": "100m", "memory": "512m"},
}


def streamapp_manifest(app_id: str, topics: tuple[str, str]) -> dict[str, Any]:
    """examples/k8s/wordcount-streamapp.yaml, with this run's id and topics (through the env the example
    reads) and one replica."""
    body: dict[str, Any] = yaml.safe_load((ROOT / "examples/k8s/wordcount-streamapp.yaml").read_text())
    body["metadata"]["namespace"] = NAMESPACE
    spec = body["spec"]
    spec["applicationId"] = app_id
    spec["replicas"] = 1
    spec["standbyReplicas"] = 0
    spec["resources"]["requests"]["cpu"] = "100m"
    spec["podTemplate"] = {
        "env": [
            {"name": "WORDCOUNT_INPUT", "value": topics[0]},
            {"name": "WORDCOUNT_OUTPUT", "value": topics[1]},
        ]
    }
    return body


def records_processed(node: RealNode, pod: str) -> float:
    """The pod's `records_processed_total` summed over its tasks (its /metrics, through the API server's
    pod proxy)."""
    port = json.loads(node.kubectl("-n", NAMESPACE, "get", "pod", pod, "-o", "json"))["metadata"][
        "annotations"
    ]["prometheus.io/port"]
    text = node.kubectl("get", "--raw", f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}:{port}/proxy/metrics")
    total = 0.0
    for line in text.splitlines():
        m = re.match(r"^kappaflow_records_processed_total(\{[^}]*\})?\s+([0-9.eE+]+)", line)
        if m:
            total += float(m.group(2))
    return total


def spark_driver_log(node: RealNode, spark_application: str) -> str:
    """The driver pod's log (the pod the Spark operator recorded in the SparkApplication's status)."""
    app = json.loads(
        node.kubectl("-n", NAMESPACE, "get", "sparkapplication", spark_application, "-o", "json")
    )
    pod = app["status"]["driverInfo"]["podName"]
    return node.kubectl("-n", NAMESPACE, "logs", pod, check=False)


class Watch:
    """What was seen while polling: SparkApplication states, StreamApp phases, Spark pods by role."""

    def __init__(self, node: RealNode) -> None:
        self.node = node
        self.spark_states: list[str] = []
        self.phases: list[str] = []
        self.spark_pods: dict[str, dict[str, str]] = {"driver": {}, "executor": {}}
        self.spark_pod_labels: dict[str, dict[str, str]] = {}

    def poll(self) -> dict[str, Any]:
        app = self.node.get("streamapp", APP, NAMESPACE)
        phase = app.get("status", {}).get("phase")
        if phase and (not self.phases or self.phases[-1] != phase):
            self.phases.append(phase)
        items = json.loads(self.node.kubectl("-n", NAMESPACE, "get", "sparkapplications", "-o", "json"))[
            "items"
        ]
        for item in items:
            state = ((item.get("status") or {}).get("applicationState") or {}).get("state")
            if state and (not self.spark_states or self.spark_states[-1] != state):
                self.spark_states.append(state)
        pods = json.loads(self.node.kubectl("-n", NAMESPACE, "get", "pods", "-l", "spark-role", "-o", "json"))
        for pod in pods["items"]:
            role = pod["metadata"]["labels"]["spark-role"]
            self.spark_pod_labels[pod["metadata"]["name"]] = pod["metadata"]["labels"]
            seen = self.spark_pods.setdefault(role, {})
            phase = pod["status"].get("phase", "")
            if seen.get(pod["metadata"]["name"]) != "Running":  # keep the fact it ran
                seen[pod["metadata"]["name"]] = phase
        return app


def test_reprocess_upgrade_runs_spark_as_pods_and_rolls_onto_its_state(
    real_node: RealNode, cluster_kafka: ClusterKafka, operator_release: str, tmp_path: Path
) -> None:
    node, kafka = real_node, cluster_kafka
    run = uuid.uuid4().hex[:6]
    topics = (f"reprocess-{run}-input", f"reprocess-{run}-output")
    app_id = f"wordcount-{run}"
    timings: dict[str, float] = {}
    wait_for(
        "no terminating reprocess namespace",
        lambda: "Terminating" not in node.kubectl("get", "namespace", NAMESPACE, check=False),
        180,
        interval=1,
    )
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": NAMESPACE, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}},
    }
    node.kubectl("apply", "-f", "-", input=json.dumps(namespace))
    kafka.create_topics(list(topics), partitions=4)
    audit = CountAudit(kafka.host_bootstrap, topics[1])
    expected: Counter[str] = Counter()
    try:
        started = time.monotonic()
        install_spark_operator(node, [NAMESPACE])
        timings["Spark operator installed"] = time.monotonic() - started
        node.kubectl("apply", "-f", "-", input=json.dumps(streamapp_manifest(app_id, topics)))
        watch = Watch(node)

        def ready_on(application_id: str) -> bool:
            app = watch.poll()
            status = app.get("status", {})
            ready = condition(app, "Ready")
            return bool(
                ready
                and ready["status"] == "True"
                and status.get("applicationId") == application_id
                and status.get("observedGeneration") == app["metadata"]["generation"]
                and status.get("readyReplicas") == status.get("replicas") == 1
            )

        started = time.monotonic()
        wait_for("StreamApp Ready", lambda: ready_on(app_id), 420, interval=1)
        timings["apply to Ready"] = time.monotonic() - started
        produce_lines(kafka.host_bootstrap, topics[0], lines_for(0, 4000), expected)
        audit.wait_exact(expected)

        # The reprocess upgrade, under steady input.
        patch = {"spec": {"image": SPARK_IMAGE, "upgrade": {"mode": "reprocess", "spark": SPARK}}}
        started = time.monotonic()
        with SteadyInput(kafka.host_bootstrap, topics[0], expected, per_second=100) as steady:
            node.kubectl("-n", NAMESPACE, "patch", "streamapp", APP, "--type=merge", "-p", json.dumps(patch))
            wait_for(
                "the SparkApplication COMPLETED",
                lambda: watch.poll() and "COMPLETED" in watch.spark_states,
                600,
                interval=1,
            )
            timings["patch to Spark COMPLETED"] = time.monotonic() - started
            run_status = watch.poll()["status"]["reprocessing"]
            new_id = run_status["applicationId"]
            assert new_id.startswith(f"{app_id}-r"), run_status
            # Spark's range: the input from offset 0 to the end offsets it committed for the new id.
            driver_log = spark_driver_log(node, run_status["sparkApplication"])
            found = re.search(
                rf"reprocessing (\d+) records of {topics[0]} into application '{new_id}'", driver_log
            )
            assert found, driver_log[-3000:]
            spark_read = int(found.group(1))
            wait_for("Ready on the reprocessed id", lambda: ready_on(new_id), 420, interval=1)
            timings["patch to Ready on the new id"] = time.monotonic() - started
            time.sleep(3)  # a little input for the new pod alone
        sent_during = steady.sent

        # The real controller wrote the states (the operator only reads them), in order, and its events
        # record each step (a SUBMITTED that lasted less than a poll is in its events; v2.5.0 records no
        # event for the move from SUCCEEDING to COMPLETED, which the polled states show).
        states = watch.spark_states
        order = ["SUBMITTED", "RUNNING", "SUCCEEDING", "COMPLETED"]
        assert all(state in order for state in states), states
        assert states == sorted(states, key=order.index) and states[-1] == "COMPLETED", states
        assert "RUNNING" in states, states
        events = json.loads(
            node.kubectl(
                "-n",
                NAMESPACE,
                "get",
                "events",
                "--field-selector",
                f"involvedObject.name={run_status['sparkApplication']}",
                "-o",
                "json",
            )
        )["items"]
        reasons = {e["reason"] for e in events if _component(e) == "spark-application-controller"}
        assert {
            "SparkApplicationSubmitted",
            "SparkDriverRunning",
            "SparkExecutorRunning",
            "SparkDriverCompleted",
        } <= reasons, (reasons, [(e["reason"], e.get("source")) for e in events])
        spark_app = json.loads(
            node.kubectl(
                "-n", NAMESPACE, "get", "sparkapplication", run_status["sparkApplication"], "-o", "json"
            )
        )
        driver_pod = spark_app["status"]["driverInfo"]["podName"]
        assert watch.spark_pods["driver"].get(driver_pod) in ("Running", "Succeeded"), watch.spark_pods
        assert any(p in ("Running", "Succeeded") for p in watch.spark_pods["executor"].values()), (
            watch.spark_pods
        )
        # Spark's pods are not the app's: the app's Service and PDB select `kappaflow.io/streamapp`.
        assert all("kappaflow.io/streamapp" not in labels for labels in watch.spark_pod_labels.values())
        executor_states = spark_app["status"].get("executorState") or {}
        assert executor_states and set(executor_states.values()) <= {"COMPLETED", "RUNNING"}, spark_app[
            "status"
        ]
        # The StreamApp: Reprocessing while Spark ran, then rolled onto the new id.
        assert "Reprocessing" in watch.phases, watch.phases
        assert watch.phases[-1] == "Running", watch.phases
        status = node.get("streamapp", APP, NAMESPACE)["status"]
        assert status["applicationId"] == new_id and status["reprocessing"]["state"] == "Completed"

        # Exact counts, read_committed, then one more batch on the new id alone.
        final_audit = CountAudit(kafka.host_bootstrap, topics[1])
        try:
            wait_for("exact final counts", lambda: final_audit.poll() == dict(expected), 240, interval=0)
            produce_lines(kafka.host_bootstrap, topics[0], lines_for(7, 500), expected)
            wait_for(
                "exact counts after the roll", lambda: final_audit.poll() == dict(expected), 120, interval=0
            )
        finally:
            final_audit.close()

        # The new pod started from the offsets Spark committed: it processed exactly the input after
        # Spark's range (each line once, then its two words from the repartition topic), and less than a
        # replay of even the first batch would add - never the input from offset 0.
        total_input = topic_records(kafka.host_bootstrap, topics[0])
        assert total_input == 4000 + sent_during + 500, (total_input, sent_during)
        after_spark = total_input - spark_read
        pods = json.loads(node.kubectl("-n", NAMESPACE, "get", "pods", "-l", SELECTOR, "-o", "json"))["items"]
        assert [p["spec"]["containers"][0]["image"] for p in pods] == [SPARK_IMAGE]
        processed = records_processed(node, pods[0]["metadata"]["name"])
        timings["input records after Spark's range"] = after_spark
        timings["records the new pod processed"] = processed
        assert spark_read >= 4000 and after_spark >= 500, (spark_read, total_input)
        assert 3 * after_spark <= processed < 3 * after_spark + 3 * 4000, (processed, after_spark, spark_read)
    finally:
        print("reprocess timings:", ", ".join(f"{k} {v:.1f}" for k, v in timings.items()))
        audit.close()
        node.kubectl(
            "delete", "namespace", NAMESPACE, "--wait=true", "--timeout=180s", check=False, timeout=200
        )
        uninstall_spark_operator(node)


def _component(event: dict[str, Any]) -> str:
    """Who wrote an event: the recorder's component (core/v1 `source`, or its events.k8s.io field)."""
    return str((event.get("source") or {}).get("component") or event.get("reportingComponent") or "")
