"""The operator end to end on a real control plane and a real broker: kopf runs in-process, a fake kubelet
runs the describe Job for real (`kappaflow describe --json`) and idles the StatefulSet's pods.

Each test gets its own namespace, operator, kubelet and input topic, so tests never see each other.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.e2e.operator_env import ENTRY, install_crd, make_launcher, running_operator, wait_for

pytestmark = [pytest.mark.kube, pytest.mark.kafka, pytest.mark.timeout(240)]

GROUP, VERSION, PLURAL = "kappaflow.io", "v1alpha1", "streamapps"
PARTITIONS = 4


@pytest.fixture(scope="module")
def crd_installed(kube_cluster):
    install_crd(kube_cluster)
    return kube_cluster


@dataclass
class Env:
    api: Any
    namespace: str
    bootstrap: str
    input_topic: str
    output_topic: str
    admin: Any

    @property
    def custom(self):
        from kubernetes import client

        return client.CustomObjectsApi(self.api)

    @property
    def core(self):
        from kubernetes import client

        return client.CoreV1Api(self.api)

    @property
    def apps(self):
        from kubernetes import client

        return client.AppsV1Api(self.api)

    def spec(self, app_id: str, **overrides: Any) -> dict[str, Any]:
        spec = {
            "image": "registry.example/wordcount:1.0.0",
            "entryPoint": ENTRY,
            "applicationId": app_id,
            "replicas": 1,
            "kafka": {"bootstrapServers": self.bootstrap, "replicationFactor": 1},
        }
        spec.update(copy.deepcopy(overrides))
        return spec

    def create(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "StreamApp",
            "metadata": {"name": name},
            "spec": spec,
        }
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, body)

    def get(self, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)

    def patch_spec(self, name: str, spec: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name, {"spec": spec}
        )

    def status(self, name: str) -> dict[str, Any]:
        return self.get(name).get("status") or {}

    def condition(self, name: str, type_: str) -> dict[str, Any]:
        return next((c for c in self.status(name).get("conditions", []) if c["type"] == type_), {})

    def event_reasons(self, name: str) -> set[str]:
        events = self.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={name},involvedObject.kind=StreamApp"
        )
        return {e.reason for e in events.items}

    def topics(self) -> dict[str, int]:
        md = self.admin.list_topics(timeout=10)
        return {n: len(t.partitions) for n, t in md.topics.items() if t.error is None}

    def wait_running(self, name: str, replicas: int, timeout: float = 90) -> dict[str, Any]:
        def running() -> dict[str, Any] | None:
            st = self.status(name)
            ok = st.get("phase") == "Running" and st.get("readyReplicas") == replicas
            return st if ok else None

        return wait_for(f"{name} Running with {replicas} ready", running, timeout)


@pytest.fixture
def env(crd_installed, kafka_bootstrap, kafka_topics) -> Iterator[Env]:
    yield from operator_env(crd_installed, kafka_bootstrap, kafka_topics)


def operator_env(crd_installed, kafka_bootstrap, kafka_topics) -> Iterator[Env]:
    """The operator (kopf in-process) and a fake kubelet on a fresh namespace, with two topics."""
    from confluent_kafka.admin import AdminClient

    from tests.harness.fake_kubelet import FakeKubelet

    kube_cluster = crd_installed
    namespace = kube_cluster.create_namespace("op")
    input_topic = kafka_topics("words", partitions=PARTITIONS)
    output_topic = kafka_topics("counts", partitions=PARTITIONS)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    with kube_cluster.api_client() as api:
        launcher = make_launcher(api, input_topic, output_topic)
        kubelet = FakeKubelet(api, namespace, launcher, max_grace_seconds=2)
        with kubelet, running_operator(kube_cluster.kubeconfig, namespace):
            yield Env(api, namespace, kafka_bootstrap, input_topic, output_topic, admin)
        assert not kubelet.errors, kubelet.errors


def _app_id() -> str:
    return f"wc-{uuid.uuid4().hex[:8]}"


def _owned_by(obj: Any, uid: str) -> bool:
    refs = obj.metadata.owner_references or []
    return any(r.uid == uid and r.controller for r in refs)


def test_create_yields_objects_topics_status_and_events(env: Env) -> None:
    app_id = _app_id()
    created = env.create("wc", env.spec(app_id, replicas=2, interactiveQueries={"enabled": True}))
    uid = created["metadata"]["uid"]
    status = env.wait_running("wc", 2)

    assert _owned_by(env.core.read_namespaced_config_map("wc-config", env.namespace), uid)
    headless = env.core.read_namespaced_service("wc-headless", env.namespace)
    assert headless.spec.cluster_ip == "None" and _owned_by(headless, uid)
    assert _owned_by(env.core.read_namespaced_service("wc-query", env.namespace), uid)
    from kubernetes import client

    pdb = client.PolicyV1Api(env.api).read_namespaced_pod_disruption_budget("wc", env.namespace)
    assert _owned_by(pdb, uid)
    sts = env.apps.read_namespaced_stateful_set("wc", env.namespace)
    assert _owned_by(sts, uid) and sts.spec.replicas == 2
    assert sts.spec.volume_claim_templates, "state volume claim template"

    changelog, repartition = f"{app_id}-counts-changelog", f"{app_id}-counts-repartition"
    topics = env.topics()
    assert topics[changelog] == PARTITIONS and topics[repartition] == PARTITIONS
    from confluent_kafka.admin import ConfigResource

    configs = env.admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, changelog)])
    entries = next(iter(configs.values())).result(timeout=30)
    assert entries["cleanup.policy"].value == "compact"

    assert {t["name"] for t in status["internalTopics"]} == {changelog, repartition}
    assert all(t["state"] in ("Created", "Ready") for t in status["internalTopics"])
    assert status["topology"]["maxParallelism"] == PARTITIONS
    assert status["topology"]["sourceTopics"] == [env.input_topic]
    assert env.condition("wc", "Ready")["status"] == "True"
    assert env.condition("wc", "Progressing")["status"] == "False"
    assert env.condition("wc", "Degraded")["status"] == "False"
    stable = wait_for("the spec recorded as stable", lambda: env.status("wc").get("lastStableSpec"))
    assert stable["applicationId"] == app_id and stable["spec"]["applicationId"] == app_id
    assert {"DescribingTopology", "TopologyDescribed", "TopicsCreated", "Created"} <= env.event_reasons("wc")


def test_scale_subresource_caps_at_partition_count(env: Env) -> None:
    env.create("wc", env.spec(_app_id(), replicas=1))
    env.wait_running("wc", 1)
    env.custom.patch_namespaced_custom_object_scale(
        GROUP, VERSION, env.namespace, PLURAL, "wc", {"spec": {"replicas": 6}}
    )
    wait_for(
        "StatefulSet capped at the partition count",
        lambda: env.apps.read_namespaced_stateful_set("wc", env.namespace).spec.replicas == PARTITIONS,
    )
    capped = wait_for("ReplicasCapped", lambda: env.condition("wc", "ReplicasCapped").get("status") == "True")
    assert capped
    cond = env.condition("wc", "ReplicasCapped")
    assert cond["reason"] == "ExceedsPartitionCount" and f"{PARTITIONS} partitions" in cond["message"]
    env.wait_running("wc", PARTITIONS)
    assert "ReplicasCapped" in env.event_reasons("wc")

    env.custom.patch_namespaced_custom_object_scale(
        GROUP, VERSION, env.namespace, PLURAL, "wc", {"spec": {"replicas": 2}}
    )
    env.wait_running("wc", 2)
    assert env.apps.read_namespaced_stateful_set("wc", env.namespace).spec.replicas == 2
    assert env.condition("wc", "ReplicasCapped")["status"] == "False"
    assert "Scaled" in env.event_reasons("wc")


def test_image_change_rolls_and_keeps_volumes(env: Env) -> None:
    env.create("wc", env.spec(_app_id(), replicas=2))
    env.wait_running("wc", 2)
    before = env.apps.read_namespaced_stateful_set("wc", env.namespace)
    claims_before = {
        p.metadata.name: p.metadata.uid
        for p in env.core.list_namespaced_persistent_volume_claim(env.namespace).items
    }
    assert len(claims_before) == 2

    env.patch_spec("wc", {"image": "registry.example/wordcount:2.0.0"})

    def rolled() -> bool:
        sts = env.apps.read_namespaced_stateful_set("wc", env.namespace)
        return sts.spec.template.spec.containers[0].image == "registry.example/wordcount:2.0.0"

    wait_for("StatefulSet template on the new image", rolled)

    def pods_on_new_image() -> bool:
        pods = env.core.list_namespaced_pod(env.namespace, label_selector="kappaflow.io/streamapp=wc").items
        images = [p.spec.containers[0].image for p in pods if "job-name" not in (p.metadata.labels or {})]
        return len(images) == 2 and all(i.endswith(":2.0.0") for i in images)

    wait_for("both pods replaced one at a time", pods_on_new_image, timeout=120)
    env.wait_running("wc", 2)
    after = env.apps.read_namespaced_stateful_set("wc", env.namespace)
    assert after.spec.volume_claim_templates[0].spec == before.spec.volume_claim_templates[0].spec
    assert after.spec.update_strategy.type == "RollingUpdate"
    claims_after = {
        p.metadata.name: p.metadata.uid
        for p in env.core.list_namespaced_persistent_volume_claim(env.namespace).items
    }
    assert claims_after == claims_before, "state volumes survive the roll"
    assert env.status("wc")["topology"]["describedImage"] == "registry.example/wordcount:2.0.0"
    assert "RollingUpdate" in env.event_reasons("wc")


def test_invalid_spec_is_degraded_with_reason(env: Env) -> None:
    # Passes the CRD's schema (each field is valid alone) but not the model's cross-field check.
    env.create("bad", env.spec(_app_id(), interactiveQueries={"enabled": True, "port": 9464}))
    cond = wait_for(
        "Degraded",
        lambda: env.condition("bad", "Degraded").get("status") == "True" and env.condition("bad", "Degraded"),
    )
    assert cond["reason"] == "InvalidSpec"
    assert "9464" in cond["message"]
    assert env.status("bad")["phase"] == "Degraded"
    assert env.condition("bad", "Ready")["status"] == "False"
    assert "InvalidSpec" in env.event_reasons("bad")
    from kubernetes.client.exceptions import ApiException

    with pytest.raises(ApiException) as missing:
        env.apps.read_namespaced_stateful_set("bad", env.namespace)
    assert missing.value.status == 404


@pytest.mark.parametrize("policy", ["Delete", "Retain"])
def test_deletion_applies_topic_cleanup_policy(env: Env, policy: str) -> None:
    app_id = _app_id()
    env.create("wc", env.spec(app_id, topicCleanupPolicy=policy))
    env.wait_running("wc", 1)
    names = {f"{app_id}-counts-changelog", f"{app_id}-counts-repartition"}
    assert names <= set(env.topics())
    assert "kappaflow.io/topic-cleanup" in env.get("wc")["metadata"]["finalizers"]

    env.custom.delete_namespaced_custom_object(GROUP, VERSION, env.namespace, PLURAL, "wc")

    def gone() -> bool:
        try:
            env.get("wc")
        except Exception as err:
            return getattr(err, "status", None) == 404
        return False

    wait_for("StreamApp deleted (finalizer released)", gone)
    if policy == "Delete":
        wait_for("internal topics deleted", lambda: not names & set(env.topics()))
    else:
        assert names <= set(env.topics())
        for future in env.admin.delete_topics(sorted(names)).values():  # tidy the shared broker
            future.result(timeout=30)


def test_autoscaler_scales_on_lag(env: Env) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": env.bootstrap})
    for i in range(35):
        producer.produce(env.input_topic, key=str(i), value=f"word{i} other")
    assert producer.flush(30) == 0
    auto = {
        "enabled": True,
        "minReplicas": 1,
        "maxReplicas": 3,
        "lagPerReplica": 10,
        "scaleUpCooldownSeconds": 0,
        "scaleDownCooldownSeconds": 0,
        "intervalSeconds": 5,
    }
    env.create("wc", env.spec(_app_id(), replicas=1, autoscaling=auto))

    def decided() -> dict[str, Any] | None:
        decision = (env.status("wc").get("autoscaler") or {}).get("lastDecision")
        return decision if decision and decision["toReplicas"] == 3 else None

    decision = wait_for("an autoscaler decision to scale up", decided, timeout=120)
    assert decision["fromReplicas"] == 1 and decision["lag"] == 35
    assert "35" in decision["reason"]
    assert env.status("wc")["consumerLag"] == 35
    wait_for(
        "StatefulSet scaled by the autoscaler",
        lambda: env.apps.read_namespaced_stateful_set("wc", env.namespace).spec.replicas == 3,
    )
    env.wait_running("wc", 3)
    assert "Autoscaled" in env.event_reasons("wc")


def test_internal_topic_with_wrong_partition_count_is_degraded(env: Env) -> None:
    from confluent_kafka.admin import NewTopic

    app_id = _app_id()
    changelog = f"{app_id}-counts-changelog"
    futures = env.admin.create_topics([NewTopic(changelog, num_partitions=2, replication_factor=1)])
    futures[changelog].result(timeout=30)
    try:
        env.create("wc", env.spec(app_id))
        cond = wait_for(
            "Degraded",
            lambda: (
                env.condition("wc", "Degraded").get("status") == "True" and env.condition("wc", "Degraded")
            ),
        )
        assert cond["reason"] == "TopicPartitionMismatch"
        assert "2 partitions" in cond["message"] and f"needs {PARTITIONS}" in cond["message"]
        states = {t["name"]: t for t in env.status("wc")["internalTopics"]}
        assert states[changelog]["state"] == "Mismatch" and states[changelog]["actualPartitions"] == 2
        assert env.topics()[changelog] == 2, "never resized"
        from kubernetes.client.exceptions import ApiException

        with pytest.raises(ApiException):
            env.apps.read_namespaced_stateful_set("wc", env.namespace)
    finally:
        names = [changelog, f"{app_id}-counts-repartition"]
        for future in env.admin.delete_topics([n for n in names if n in env.topics()]).values():
            future.result(timeout=30)


def test_state_volume_change_recreates_statefulset_keeping_pods_and_claims(env: Env) -> None:
    env.create("wc", env.spec(_app_id(), replicas=2))
    env.wait_running("wc", 2)
    before = env.apps.read_namespaced_stateful_set("wc", env.namespace)
    pods_before = {p.metadata.name: p.metadata.uid for p in env.core.list_namespaced_pod(env.namespace).items}
    claims_before = {
        c.metadata.name: c.metadata.uid
        for c in env.core.list_namespaced_persistent_volume_claim(env.namespace).items
    }

    env.patch_spec("wc", {"state": {"size": "2Gi"}})

    def recreated() -> bool:
        sts = env.apps.read_namespaced_stateful_set("wc", env.namespace)
        size = sts.spec.volume_claim_templates[0].spec.resources.requests["storage"]
        return sts.metadata.uid != before.metadata.uid and size == "2Gi"

    wait_for("a new StatefulSet with the new claim template", recreated)
    env.wait_running("wc", 2)
    claims_after = {
        c.metadata.name: c.metadata.uid
        for c in env.core.list_namespaced_persistent_volume_claim(env.namespace).items
    }
    assert claims_after == claims_before, "orphan deletion keeps the state volumes"
    pods_after = {p.metadata.name: p.metadata.uid for p in env.core.list_namespaced_pod(env.namespace).items}
    kept = {n for n in ("wc-0", "wc-1") if pods_after.get(n) == pods_before[n]}
    assert kept == {"wc-0", "wc-1"}, "pods were adopted by the new StatefulSet, not restarted"
    assert "RecreatingStatefulSet" in env.event_reasons("wc")


def test_failed_describe_is_degraded_with_the_jobs_message(env: Env) -> None:
    env.create("broken", env.spec(_app_id(), entryPoint="no_such_module:build"))
    cond = wait_for(
        "Degraded",
        lambda: (
            env.condition("broken", "Degraded").get("status") == "True"
            and env.condition("broken", "Degraded")
        ),
    )
    assert cond["reason"] == "DescribeFailed"
    assert "no_such_module" in cond["message"]
    assert env.status("broken")["phase"] == "Degraded"
    assert "DescribeFailed" in env.event_reasons("broken")


def test_a_20_kb_topology_deploys_through_the_topology_configmap(env: Env) -> None:
    """The description travels in a ConfigMap, not the 4 KiB termination message; the Job publishes it
    with its own service account, which may touch that ConfigMap only."""
    app_id = _app_id()
    env.create("wide", env.spec(app_id, entryPoint="tests.e2e.apps:wide"))
    st = env.wait_running("wide", 1, timeout=120)
    cm = env.core.read_namespaced_config_map("wide-topology", env.namespace)
    assert len(cm.data["topology.json"].encode()) > 20_000
    assert st["topology"]["sourceTopics"] == [env.input_topic]
    assert f"{app_id}-counts-changelog" in env.topics()
    assert "TopologyDescribed" in env.event_reasons("wide")
    from kubernetes import client

    rbac = client.RbacAuthorizationV1Api(env.api)
    rules = rbac.read_namespaced_role("wide-describe", env.namespace).rules
    assert [(r.resources, r.resource_names, sorted(r.verbs)) for r in rules] == [
        (["configmaps"], ["wide-topology"], ["get", "patch"])
    ]
    job = next(j for j in client.BatchV1Api(env.api).list_namespaced_job(env.namespace).items)
    assert job.spec.template.spec.service_account_name == "wide-describe"
