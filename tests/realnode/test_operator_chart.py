"""The operator as users install it: `helm install charts/kappaflow`, two replicas as pods with the chart's
ServiceAccount token (in-cluster config through the `kubernetes` Service), one leader by kopf peering,
the chart's RBAC (nothing the operator does is denied; nothing beyond it is granted), its metrics served
on the pod IP, and a new leader when the leader's pod is deleted."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest

from tests.harness.realnode_fixtures import RealNode
from tests.realnode.cluster import (
    OPERATOR_NAMESPACE,
    OPERATOR_SELECTOR,
    one_operator_leader,
    operator_leaders,
    operator_logs,
    pod_names,
    wait_for,
)

pytestmark = [pytest.mark.realnode, pytest.mark.timeout(300)]


def _service_account(node: RealNode) -> str:
    pod = pod_names(node, OPERATOR_NAMESPACE, OPERATOR_SELECTOR)[0]
    name = node.get("pod", pod, OPERATOR_NAMESPACE)["spec"]["serviceAccountName"]
    return f"system:serviceaccount:{OPERATOR_NAMESPACE}:{name}"


def test_two_replicas_elect_one_leader_with_in_cluster_config(
    real_node: RealNode, operator_release: str
) -> None:
    pods = pod_names(real_node, OPERATOR_NAMESPACE, OPERATOR_SELECTOR)
    assert len(pods) == 2, pods
    wait_for("one replica paused in favour of the other", lambda: len(operator_leaders(real_node)) == 1, 120)
    for pod in pods:
        spec = real_node.get("pod", pod, OPERATOR_NAMESPACE)["spec"]
        assert not spec.get("hostNetwork"), "the operator must reach the API like any pod"
        env = real_node.kubectl("-n", OPERATOR_NAMESPACE, "exec", pod, "--", "env")
        assert "KUBERNETES_SERVICE_HOST=10.96.0.1" in env  # the in-cluster config's own address


def test_rbac_grants_what_the_operator_needs_and_nothing_more(
    real_node: RealNode, operator_release: str
) -> None:
    account = _service_account(real_node)

    def can(verb: str, resource: str, namespace: str = "default") -> bool:
        out = real_node.kubectl(
            "auth", "can-i", verb, resource, f"--as={account}", "-n", namespace, check=False
        )
        return out.strip() == "yes"

    for verb, resource in [
        ("patch", "streamapps.kappaflow.io/status"),
        ("create", "statefulsets.apps"),
        ("create", "configmaps"),
        ("create", "jobs.batch"),
        ("create", "events"),
        ("list", "pods"),
    ]:
        assert can(verb, resource), f"the chart does not grant {verb} {resource}"
    for verb, resource in [("create", "clusterrolebindings"), ("delete", "nodes"), ("create", "pods/exec")]:
        assert not can(verb, resource), f"the chart grants {verb} {resource}"
    for pod in pod_names(real_node, OPERATOR_NAMESPACE, OPERATOR_SELECTOR):
        logs = operator_logs(real_node, pod)
        denied = re.findall(r'forbidden: User "system:serviceaccount:[^"]+" cannot [^"]+', logs)
        assert not denied, f"{pod} was denied by RBAC: {denied[:5]}"


def test_metrics_are_served_on_the_pod_ip(real_node: RealNode, operator_release: str) -> None:
    for pod in pod_names(real_node, OPERATOR_NAMESPACE, OPERATOR_SELECTOR):
        ip = real_node.get("pod", pod, OPERATOR_NAMESPACE)["status"]["podIP"]
        body = urllib.request.urlopen(f"http://{ip}:9090/metrics", timeout=5).read().decode()
        assert "kappaflow_operator" in body, body[:500]


def test_deleting_the_leader_pod_hands_over(real_node: RealNode, operator_release: str) -> None:
    leader = wait_for("one leader", lambda: one_operator_leader(real_node), 120)
    real_node.kubectl("-n", OPERATOR_NAMESPACE, "delete", "pod", leader, "--wait=true", "--timeout=60s")
    wait_for(
        "two replicas again",
        lambda: (
            len(
                json.loads(
                    real_node.kubectl(
                        "-n",
                        OPERATOR_NAMESPACE,
                        "get",
                        "pods",
                        "-l",
                        OPERATOR_SELECTOR,
                        "--field-selector=status.phase=Running",
                        "-o",
                        "json",
                    )
                )["items"]
            )
            == 2
        ),
        120,
    )
    survivor = wait_for("a new leader", lambda: one_operator_leader(real_node), 120)
    assert survivor != leader
