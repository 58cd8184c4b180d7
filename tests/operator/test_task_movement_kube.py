"""The operator and moving tasks, on the real control plane and broker: kopf in-process reads each pod's
own tasks over HTTP, shows a scale-out's warm-ups in status, and holds a scale-in until the removed pod's
active tasks have caught-up standbys on the pod that stays, then releases it.

The pods' HTTP side is the runtime's own health server (`kappaflow.runner.http.HealthServer`), each pod
bound to its own loopback address (pod IP 127.0.0.<n>) on the spec's metrics port, serving the task roles
the test sets: what a pod reports while it warms up or tails a standby is the runtime's to test
(tests/kafka/test_task_placement.py); here the test decides it, so each state is reached on cue.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from kappaflow.api.metrics import Metrics
from kappaflow.runner.http import HealthServer
from tests.e2e.operator_env import make_launcher, running_operator, wait_for
from tests.operator.test_reconcile_kube import Env, _app_id, crd_installed  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.kube, pytest.mark.kafka, pytest.mark.timeout(240)]

PARTITIONS = 4
FIRST_IP = 40  # pod <name>-<n> gets 127.0.0.<FIRST_IP + n>


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ScriptedPod:
    """A pod's process: the runtime's health server on the pod's address, answering what `roles` holds."""

    def __init__(self, ip: str, port: int, pods: ScriptedPods, name: str) -> None:
        self.name = name
        self.server = HealthServer(
            ip,
            port,
            Metrics(),
            lambda: True,
            lambda: pods.ready.get(name, True),
            lambda: {"state": "RUNNING", "tasks": dict(pods.roles.get(name, {}))},
        )
        self.server.start()
        self.stopped = False

    def poll(self) -> int | None:
        return 0 if self.stopped else None

    def terminate(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.server.stop()

    def kill(self) -> None:
        self.terminate()

    def wait(self, timeout: float | None = None) -> int:
        return 0


@dataclass
class ScriptedPods:
    port: int
    roles: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    ready: dict[str, bool] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @staticmethod
    def ip(pod: Any) -> str:
        """The StatefulSet's pods each get their own loopback address, by their ordinal (the controller's
        pod-index label); any other pod (the describe Job's) 127.0.0.1. Not by the name's last part: a Job
        pod's random suffix is sometimes all digits (`wc-describe-7583f47e-25297`), which made an address
        the API server rejects on every status patch."""
        index = (pod.metadata.labels or {}).get("apps.kubernetes.io/pod-index")
        return f"127.0.0.{FIRST_IP + int(index)}" if index is not None else "127.0.0.1"

    def start(self, pod: Any) -> ScriptedPod:
        with self.lock:
            return ScriptedPod(self.ip(pod), self.port, self, pod.metadata.name)

    def readiness(self, pod: Any, handle: Any) -> bool:
        return handle.poll() is None and self.ready.get(pod.metadata.name, True)

    def set(self, pod: str, roles: dict[str, tuple[str, int]], ready: bool = True) -> None:
        self.ready[pod] = ready
        self.roles[pod] = {task: {"role": role, "lag": lag} for task, (role, lag) in roles.items()}


@pytest.fixture
def moving(crd_installed, kafka_bootstrap, kafka_topics) -> Iterator[tuple[Env, ScriptedPods]]:  # noqa: F811
    from confluent_kafka.admin import AdminClient

    from tests.harness.fake_kubelet import FakeKubelet

    namespace = crd_installed.create_namespace("mv")
    input_topic = kafka_topics("words", partitions=PARTITIONS)
    output_topic = kafka_topics("counts", partitions=PARTITIONS)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    pods = ScriptedPods(_free_port())
    with crd_installed.api_client() as api:
        describe = make_launcher(api, input_topic, output_topic)

        def launch(pod: Any) -> Any:
            if (pod.metadata.labels or {}).get("kappaflow.io/job") == "describe":
                return describe(pod)
            return pods.start(pod)

        kubelet = FakeKubelet(
            api, namespace, launch, readiness=pods.readiness, max_grace_seconds=2, pod_ip=pods.ip
        )
        with kubelet, running_operator(crd_installed.kubeconfig, namespace):
            yield Env(api, namespace, kafka_bootstrap, input_topic, output_topic, admin), pods
        assert not kubelet.errors, kubelet.errors


def test_status_shows_warmups_and_a_scale_in_waits_for_caught_up_standbys(moving) -> None:
    env, pods = moving
    name = "wc"
    # wc-1 is the new pod of a scale-out: it warms up 0_2 and 0_3 while wc-0 keeps processing them
    pods.set(
        f"{name}-0", {"0_0": ("active", 0), "0_1": ("active", 0), "0_2": ("active", 0), "0_3": ("active", 0)}
    )
    pods.set(f"{name}-1", {"0_2": ("warmup", 5000), "0_3": ("warmup", 300)}, ready=False)
    spec = env.spec(
        _app_id(),
        replicas=2,
        standbyReplicas=1,
        metrics={"port": pods.port},
        config={"acceptable.recovery.lag": "100"},
        scaleIn={"standbyWaitSeconds": 600},  # long: the release below must come from the standbys
    )
    env.create(name, spec)

    def warming() -> dict[str, Any] | None:
        st = env.status(name)
        moving_ = st.get("taskMovement") or {}
        return st if moving_.get("warmupTasks") == 2 else None

    st = wait_for("status to show the warm-ups", warming, timeout=120)
    assert st["taskMovement"]["warmupMaxLag"] == 5000
    assert st["taskMovement"]["warmupPods"] == [f"{name}-1"]
    progressing = env.condition(name, "Progressing")
    assert progressing["reason"] == "WarmingUp" and st["phase"] == "Scaling"
    assert progressing["message"].startswith(f"scaling out: 2 tasks warming up on pod {name}-1")

    # caught up, joined: wc-1 runs 0_2 and 0_3 and keeps standbys of wc-0's tasks; wc-0 tails only 0_2
    pods.set(
        f"{name}-0",
        {"0_0": ("active", 0), "0_1": ("active", 0), "0_2": ("standby", 0), "0_3": ("standby", 4000)},
    )
    pods.set(f"{name}-1", {"0_2": ("active", 0), "0_3": ("active", 0), "0_0": ("standby", 0)})
    st = env.wait_running(name, 2)
    wait_for("the warm-ups to leave status", lambda: "taskMovement" not in env.status(name) or None)

    # scale in to 1: wc-1 goes, but 0_3's standby on wc-0 is 4000 records behind: held
    env.patch_spec(name, {"replicas": 1})

    def held() -> dict[str, Any] | None:
        moving_ = env.status(name).get("taskMovement") or {}
        return moving_ if moving_.get("scaleInTo") == 1 else None

    moving_ = wait_for("the scale-in to be held", held, timeout=60)
    assert moving_["waitingFor"] == [f"0_3@{name}-1"] and moving_["scaleInHeldSince"]
    progressing = env.condition(name, "Progressing")
    assert progressing["reason"] == "ScaleInHeld" and "scale-in 2 -> 1 held" in progressing["message"]
    time.sleep(5)  # more than two resync periods: still held
    assert env.apps.read_namespaced_stateful_set(name, env.namespace).spec.replicas == 2
    assert "ScaleInHeld" in env.event_reasons(name)

    # the standby catches up: the StatefulSet loses wc-1
    pods.set(
        f"{name}-0",
        {"0_0": ("active", 0), "0_1": ("active", 0), "0_2": ("standby", 0), "0_3": ("standby", 60)},
    )
    wait_for(
        "the scale-in to be released",
        lambda: env.apps.read_namespaced_stateful_set(name, env.namespace).spec.replicas == 1,
        timeout=60,
    )
    env.wait_running(name, 1)
    assert "taskMovement" not in env.status(name) or env.status(name)["taskMovement"] is None
