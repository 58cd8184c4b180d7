"""The update handler and the periodic timer, interleaved deterministically on the real control plane.

kopf hands each handler the body it saw when the event or tick was queued; the two run one after the
other under the per-app lock. These tests drive the passes by hand, in the order that used to lose
work: the handler's pass completes something, then the timer's pass runs with the copy it was given
*before* that. A pass must read the StreamApp afresh and take the running application id from the
StatefulSet, so the older copy changes nothing. No kopf, no kubelet: the interleaving is exact.

`KAPPAFLOW_RACE_REPEAT=20` runs each interleaving 20 times in one session (the issue's bar).
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.e2e.apps import INPUT_ENV, OUTPUT_ENV
from tests.e2e.operator_env import ENTRY, KAPPAFLOW, ROOT, install_crd

pytestmark = [pytest.mark.kube, pytest.mark.kafka, pytest.mark.timeout(180)]

GROUP, VERSION, PLURAL = "kappaflow.io", "v1alpha1", "streamapps"
REPEAT = int(os.environ.get("KAPPAFLOW_RACE_REPEAT", "1"))


@pytest.fixture(scope="module")
def crds(kube_cluster: Any) -> Any:
    from tests.spark.spark_operator import install_spark_crd

    install_crd(kube_cluster)
    install_spark_crd(kube_cluster)
    return kube_cluster


@pytest.fixture(scope="module")
def topics(kafka_bootstrap: str) -> Iterator[tuple[str, str]]:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    names = (f"race-in-{uuid.uuid4().hex[:6]}", f"race-out-{uuid.uuid4().hex[:6]}")
    for future in admin.create_topics([NewTopic(n, 4, 1) for n in names]).values():
        future.result(timeout=30)
    yield names
    for future in admin.delete_topics(list(names)).values():
        future.result(timeout=30)


@pytest.fixture(scope="module")
def topology_json(topics: tuple[str, str]) -> str:
    """`kappaflow describe --json` of the test app, as the describe Job would have printed it."""
    env = {**os.environ, INPUT_ENV: topics[0], OUTPUT_ENV: topics[1]}
    out = subprocess.run(
        [KAPPAFLOW, "describe", ENTRY, "--json"], cwd=ROOT, env=env, capture_output=True, check=True
    )
    return out.stdout.decode()


@dataclass
class Harness:
    ctx: Any
    custom: Any
    namespace: str
    bootstrap: str
    topology: str

    def create(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "StreamApp", "metadata": {"name": name}}
        created: dict[str, Any] = self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, {**body, "spec": spec}
        )
        return created

    def get(self, name: str) -> dict[str, Any]:
        got: dict[str, Any] = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name
        )
        return got

    def patch_spec(self, name: str, spec: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name, {"spec": spec}
        )

    def described(self, body: dict[str, Any]) -> None:
        """Record the topology for the body's image, as a finished describe Job leaves it."""
        from kappaflow_operator import desired
        from kappaflow_operator.desired.common import AppRef, object_meta
        from kappaflow_operator.models import StreamAppSpec
        from kappaflow_operator.reconcile import DESCRIBE_KEY, TOPOLOGY_FILE, topology_configmap_name

        meta = body["metadata"]
        ref = AppRef(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"])
        cm_meta = object_meta(ref, topology_configmap_name(ref.name))
        cm_meta["annotations"] = {
            DESCRIBE_KEY: desired.describe_key(StreamAppSpec.model_validate(body["spec"]))
        }
        self.ctx.kube.apply(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": cm_meta,
                "data": {TOPOLOGY_FILE: self.topology},
            }
        )

    def running_id(self, name: str) -> str:
        """The application.id the pods' ConfigMap gives them (what they really run under)."""
        cm = self.ctx.kube.get("v1", "ConfigMap", self.namespace, f"{name}-config")
        props = next(iter(cm["data"].values()))
        return next(
            line.split("=", 1)[1] for line in props.splitlines() if line.startswith("application.id=")
        )

    def replicas(self, name: str) -> int:
        return int(self.ctx.kube.get("apps/v1", "StatefulSet", self.namespace, name)["spec"]["replicas"])


