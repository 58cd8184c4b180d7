"""The word count example's whole life on real pods, as a platform team runs it: `kubectl apply -k
examples/k8s` with the chart's operator, then scaling, a rolling upgrade that keeps state, a container
SIGKILLed, a pod deleted, the kubelet restarted, and interactive queries across pods by DNS name. The
output is audited after each step with read_committed: every input counted exactly once, no count ever
going down. The tests run in order and share the app (module-scoped), each starting from the last's
state, as the operations would follow each other on a cluster."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kappaflow_operator.kafka import KafkaAdmin, client_config
from tests.harness.realnode import node
from tests.harness.realnode.images_store import ctr, import_images
from tests.harness.realnode_fixtures import RealNode
from tests.realnode.cluster import (
    OPERATOR_NAMESPACE,
    ROOT,
    ClusterKafka,
    CountAudit,
    SteadyInput,
    condition,
    input_word_counts,
    lines_for,
    one_operator_leader,
    pod_names,
    pod_scrape_configs,
    produce_lines,
    restored_records,
    topic_records,
    wait_for,
    write_pod_targets,
)

pytestmark = [pytest.mark.realnode, pytest.mark.timeout(600)]

NAMESPACE = "kappaflow-examples"
APP = "wordcount"
SELECTOR = "kappaflow.io/streamapp=wordcount,!job-name"  # the app pods, not the describe Job's


@dataclass
class App:
    node: RealNode
    kafka: ClusterKafka
    audit: CountAudit
    expected: Counter[str] = field(default_factory=Counter)
    timings: dict[str, float] = field(default_factory=dict)

    def streamapp(self) -> dict:
        return self.node.get("streamapp", APP, NAMESPACE)

    def wait_ready(self, what: str, timeout: float = 300) -> float:
        started = time.monotonic()

        def ready() -> bool:
            app = self.streamapp()
            c = condition(app, "Ready")
            status = app.get("status", {})
            return bool(
                c
                and c["status"] == "True"
                and status.get("observedGeneration") == app["metadata"]["generation"]
                and status.get("readyReplicas") == status.get("replicas")
            )

        wait_for(f"{what}: StreamApp Ready", ready, timeout, interval=1)
        self.timings[what] = time.monotonic() - started
        return self.timings[what]

    def wait_pods_ready(self, what: str, timeout: float = 180) -> None:
        """Every pod of the StatefulSet Ready as the kubelet reports it (the StreamApp's status follows
        on the operator's next pass)."""
        started = time.monotonic()

        def ready() -> bool:
            out = json.loads(self.node.kubectl("-n", NAMESPACE, "get", "pods", "-l", SELECTOR, "-o", "json"))
            pods = out["items"]
            return len(pods) == self.sts()["spec"]["replicas"] and all(
                condition(p, "Ready") and condition(p, "Ready")["status"] == "True" for p in pods
            )

        wait_for(f"{what}: every pod Ready", ready, timeout, interval=0.5)
        self.timings[what] = time.monotonic() - started

    def sts(self) -> dict:
        return self.node.get("statefulset", APP, NAMESPACE)

    def pvc_uids(self) -> dict[str, str]:
        out = json.loads(self.node.kubectl("-n", NAMESPACE, "get", "pvc", "-o", "json"))
        return {p["metadata"]["name"]: p["metadata"]["uid"] for p in out["items"]}


@pytest.fixture(scope="module")
def app(real_node: RealNode, cluster_kafka: ClusterKafka, operator_release: str) -> Iterator[App]:
    # a namespace still terminating from an earlier deletion would swallow what is applied into it
    wait_for(
        "no terminating example namespace",
        lambda: "Terminating" not in real_node.kubectl("get", "namespace", NAMESPACE, check=False),
        180,
        interval=1,
    )
    started = time.monotonic()
    real_node.kubectl("apply", "-k", str(ROOT / "examples" / "k8s"))
    audit = CountAudit(cluster_kafka.host_bootstrap, "wordcount-output")
    state = App(
        real_node, cluster_kafka, audit, input_word_counts(cluster_kafka.host_bootstrap, "wordcount-input")
    )
    try:
        state.wait_ready("apply -k examples/k8s", timeout=420)
        state.timings["apply -k examples/k8s"] = time.monotonic() - started
        yield state
    finally:
        print("timings:", ", ".join(f"{k} {v:.1f}s" for k, v in state.timings.items()))
        audit.close()
        real_node.kubectl(  # when a test stopped before the deletion test
            "delete",
            "-k",
            str(ROOT / "examples" / "k8s"),
            "--wait=true",
            "--timeout=120s",
            check=False,
            timeout=150,
        )


def test_apply_runs_the_example_with_exact_counts(app: App) -> None:
    produce_lines(app.kafka.host_bootstrap, "wordcount-input", lines_for(0, 3000), app.expected)
    app.audit.wait_exact(app.expected)
    table = app.node.kubectl("-n", NAMESPACE, "get", "streamapp", APP)
    header, row = table.splitlines()[:2]
    assert header.split()[:5] == ["NAME", "REPLICAS", "READY", "PHASE", "LAG"], table
    assert row.split()[:4] == [APP, "2", "2", "Running"], table
    described = app.node.kubectl("-n", NAMESPACE, "describe", "streamapp", APP)
    assert "Events:" in described
    status = app.streamapp()["status"]
    assert all(t["state"] in ("Ready", "Created") for t in status["internalTopics"]), status["internalTopics"]
    # PodSecurity `restricted` is enforced on the example's namespace: the pods were admitted under it
    labels = app.node.get("namespace", NAMESPACE, "")["metadata"]["labels"]
    assert labels.get("pod-security.kubernetes.io/enforce") == "restricted"


def test_scaling_under_steady_input_keeps_counts_exact(app: App) -> None:
    with SteadyInput(app.kafka.host_bootstrap, "wordcount-input", app.expected):
        for replicas in (3, 1):
            started = time.monotonic()
            app.node.kubectl("-n", NAMESPACE, "scale", "streamapp", APP, f"--replicas={replicas}")
            wait_for(
                f"{replicas} pods", lambda r=replicas: len(pod_names(app.node, NAMESPACE, SELECTOR)) == r, 180
            )
            app.wait_ready(f"scale to {replicas}")
            app.timings[f"scale to {replicas}"] = time.monotonic() - started
            time.sleep(3)
    # the operator took the stopped pods' static members out of the group once they were gone, so their
    # tasks moved at once rather than after session.timeout.ms (departed.py)
    group = KafkaAdmin(client_config(app.kafka.host_bootstrap))
    wait_for("only wordcount-0 in the group", lambda: group.static_members(APP) == [f"{APP}-0"], 60)
    removed = app.node.kubectl(
        "-n", NAMESPACE, "get", "events", "--field-selector", "reason=MembersRemoved", "-o", "json"
    )
    messages = [e["message"] for e in json.loads(removed)["items"]]
    assert any(f"{APP}-1" in m and f"{APP}-2" in m for m in messages) or (
        any(f"{APP}-1" in m for m in messages) and any(f"{APP}-2" in m for m in messages)
    ), messages
    app.audit.wait_exact(app.expected)
    # the scale subresource asks for more than the topology's 4 partitions: capped, with the reason
    app.node.kubectl("-n", NAMESPACE, "scale", "streamapp", APP, "--replicas=6")

    def capped() -> bool:
        c = condition(app.streamapp(), "ReplicasCapped")
        return bool(c and c["status"] == "True" and app.sts()["spec"]["replicas"] == 4)

    wait_for("replicas capped at the partition count", capped, 120)
    app.node.kubectl("-n", NAMESPACE, "scale", "streamapp", APP, "--replicas=2")
    app.wait_ready("scale back to 2")


def test_rolling_upgrade_keeps_state_and_restores_only_the_tail(app: App) -> None:
    # a new tag of the example image, as a CI pipeline would push one
    import subprocess

    from tests.harness.realnode.images_store import docker_binary

    subprocess.run(
        [docker_binary(), "tag", "kappaflow-examples:0.1.0", "kappaflow-examples:0.1.1"], check=True
    )
    import_images(["kappaflow-examples:0.1.1"], print)
    pvcs = app.pvc_uids()
    with SteadyInput(app.kafka.host_bootstrap, "wordcount-input", app.expected):
        time.sleep(2)
        app.node.kubectl(
            "-n",
            NAMESPACE,
            "patch",
            "streamapp",
            APP,
            "--type=merge",
            "-p",
            '{"spec":{"image":"kappaflow-examples:0.1.1"}}',
        )

        def rolled() -> bool:
            sts = app.sts()
            image = sts["spec"]["template"]["spec"]["containers"][0]["image"]
            st = sts.get("status", {})
            return image.endswith(":0.1.1") and st.get("updatedReplicas") == st.get("replicas") == st.get(
                "readyReplicas"
            )

        started = time.monotonic()
        wait_for("the StatefulSet rolled to 0.1.1", rolled, 300, interval=1)
        app.timings["rolling upgrade"] = time.monotonic() - started
        app.wait_ready("upgrade Ready")
    app.audit.wait_exact(app.expected)
    assert app.pvc_uids() == pvcs, "the upgrade replaced a volume"
    changelog = topic_records(app.kafka.host_bootstrap, "wordcount-counts-changelog")
    for pod in pod_names(app.node, NAMESPACE, SELECTOR):
        restored, lines = restored_records(app.node, NAMESPACE, pod)
        print(f"{pod}: restored {restored} of the changelog's {changelog} records after the upgrade")
        # only the tail past the pod's local checkpoint, not the changelog it would replay from offset 0
        assert restored * 5 < changelog, (
            f"{pod} restored {restored} of {changelog} changelog records: {lines}"
        )


def _container_id(app: App, pod: str) -> str:
    status = app.node.get("pod", pod, NAMESPACE)["status"]["containerStatuses"][0]
    return str(status["containerID"]).split("://", 1)[1]


def test_sigkill_pod_delete_and_kubelet_restart_keep_exactly_once(app: App) -> None:
    pvcs = app.pvc_uids()
    pods = pod_names(app.node, NAMESPACE, SELECTOR)
    with SteadyInput(app.kafka.host_bootstrap, "wordcount-input", app.expected):
        # 1. the container's process killed with SIGKILL inside the pod: the kubelet restarts it
        restarts = app.node.get("pod", pods[0], NAMESPACE)["status"]["containerStatuses"][0]["restartCount"]
        ctr("tasks", "kill", "-s", "SIGKILL", _container_id(app, pods[0]))
        wait_for(
            "the killed container restarted",
            lambda: (
                app.node.get("pod", pods[0], NAMESPACE)["status"]["containerStatuses"][0]["restartCount"]
                > restarts
            ),
            120,
        )
        app.wait_pods_ready("after SIGKILL")
        # 2. a pod deleted: the StatefulSet recreates it with the same claim
        uid = app.node.get("pod", pods[-1], NAMESPACE)["metadata"]["uid"]
        app.node.kubectl("-n", NAMESPACE, "delete", "pod", pods[-1], "--wait=false")
        wait_for(
            "the pod recreated",
            lambda: app.node.get("pod", pods[-1], NAMESPACE)["metadata"]["uid"] != uid,
            120,
        )
        app.wait_pods_ready("after pod delete")
        # 3. the kubelet killed and restarted: the pods keep running through it
        node.restart_kubelet()
        wait_for(
            "node Ready again",
            lambda: condition(app.node.get("node", node.s.NODE, ""), "Ready")["status"] == "True",
            120,
        )
        app.wait_pods_ready("after kubelet restart")
        time.sleep(3)
    app.audit.wait_exact(app.expected)
    assert app.pvc_uids() == pvcs, "a volume was replaced"


def test_a_hard_killed_operator_leader_hands_over_and_the_next_change_is_carried_out(app: App) -> None:
    """SIGKILL of the leading operator's process leaves its kopf peer record behind (no goodbye): a scale
    applied that moment is carried out once the record expires (the chart's peering.lifetimeSeconds),
    by the other replica or by the leader's restarted container."""
    leader = wait_for("one operator leader", lambda: one_operator_leader(app.node), 120)
    container = app.node.get("pod", leader, OPERATOR_NAMESPACE)["status"]["containerStatuses"][0]
    ctr("tasks", "kill", "-s", "SIGKILL", str(container["containerID"]).split("://", 1)[1])
    started = time.monotonic()
    replicas = int(app.sts()["spec"]["replicas"])
    app.node.kubectl("-n", NAMESPACE, "scale", "streamapp", APP, f"--replicas={replicas + 1}")
    wait_for(
        f"{replicas + 1} pods after the leader's kill",
        lambda: len(pod_names(app.node, NAMESPACE, SELECTOR)) == replicas + 1,
        120,
    )
    app.wait_ready("scale after the operator leader's kill", timeout=120)
    app.timings["scale carried out after a hard-killed operator leader"] = time.monotonic() - started

    def restarted() -> bool:
        status = app.node.get("pod", leader, OPERATOR_NAMESPACE)["status"]["containerStatuses"][0]
        return int(status["restartCount"]) > int(container["restartCount"])

    wait_for("the killed operator container restarted", restarted, 120)
    wait_for("one operator leader again", lambda: one_operator_leader(app.node), 120)
    app.node.kubectl("-n", NAMESPACE, "scale", "streamapp", APP, f"--replicas={replicas}")
    app.wait_ready("scale back after the leader's kill")


def test_interactive_queries_cross_pods_by_dns_name(app: App) -> None:
    pods = pod_names(app.node, NAMESPACE, SELECTOR)
    assert len(pods) >= 2
    # 503 is the documented answer while the key's owner rebalances or restores (the previous test's
    # scale-in ends with the operator removing the departed member, which starts a rebalance): a client
    # asks again, as this one does for up to a minute
    fetch = (
        "import json, sys, time, urllib.error, urllib.request\n"
        "def get(u):\n"
        "    deadline = time.monotonic() + 60\n"
        "    while True:\n"
        "        try:\n"
        "            return json.load(urllib.request.urlopen(u, timeout=10))\n"
        "        except urllib.error.HTTPError as e:\n"
        "            if e.code != 503 or time.monotonic() > deadline:\n"
        "                raise\n"
        "            time.sleep(1)\n"
        "print(json.dumps([get(u) for u in sys.argv[1:]]))"
    )
    domain = f"{NAMESPACE}.svc.cluster.local"
    word = "w07"
    urls = [f"http://{pod}.{APP}-headless.{domain}:8080/v1/stores/counts/keys/{word}" for pod in pods]
    urls.append(f"http://{APP}-query.{domain}:8080/v1/stores/counts/keys/{word}")
    answers = json.loads(
        app.node.kubectl("-n", NAMESPACE, "exec", pods[0], "--", "python3", "-c", fetch, *urls)
    )
    assert {a["value"] for a in answers} == {app.expected[word]}, answers
    assert len({a["host"] for a in answers}) == 1, "every instance should name the same owner"


def test_prometheus_scrapes_the_pods_and_every_dashboard_panel_has_data(app: App, tmp_path: Path) -> None:
    """Debian's Prometheus scrapes the pods the API server lists (the operator's `prometheus.io/*` pod
    annotations; the operator's `metrics` port, as the chart's PodMonitor selects it), loads the chart's
    alert rules, and every panel of the chart's dashboard returns data from the real pods. A
    dead-letter topic is configured (a config change: the pods roll) and one record that is not UTF-8 is
    sent, so the error panels have data too."""
    from tests.harness.prometheus import PrometheusServer
    from tests.kafka.test_dashboard_prometheus import CHART, NEEDS_ANOTHER_APP, dashboard_targets

    if "wordcount-dlq" not in _topics(app):
        app.kafka.create_topics(["wordcount-dlq"], partitions=1)
    config = {
        "commit.interval.ms": "100",
        "default.deserialization.exception.handler": "log_and_continue",
        "errors.dead.letter.queue.topic.name": "wordcount-dlq",
    }
    app.node.kubectl(
        "-n",
        NAMESPACE,
        "patch",
        "streamapp",
        APP,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"config": config}}),
    )
    app.wait_ready("dead-letter config rolled out")
    app.wait_pods_ready("pods Ready with the dead-letter config")
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": app.kafka.host_bootstrap})
    producer.produce("wordcount-input", key=b"poison", value=b"\xff\xfe not utf-8")
    assert producer.flush(30) == 0
    # handled (and so committed past within a commit interval) before anything else happens: a poison
    # record left unhandled would stop the next run of the example, which has no dead-letter topic
    wait_for(
        "the poison record in the dead-letter topic",
        lambda: topic_records(app.kafka.host_bootstrap, "wordcount-dlq"),
        120,
    )
    rules = [CHART / "dashboards" / "alerts.yaml"]
    with SteadyInput(app.kafka.host_bootstrap, "wordcount-input", app.expected, per_second=50):
        targets = tmp_path / "targets"
        write_pod_targets(app.node, targets)
        with PrometheusServer(tmp_path / "prom", [], rules, pod_scrape_configs(targets)) as prom:
            (group,) = prom.rules()
            assert {r["health"] for r in group["rules"]} <= {"ok", "unknown"}, group["rules"]
            wait_for(
                "the pods' and the operator's targets up",
                lambda: len(prom.query('up{job=~"kappaflow-.*"} == 1')) >= 4,
                90,
            )
            # warm-ups and async backpressure need another app than the word count: their queries must
            # parse (below), their data is not expected here
            empty = [(t, e) for t, e in dashboard_targets() if not any(f in e for f in NEEDS_ANOTHER_APP)]
            deadline = time.monotonic() + 90
            while empty and time.monotonic() < deadline:
                time.sleep(2)
                write_pod_targets(app.node, targets)
                empty = [(title, expr) for title, expr in empty if not prom.query(expr)]
            assert not empty, f"dashboard panels without data from the real pods: {empty}"
            for _title, expr in dashboard_targets():
                prom.query(expr)  # NEEDS_ANOTHER_APP's queries too must parse
            namespaces = {
                r["metric"].get("namespace") for r in prom.query("kappaflow_records_processed_total")
            }
            assert NAMESPACE in namespaces, namespaces
    # the poison record went to the dead letters, counted nowhere: the counts are still exact
    app.audit.wait_exact(app.expected)


def _topics(app: App) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient({"bootstrap.servers": app.kafka.host_bootstrap}).list_topics(timeout=30).topics)


def test_deleting_the_example_removes_it_and_its_namespace(app: App) -> None:
    """`kubectl delete -k examples/k8s` as a user tears the example down: the StreamApp's cleanup runs
    while its namespace terminates (the API server then refuses new events) and the namespace goes."""
    started = time.monotonic()
    app.node.kubectl(
        "delete", "-k", str(ROOT / "examples" / "k8s"), "--wait=true", "--timeout=150s", timeout=170
    )
    wait_for(
        "the namespace gone", lambda: NAMESPACE not in app.node.kubectl("get", "namespaces", "-o", "name"), 60
    )
    app.timings["delete -k examples/k8s"] = time.monotonic() - started
