"""`upgrade: reprocess` end to end: the operator, a real control plane with the SparkApplication CRD,
real `kappaflow run` pods, and a stand-in Spark operator running the job with local Spark.

A failing run leaves the old version running and Degraded with Spark's message; a successful one moves
the pods to the new application id, where they find Spark's state and continue with exact counts.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest

from tests.e2e.apps import INPUT_ENV, OUTPUT_ENV
from tests.e2e.operator_env import ENTRY, RuntimePods, install_crd, running_operator, wait_for
from tests.e2e.test_operator_e2e import CountReader, _produce
from tests.spark.spark_operator import GROUP as SPARK_GROUP
from tests.spark.spark_operator import PLURAL as SPARK_PLURAL
from tests.spark.spark_operator import VERSION as SPARK_VERSION
from tests.spark.spark_operator import SparkOperatorStandIn, install_spark_crd

pytestmark = [pytest.mark.spark, pytest.mark.kube, pytest.mark.kafka, pytest.mark.timeout(600)]

GROUP, VERSION, PLURAL = "kappaflow.io", "v1alpha1", "streamapps"


def test_reprocess_upgrade_fails_safely_then_rolls_onto_spark_state(
    kube_cluster: Any, kafka_bootstrap: str, kafka_topics: Any, tmp_path: Any
) -> None:
    from kubernetes import client

    from tests.harness.fake_kubelet import FakeKubelet, http_readiness

    install_crd(kube_cluster)
    install_spark_crd(kube_cluster)
    namespace = kube_cluster.create_namespace("rp")
    input_topic = kafka_topics("lines", partitions=2)
    output_topic = kafka_topics("counts", partitions=2)
    expected: Counter[str] = Counter()
    reader = CountReader(kafka_bootstrap, output_topic)
    original_id = f"wc-rp-{uuid.uuid4().hex[:8]}"
    broken = "registry.example/wordcount:broken"
    with kube_cluster.api_client() as api:
        pods = RuntimePods(api, namespace, tmp_path / "pods", input_topic, output_topic)
        kubelet = FakeKubelet(
            api, namespace, pods.launch, readiness=http_readiness(pods.port), max_grace_seconds=30
        )
        spark = SparkOperatorStandIn(
            api, namespace, tmp_path / "spark", {INPUT_ENV: input_topic, OUTPUT_ENV: output_topic}
        )
        # The broken image reads a topic that does not exist: `kappaflow reprocess` fails for real.
        spark.env_for_image[broken] = {INPUT_ENV: f"missing-{uuid.uuid4().hex[:6]}"}
        custom = client.CustomObjectsApi(api)
        core = client.CoreV1Api(api)
        apps = client.AppsV1Api(api)

        def status() -> dict[str, Any]:
            return (
                custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "wc").get("status")
                or {}
            )

        def reasons() -> set[str]:
            return {
                e.reason
                for e in core.list_namespaced_event(namespace, field_selector="involvedObject.name=wc").items
            }

        def patch_image(image: str) -> None:
            custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, "wc", {"spec": {"image": image}}
            )

        def sts_image() -> str:
            return apps.read_namespaced_stateful_set("wc", namespace).spec.template.spec.containers[0].image

        try:
            with kubelet, spark, running_operator(kube_cluster.kubeconfig, namespace):
                spec = {
                    "image": "registry.example/wordcount:1.0.0",
                    "entryPoint": ENTRY,
                    "applicationId": original_id,
                    "replicas": 1,
                    "kafka": {"bootstrapServers": kafka_bootstrap, "replicationFactor": 1},
                    "config": {"commit.interval.ms": "200"},
                    "upgrade": {"mode": "reprocess"},
                }
                body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "StreamApp", "metadata": {"name": "wc"}}
                custom.create_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, {**body, "spec": spec}
                )
                wait_for("Running", lambda: status().get("phase") == "Running", timeout=180)
                _produce(kafka_bootstrap, input_topic, 0, expected)
                wait_for("first counts", lambda: reader.poll() == dict(expected), timeout=120, interval=0.1)

                # 1. A failing reprocess: Degraded with Spark's message, the old version keeps running.
                patch_image(broken)
                wait_for(
                    "ReprocessFailed",
                    lambda: (status().get("reprocessing") or {}).get("state") == "Failed",
                    timeout=240,
                )
                degraded = next(c for c in status()["conditions"] if c["type"] == "Degraded")
                assert degraded["status"] == "True" and degraded["reason"] == "ReprocessFailed"
                assert "source topics do not exist" in degraded["message"]
                assert sts_image() == "registry.example/wordcount:1.0.0"
                _produce(kafka_bootstrap, input_topic, 1, expected)
                wait_for("counts from the old version", lambda: reader.poll() == dict(expected), timeout=120)

                # 2. A good image: Spark rebuilds state into a new id, the pods roll onto it.
                patch_image("registry.example/wordcount:2")

                def running_on_new_id() -> bool:
                    st = status()
                    return (
                        st.get("phase") == "Running"
                        and st.get("lastStableSpec", {}).get("image") == "registry.example/wordcount:2"
                        and st.get("applicationId") not in (None, original_id)
                    )

                wait_for("Running on the reprocessed application id", running_on_new_id, timeout=300)
                run = status()["reprocessing"]
                assert run["state"] == "Completed" and run["image"] == "registry.example/wordcount:2"
                assert status()["applicationId"] == run["applicationId"]
                assert run["sparkApplication"] in spark.finished
                spark_app = custom.get_namespaced_custom_object(
                    SPARK_GROUP, SPARK_VERSION, namespace, SPARK_PLURAL, run["sparkApplication"]
                )
                assert spark_app["spec"]["image"] == "registry.example/wordcount:2"
                assert {"ReprocessStarted", "ReprocessCompleted", "RollingOntoReprocessedState"} <= reasons()
                assert sts_image() == "registry.example/wordcount:2"
                # cleanupPolicy Delete (the default): the replaced id's internal topics and the failed
                # run's SparkApplication go once the pods run ready on the new id.
                wait_for("cleanup", lambda: status()["reprocessing"].get("cleanedUp"), timeout=60)
                assert "ReplacedIdCleanedUp" in reasons()
                left = custom.list_namespaced_custom_object(
                    SPARK_GROUP, SPARK_VERSION, namespace, SPARK_PLURAL
                )
                assert [a["metadata"]["name"] for a in left["items"]] == [run["sparkApplication"]]
                from confluent_kafka.admin import AdminClient

                names = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
                new_id = run["applicationId"]  # starts with the original id: `<id>-r<hash>`
                assert not [
                    t
                    for t in names
                    if t.startswith(f"{original_id}-")
                    and not t.startswith(f"{new_id}-")
                    and t.endswith("-changelog")
                ]
                assert f"{new_id}-counts-changelog" in names
                assert spark.reported and all(r["driverInfo"]["podName"] for r in spark.reported)
                # The new id's pods start from Spark's changelogs and committed offsets: new input is
                # counted on top of the rebuilt totals (a replay from offset 0 would double them).
                _produce(kafka_bootstrap, input_topic, 2, expected)
                wait_for(
                    "exact counts after the reprocess", lambda: reader.poll() == dict(expected), timeout=120
                )
        finally:
            reader.close()
        assert not kubelet.errors, kubelet.errors
        assert not spark.errors, spark.errors