@pytest.fixture
def harness(crds: Any, kafka_bootstrap: str, topology_json: str) -> Iterator[Harness]:
    from kubernetes import client

    from kappaflow_operator import reconcile
    from kappaflow_operator.context import Context
    from kappaflow_operator.k8s import Kube

    namespace = crds.create_namespace("race")
    with crds.api_client() as api:
        kube = Kube(api)
        ctx = Context(kube, reconcile.default_kafka_factory(kube))
        yield Harness(ctx, client.CustomObjectsApi(api), namespace, kafka_bootstrap, topology_json)
        ctx.kafka_factory.close()


def _spec(h: Harness, app_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "image": "registry.example/wordcount:1.0.0",
        "entryPoint": ENTRY,
        "applicationId": app_id,
        "replicas": 1,
        "kafka": {"bootstrapServers": h.bootstrap, "replicationFactor": 1},
        **extra,
    }


def _now(offset_s: int = 0) -> datetime:
    return datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=offset_s)


@pytest.mark.parametrize("round_", range(REPEAT))
def test_timer_with_an_older_copy_keeps_a_completed_reprocess(harness: Harness, round_: int) -> None:
    import kopf

    from kappaflow_operator import reconcile
    from kappaflow_operator.desired.spark import SPARK_API_VERSION

    h, name, old_id = harness, f"rp{round_}", f"rp-{uuid.uuid4().hex[:8]}"
    h.described(h.create(name, _spec(h, old_id, upgrade={"mode": "reprocess"})))
    reconcile.on_change(h.ctx, h.get(name), now=_now())
    assert h.running_id(name) == old_id

    h.patch_spec(name, {"image": "registry.example/wordcount:2.0.0"})
    h.described(h.get(name))
    timer_copy = h.get(name)  # the timer's tick is queued now, with this body
    with pytest.raises(kopf.TemporaryError, match="reprocessing"):
        reconcile.on_change(h.ctx, h.get(name), now=_now(1))
    run = h.get(name)["status"]["reprocessing"]
    spark = run["sparkApplication"]
    h.ctx.kube._call(  # the Spark operator reports completion
        "PATCH",
        f"/apis/{SPARK_API_VERSION}/namespaces/{h.namespace}/sparkapplications/{spark}/status",
        {"status": {"applicationState": {"state": "COMPLETED"}, "driverInfo": {}}},
        content_type="application/merge-patch+json",
    )
    reconcile.on_change(h.ctx, h.get(name), now=_now(2))  # the handler rolls onto the new id
    new_id = run["applicationId"]
    assert new_id != old_id and h.running_id(name) == new_id

    reconcile.resync(h.ctx, timer_copy, now=_now(3))  # the timer, with its older copy

    assert h.running_id(name) == new_id, "the timer rolled the pods back to the old application id"
    after = h.get(name)["status"]
    assert after["reprocessing"]["state"] == "Completed"
    sts = h.ctx.kube.get("apps/v1", "StatefulSet", h.namespace, name)
    assert sts["metadata"]["annotations"]["kappaflow.io/application-id"] == new_id


@pytest.mark.parametrize("round_", range(REPEAT))
def test_handler_with_an_older_copy_keeps_the_autoscalers_decision(
    harness: Harness, topics: tuple[str, str], round_: int
) -> None:
    from confluent_kafka import Producer

    from kappaflow_operator import reconcile

    h, name = harness, f"as{round_}"
    auto = {"enabled": True, "minReplicas": 1, "maxReplicas": 3, "lagPerReplica": 1, "intervalSeconds": 5}
    auto |= {"scaleUpCooldownSeconds": 0, "scaleDownCooldownSeconds": 0}
    h.described(h.create(name, _spec(h, f"as-{uuid.uuid4().hex[:8]}", autoscaling=auto)))
    producer = Producer({"bootstrap.servers": h.bootstrap})
    for i in range(8):
        producer.produce(topics[0], key=str(i), value="w")
    assert producer.flush(30) == 0
    reconcile.on_change(h.ctx, h.get(name), now=_now())
    handler_copy = h.get(name)  # an update event queued before the timer's tick

    reconcile.resync(h.ctx, h.get(name), now=_now(1))  # the autoscaler decides: 3 replicas
    decided = h.get(name)["status"]["autoscaler"]
    assert decided["desiredReplicas"] == 3 and h.replicas(name) == 3
    assert h.get(name)["status"]["consumerLag"] >= 8

    reconcile.on_change(h.ctx, handler_copy, now=_now(2))  # the handler, with its older copy

    assert h.replicas(name) == 3, "the handler undid the autoscaler's scale-up"
    assert h.get(name)["status"]["autoscaler"] == decided
