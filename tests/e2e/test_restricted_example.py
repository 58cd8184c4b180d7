"""The shipped example StreamApp (examples/k8s/wordcount-streamapp.yaml, with its resources, exactly-once,
standby replica and interactive queries) end to end in a namespace that enforces PodSecurity
`restricted`, on the real API server: its StatefulSet pods and describe Job pods are admitted as the
operator builds them, run as real `kappaflow run` processes, and count exactly.

Only what ties the example to a real cluster is swapped: the broker address, a unique application id and
the env-driven twin of `examples.wordcount:build_topology` (`tests.e2e.apps:wordcount`, same topology,
topic names from the test, so tests sharing one broker stay independent).
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.operator_env import ENTRY, RuntimePods, install_crd, running_operator, wait_for
from tests.e2e.test_operator_e2e import CountReader, _produce

pytestmark = [pytest.mark.kube, pytest.mark.kafka, pytest.mark.timeout(420)]

GROUP, VERSION, PLURAL = "kappaflow.io", "v1alpha1", "streamapps"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "k8s" / "wordcount-streamapp.yaml"
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


def test_example_streamapp_runs_in_a_restricted_namespace(
    kube_cluster: Any, kafka_bootstrap: str, kafka_topics: Any, tmp_path: Path
) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from tests.harness.fake_kubelet import FakeKubelet, http_readiness

    install_crd(kube_cluster)
    namespace = kube_cluster.create_namespace("restricted")
    input_topic = kafka_topics("lines", partitions=2)
    output_topic = kafka_topics("counts", partitions=2)
    example = yaml.safe_load(EXAMPLE.read_text())
    spec = example["spec"]
    assert spec["resources"]["requests"] and spec["processingGuarantee"] == "exactly_once_v2"
    spec.update(entryPoint=ENTRY, applicationId=f"wc-rs-{uuid.uuid4().hex[:8]}")
    spec["kafka"] = {"bootstrapServers": kafka_bootstrap, "replicationFactor": 1}
    expected: Counter[str] = Counter()
    reader = CountReader(kafka_bootstrap, output_topic)
    with kube_cluster.api_client() as api:
        core = client.CoreV1Api(api)
        core.patch_namespace(namespace, {"metadata": {"labels": RESTRICTED}})
        # The admission plugin is on (kube-apiserver enables PodSecurity by default): a plain pod is refused.
        plain = client.V1Pod(
            metadata=client.V1ObjectMeta(name="plain"),
            spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")]),
        )
        with pytest.raises(ApiException, match="violates PodSecurity") as refused:
            core.create_namespaced_pod(namespace, plain)
        assert refused.value.status == 403
        pods = RuntimePods(api, namespace, tmp_path, input_topic, output_topic)
        kubelet = FakeKubelet(
            api, namespace, pods.launch, readiness=http_readiness(pods.port), max_grace_seconds=30
        )
        custom = client.CustomObjectsApi(api)
        name = example["metadata"]["name"]

        def status() -> dict[str, Any]:
            return (
                custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name).get("status")
                or {}
            )

        try:
            with kubelet, running_operator(kube_cluster.kubeconfig, namespace):
                body = {**example, "metadata": {"name": name}, "spec": spec}
                custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
                replicas = spec["replicas"]
                wait_for(
                    f"Running with {replicas} ready pods",
                    lambda: status().get("phase") == "Running" and status().get("readyReplicas") == replicas,
                    timeout=240,
                )
                _produce(kafka_bootstrap, input_topic, 0, expected)
                wait_for("exact counts", lambda: reader.poll() == dict(expected), timeout=120, interval=0.1)
                app_pods = core.list_namespaced_pod(
                    namespace, label_selector=f"kappaflow.io/streamapp={name}"
                ).items
                qos = {
                    p.status.qos_class
                    for p in app_pods
                    if p.metadata.name.startswith(f"{name}-") and p.status
                }
                assert "Burstable" in qos  # the example's requests and limits reached the pods
                warnings = [
                    e.message
                    for e in core.list_namespaced_event(namespace).items
                    if e.reason == "FailedCreate" and "PodSecurity" in (e.message or "")
                ]
                assert not warnings, warnings
        finally:
            reader.close()
        assert not kubelet.errors, kubelet.errors
