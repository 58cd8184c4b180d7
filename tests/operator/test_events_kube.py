"""Events are a record of the operator's steps, never a reason for a step to fail: in a namespace being
deleted the API server refuses every new object, and a cleanup whose event raised could never remove its
finalizer, leaving the namespace Terminating for good (found on the real node by `kubectl delete -k
examples/k8s`)."""

from __future__ import annotations

import time
from typing import Any

import pytest

pytestmark = [pytest.mark.kube]


def test_an_event_in_a_terminating_namespace_is_dropped_not_raised(kube_cluster: Any) -> None:
    from kubernetes import client

    from kappaflow_operator.k8s import Kube

    namespace = kube_cluster.create_namespace("ev")
    with kube_cluster.api_client() as api:
        core = client.CoreV1Api(api)
        held = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="held", finalizers=["kappaflow.io/test"]))
        cm = core.create_namespaced_config_map(namespace, held)
        core.delete_namespace(namespace)
        deadline = time.monotonic() + 30
        while core.read_namespace(namespace).status.phase != "Terminating":
            assert time.monotonic() < deadline, "the namespace never started terminating"
            time.sleep(0.2)
        involved = {
            "kind": "ConfigMap",
            "apiVersion": "v1",
            "metadata": {"name": "held", "namespace": namespace, "uid": cm.metadata.uid},
        }
        Kube(api).event(
            involved, "Normal", "TopicsRetained", "topicCleanupPolicy Retain: internal topics kept"
        )
        core.patch_namespaced_config_map("held", namespace, {"metadata": {"finalizers": None}})
