"""Two operator processes against the real apiserver: kopf peering elects one, the other takes over,
on a clean stop (SIGTERM: the leader removes its record) and on a hard kill (SIGKILL: the record stays
until its lifetime, shortened here through KAPPAFLOW_OPERATOR_PEERING_LIFETIME_SECONDS, runs out).

Each process is a real `kopf run -m kappaflow_operator.main --peering=...` with its own HOSTNAME (the
chart's pod name, from which `main.peering_priority` derives a distinct priority) and its own metrics
port. Who acts is read from what each one exposes: `kappaflow_operator_reconciles_total` on its
/metrics, and the `reportingInstance` of the events it posts on the StreamApp. No kubelet is needed: a
StreamApp's first passes start the describe Job and wait for it, and that is work enough to see which
operator does it. The StreamApp names the session's broker: with an unreachable one every pass would end
only when its Kafka call times out (15 s), and so would each operator's stop.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kappaflow_operator.main import PEERING_LIFETIME_ENV, peering_priority
from tests.e2e.operator_env import ROOT, install_crd, wait_for
from tests.harness.kube_control_plane import free_port

pytestmark = [pytest.mark.kube, pytest.mark.timeout(120)]

PEERING = "kappaflow"
#: The peer lifetime of the hard-kill test: kopf renews a record every 1-5 s at this lifetime.
LIFETIME_S = 10
#: kopf's own log lines (--verbose) when it holds back or resumes handling StreamApps for peering.
PAUSED = "Pausing the watch-stream for streamapps.v1alpha1.kappaflow.io"
RESUMED = "Resuming the watch-stream for streamapps.v1alpha1.kappaflow.io"
#: kopf's own peering CRDs, as the chart ships them (tests/harness/kopf_peering.py vendors them).
PEERING_CRDS = ROOT / "charts" / "kappaflow" / "crds" / "kopf.dev_peerings.yaml"


class OperatorProcess:
    """`kopf run` in a subprocess with peering on, identified by `hostname` (its peer id too)."""

    def __init__(
        self, hostname: str, namespace: str, kubeconfig: Path, logs: Path, lifetime: int | None = None
    ) -> None:
        self.hostname = hostname
        self.metrics_port = free_port()
        self.log = logs / f"{hostname}.log"
        env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "HOSTNAME": hostname,
            "POD_ID": hostname,
            "KAPPAFLOW_OPERATOR_METRICS_PORT": str(self.metrics_port),
            "KAPPAFLOW_OPERATOR_RESYNC_SECONDS": "1",
        }
        if lifetime is not None:
            env[PEERING_LIFETIME_ENV] = str(lifetime)
        argv = [str(ROOT / ".venv" / "bin" / "kopf"), "run", "-m", "kappaflow_operator.main"]
        argv += [f"--namespace={namespace}", f"--peering={PEERING}", "--verbose"]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)

    def reconciles(self) -> int:
        """Passes this process ran (all outcomes), from its own /metrics."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as rsp:
            text = rsp.read().decode()
        found = re.findall(r"^kappaflow_operator_reconciles_total\{[^}]*\} ([0-9.e+]+)$", text, re.M)
        return int(sum(float(v) for v in found))

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM, as the kubelet stops a pod: kopf removes its peer record on the way out."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        """SIGKILL, as a node that dies or the OOM killer: no goodbye, the peer record stays behind."""
        self.proc.kill()
        self.proc.wait(timeout=20)


@pytest.fixture
def namespace(kube_cluster: Any) -> Iterator[str]:
    from kubernetes import dynamic

    install_crd(kube_cluster)
    namespace = kube_cluster.create_namespace("peer")
    with kube_cluster.api_client() as api:
        dyn = dynamic.DynamicClient(api)
        crds = dyn.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
        for crd in yaml.safe_load_all(PEERING_CRDS.read_text()):
            if crd:
                crds.server_side_apply(body=crd, field_manager="kappaflow-tests", force_conflicts=True)
        wait_for("the KopfPeering CRD served", lambda: _peering_api(dyn), timeout=30)
        body = {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": PEERING}}
        _peering_api(dyn).create(body=body, namespace=namespace)
    yield namespace


def _peering_api(dyn: Any) -> Any:
    dyn.resources.invalidate_cache()
    return dyn.resources.get(api_version="kopf.dev/v1", kind="KopfPeering")


def _peers(kube_cluster: Any, namespace: str) -> set[str]:
    from kubernetes import dynamic

    with kube_cluster.api_client() as api:
        peering = dynamic.DynamicClient(api).resources.get(api_version="kopf.dev/v1", kind="KopfPeering")
        status = peering.get(name=PEERING, namespace=namespace).to_dict().get("status") or {}
    return set(status)


def _reporters(kube_cluster: Any, namespace: str, reason: str) -> list[str]:
    from kubernetes import client

    with kube_cluster.api_client() as api:
        events = client.CoreV1Api(api).list_namespaced_event(
            namespace, field_selector=f"involvedObject.kind=StreamApp,reason={reason}"
        )
    return [e.reporting_instance for e in events.items]


def _create_app(api: Any, namespace: str, image: str, bootstrap: str) -> None:
    from kubernetes import client

    spec = {
        "image": image,
        "entryPoint": "examples.wordcount:build_topology",
        "applicationId": f"wc-{uuid.uuid4().hex[:6]}",
        "kafka": {"bootstrapServers": bootstrap},
    }
    body = {"apiVersion": "kappaflow.io/v1alpha1", "kind": "StreamApp", "metadata": {"name": "wc"}}
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        "kappaflow.io", "v1alpha1", namespace, "streamapps", {**body, "spec": spec}
    )


def test_only_the_leader_reconciles_and_the_follower_takes_over(
    kube_cluster: Any, namespace: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    from kubernetes import client

    names = sorted(("kappaflow-operator-a", "kappaflow-operator-b"), key=peering_priority, reverse=True)
    leader = OperatorProcess(names[0], namespace, kube_cluster.kubeconfig, tmp_path)
    follower: OperatorProcess | None = None
    try:
        wait_for("the leader's peer record", lambda: leader.hostname in _peers(kube_cluster, namespace))
        follower = OperatorProcess(names[1], namespace, kube_cluster.kubeconfig, tmp_path)
        wait_for("the follower's peer record", lambda: follower.hostname in _peers(kube_cluster, namespace))
        wait_for("the follower paused", lambda: PAUSED in follower.output())
        assert RESUMED in leader.output() and RESUMED not in follower.output()

        with kube_cluster.api_client() as api:
            custom = client.CustomObjectsApi(api)
            _create_app(api, namespace, "registry.example/wordcount:1.0.0", kafka_bootstrap)
            wait_for("three passes by the leader", lambda: leader.reconciles() >= 3)
            assert follower.reconciles() == 0, "the follower never reconciles while the leader lives"
            assert _reporters(kube_cluster, namespace, "DescribingTopology") == [leader.hostname]

            leader.stop()
            wait_for("the follower resumed", lambda: RESUMED in follower.output())
            assert leader.hostname not in _peers(kube_cluster, namespace), "a stopped leader leaves"
            custom.patch_namespaced_custom_object(
                "kappaflow.io", "v1alpha1", namespace, "streamapps", "wc",
                {"spec": {"image": "registry.example/wordcount:2.0.0"}},
            )  # fmt: skip
            wait_for("passes by the follower", lambda: follower.reconciles() >= 2)
            wait_for(
                "the new describe Job started by the follower",
                lambda: follower.hostname in _reporters(kube_cluster, namespace, "DescribingTopology"),
            )
            assert sorted(_reporters(kube_cluster, namespace, "DescribingTopology")) == sorted(names)
    finally:
        started = time.monotonic()
        for proc in (leader, follower):
            if proc is not None:
                proc.stop()
        assert time.monotonic() - started < 30


def test_a_hard_killed_leader_is_replaced_once_its_peer_record_expires(
    kube_cluster: Any, namespace: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    names = sorted(("kappaflow-operator-c", "kappaflow-operator-d"), key=peering_priority, reverse=True)
    leader = OperatorProcess(names[0], namespace, kube_cluster.kubeconfig, tmp_path, LIFETIME_S)
    follower: OperatorProcess | None = None
    try:
        wait_for("the leader's peer record", lambda: leader.hostname in _peers(kube_cluster, namespace))
        follower = OperatorProcess(names[1], namespace, kube_cluster.kubeconfig, tmp_path, LIFETIME_S)
        wait_for("the follower paused", lambda: PAUSED in follower.output())

        leader.kill()
        killed = time.monotonic()
        # The record was renewed at most 5 s ago (every 1-5 s at this lifetime): it is still valid.
        assert leader.hostname in _peers(kube_cluster, namespace), "a killed leader cannot say goodbye"
        assert RESUMED not in follower.output(), "the follower waits for the record to expire"
        wait_for("the follower resumed", lambda: RESUMED in follower.output(), timeout=LIFETIME_S + 20)
        waited = time.monotonic() - killed
        assert waited <= LIFETIME_S + 5, f"took over {waited:.1f}s after the kill (lifetime {LIFETIME_S}s)"
        wait_for(
            "the dead leader's record cleaned up",
            lambda: leader.hostname not in _peers(kube_cluster, namespace),
            timeout=10,
        )
        with kube_cluster.api_client() as api:
            _create_app(api, namespace, "registry.example/wordcount:1.0.0", kafka_bootstrap)
        wait_for("passes by the new leader", lambda: follower.reconciles() >= 1)
        wait_for(
            "the describe Job started by the new leader",
            lambda: _reporters(kube_cluster, namespace, "DescribingTopology") == [follower.hostname],
        )
    finally:
        for proc in (leader, follower):
            if proc is not None:
                proc.stop()
