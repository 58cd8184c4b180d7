"""Failures on the real control plane end in status: a condition with the cause a user can act on.

kopf runs in-process against the local apiserver, a fake kubelet runs the pods (a `:crash` image tag
makes the app container exit at once, as a broken release would; an image the test registry does not
have, `REGISTRY`, is never pulled), and the local broker is Kafka.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.operator_env import make_launcher, running_operator, wait_for
from tests.operator.test_reconcile_kube import GROUP, PLURAL, VERSION, Env

pytestmark = [pytest.mark.kube, pytest.mark.kafka, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def crd_installed(kube_cluster: Any) -> Any:
    from tests.e2e.operator_env import install_crd

    install_crd(kube_cluster)
    return kube_cluster


#: The test registry: the tags each repository has. The fake kubelet cannot pull any other tag of these
#: repositories (ErrImagePull, then ImagePullBackOff); images of other repositories are not its concern.
REGISTRY = {
    "registry.example/wordcount": {"1.0.0", "2.0.0", "9.9.9", "crash", "hang"},
    "registry.example/log-shipper": {"1.4.2"},
}


def published(image: str) -> bool:
    repository, _, tag = image.rpartition(":")
    return repository not in REGISTRY or tag in REGISTRY[repository]


def crashing_launcher(api: Any, input_topic: str, output_topic: str) -> Any:
    """Pods of an image tagged `:crash` exit 1 at once, `:hang` never end; others as in the other tests."""
    normal = make_launcher(api, input_topic, output_topic)

    def launch(pod: Any) -> Any:
        image = pod.spec.containers[0].image
        if image.endswith(":crash") and "job-name" not in (pod.metadata.labels or {}):
            return subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])
        if image.endswith(":hang"):
            return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        return normal(pod)

    return launch


@pytest.fixture
def env(crd_installed: Any, kafka_bootstrap: str, kafka_topics: Any) -> Iterator[Env]:
    from confluent_kafka.admin import AdminClient

    from tests.harness.fake_kubelet import FakeKubelet

    namespace = crd_installed.create_namespace("fail")
    input_topic = kafka_topics("words", partitions=4)
    output_topic = kafka_topics("counts", partitions=4)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    with crd_installed.api_client() as api:
        launcher = crashing_launcher(api, input_topic, output_topic)
        kubelet = FakeKubelet(
            api, namespace, launcher, max_grace_seconds=2, crash_backoff_seconds=1,
            pullable=published, pull_backoff_seconds=1,
        )  # fmt: skip
        with kubelet, running_operator(crd_installed.kubeconfig, namespace):
            yield Env(api, namespace, kafka_bootstrap, input_topic, output_topic, admin)


def _app_id() -> str:
    return f"wc-{uuid.uuid4().hex[:8]}"


def _degraded(env: Env, name: str, reason: str, timeout: float = 60) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        cond = env.condition(name, "Degraded")
        return cond if cond.get("status") == "True" and cond.get("reason") == reason else None

    cond: dict[str, Any] = wait_for(f"{name} Degraded with reason {reason}", probe, timeout)
    stalled = env.condition(name, "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == reason, "kstatus: Stalled with the cause"
    assert stalled["observedGeneration"] == env.get(name)["metadata"]["generation"]
    return cond


def _event_count(env: Env, name: str, reason: str) -> int:
    events = env.core.list_namespaced_event(
        env.namespace, field_selector=f"involvedObject.name={name},reason={reason}"
    )
    return sum(e.count or 1 for e in events.items)


def _passes(env: Env, name: str, count: int) -> None:
    """Wait until the operator has written status `count` more times (each pass writes it once)."""
    seen: list[str] = []

    def probe() -> bool:
        stamp = env.status(name).get("lastReconciled")
        if stamp and (not seen or seen[-1] != stamp):
            seen.append(stamp)
        return len(seen) > count

    wait_for(f"{count} more passes over {name}", probe, timeout=60)


def test_secret_without_the_named_key_is_in_status(env: Env) -> None:
    from kubernetes import client

    env.core.create_namespaced_secret(
        env.namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="kafka-user"), string_data={"user": "u", "pw": "p"}
        ),
    )
    sasl = {
        "mechanism": "PLAIN",
        "usernameSecretRef": {"name": "kafka-user", "key": "username"},
        "passwordSecretRef": {"name": "kafka-user", "key": "pw"},
    }
    spec = env.spec(_app_id())
    spec["kafka"] |= {"securityProtocol": "SASL_PLAINTEXT", "sasl": sasl}
    env.create("sasl", spec)
    cond = _degraded(env, "sasl", "SecretReferenceInvalid")
    assert "has no key 'username'" in cond["message"] and "kafka.sasl.usernameSecretRef" in cond["message"]
    assert "pw, user" in cond["message"], "the message lists the keys the Secret has"
    _passes(env, "sasl", 2)
    assert _event_count(env, "sasl", "SecretReferenceInvalid") == 1, "one event, not one per pass"


@pytest.mark.parametrize(
    ("name", "says"), [("eval.wordcount", "no dots"), ("w" * 53, "at most 52 characters")]
)
def test_names_that_cannot_name_a_service_are_refused_at_apply(env: Env, name: str, says: str) -> None:
    from kubernetes.client.exceptions import ApiException

    with pytest.raises(ApiException) as refused:
        env.create(name, env.spec(_app_id()))
    assert refused.value.status == 422 and says in str(refused.value.body)


def test_describe_job_past_its_deadline_is_in_status(env: Env) -> None:
    from kubernetes import client

    env.create("hang", env.spec(_app_id(), image="registry.example/wordcount:hang"))
    job = wait_for(
        "the describe Job",
        lambda: next(iter(client.BatchV1Api(env.api).list_namespaced_job(env.namespace).items), None),
    )
    # Its pod hangs; the deadline the Job carries is what ends it (shortened here, it is mutable).
    client.BatchV1Api(env.api).patch_namespaced_job(
        job.metadata.name, env.namespace, {"spec": {"activeDeadlineSeconds": 2}}
    )
    cond = _degraded(env, "hang", "JobFailed", timeout=90)
    assert job.metadata.name in cond["message"] and "DeadlineExceeded" in cond["message"]
    assert env.status("hang")["phase"] == "Degraded"


def _waiting_reasons(env: Env, selector: str, image: str) -> set[str]:
    """Waiting reasons (with the kubelet's message) of the containers running `image`."""
    pods = env.core.list_namespaced_pod(env.namespace, label_selector=selector).items
    return {
        f"{cs.state.waiting.reason}: {cs.state.waiting.message}"
        for p in pods
        for cs in p.status.container_statuses or []
        if cs.image == image and cs.state.waiting is not None
    }


def test_images_that_cannot_be_pulled_are_in_status_and_a_fixed_tag_recovers(env: Env) -> None:
    # The describe Job's pod cannot pull a tag that was never pushed.
    typo = "registry.example/wordcount:1.0.1"
    env.create("pull", env.spec(_app_id(), replicas=1, image=typo))
    cond = _degraded(env, "pull", "ImagePullFailed", timeout=90)
    assert cond["message"].startswith("Job ") and f"cannot pull image {typo}" in cond["message"]
    assert f"{typo}: not found" in cond["message"], "the kubelet's own message"
    wait_for(
        "the kubelet backing off the pull",
        lambda: any(
            r.startswith(f'ImagePullBackOff: Back-off pulling image "{typo}"')
            for r in _waiting_reasons(env, "job-name", typo)
        ),
    )
    assert env.status("pull")["phase"] == "Degraded"
    env.patch_spec("pull", {"image": "registry.example/wordcount:1.0.0"})
    env.wait_running("pull", 1)
    assert env.condition("pull", "Degraded")["status"] == "False"

    # The app pods: a sidecar whose tag is missing keeps the rolled pod from starting.
    missing = "registry.example/log-shipper:1.4.20"
    env.patch_spec("pull", {"podTemplate": {"sidecars": [{"name": "shipper", "image": missing}]}})
    cond = _degraded(env, "pull", "ImagePullFailed", timeout=90)
    assert "pod pull-0 container shipper" in cond["message"], cond["message"]
    assert f"cannot pull image {missing}" in cond["message"] and "not found" in cond["message"]
    env.patch_spec("pull", {"podTemplate": {"sidecars": [{"name": "shipper", "image": missing[:-1]}]}})
    env.wait_running("pull", 1, timeout=120)
    assert env.condition("pull", "Degraded")["status"] == "False"
    assert env.condition("pull", "Stalled")["status"] == "False"


def test_describe_job_refused_by_pod_security_is_in_status_and_a_fixed_spec_recovers(env: Env) -> None:
    env.core.patch_namespace(
        env.namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
    )
    escalating = {"containerSecurityContext": {"allowPrivilegeEscalation": True}}
    env.create("psa", env.spec(_app_id(), replicas=1, podTemplate=escalating))
    cond = _degraded(env, "psa", "JobFailed", timeout=90)
    assert "cannot create its pod" in cond["message"] and "violates PodSecurity" in cond["message"]
    assert "allowPrivilegeEscalation" in cond["message"], cond["message"]
    # The Job's name depends on the image and entry point only: the fix has to replace it.
    env.patch_spec("psa", {"podTemplate": {"containerSecurityContext": {"allowPrivilegeEscalation": False}}})
    env.wait_running("psa", 1, timeout=120)
    assert env.condition("psa", "Degraded")["status"] == "False"
    assert "DescribeJobReplaced" in env.event_reasons("psa")


def test_app_pods_refused_at_admission_are_in_status_and_a_fixed_spec_recovers(env: Env) -> None:
    env.core.patch_namespace(
        env.namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
    )
    shipper = {"name": "shipper", "image": "registry.example/log-shipper:1.4.2"}
    privileged = {**shipper, "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}
    # The describe Job has no sidecars, so it runs: only the StatefulSet's pods are refused.
    env.create("adm", env.spec(_app_id(), replicas=1, podTemplate={"sidecars": [privileged]}))
    cond = _degraded(env, "adm", "PodsRefused", timeout=90)
    assert cond["message"].startswith("StatefulSet adm cannot create its pods")
    assert "violates PodSecurity" in cond["message"] and "NET_ADMIN" in cond["message"], cond["message"]
    env.patch_spec("adm", {"podTemplate": {"sidecars": [shipper]}})
    env.wait_running("adm", 1, timeout=120)
    assert env.condition("adm", "Degraded")["status"] == "False"


def test_a_manifest_the_api_server_rejects_is_in_status_and_a_fixed_spec_recovers(env: Env) -> None:
    shipper = {"name": "shipper", "image": "registry.example/log-shipper:1.4.2"}
    # privileged with allowPrivilegeEscalation false (the operator's default) is invalid: a 422 on apply.
    privileged = {**shipper, "securityContext": {"privileged": True}}
    env.create("inv", env.spec(_app_id(), replicas=1, podTemplate={"sidecars": [privileged]}))
    cond = _degraded(env, "inv", "KubernetesApiError")
    assert "StatefulSet.apps" in cond["message"] and "is invalid" in cond["message"], cond["message"]
    assert "containers[1].securityContext" in cond["message"], cond["message"]
    env.patch_spec("inv", {"podTemplate": {"sidecars": [shipper]}})
    env.wait_running("inv", 1, timeout=120)
    assert env.condition("inv", "Degraded")["status"] == "False"


def test_a_config_key_typo_is_in_status_nothing_is_deployed_and_a_fixed_spec_recovers(env: Env) -> None:
    from kubernetes import client

    # The API server accepts any key; the pods would crash-loop on this one.
    env.create("cfg", env.spec(_app_id(), replicas=1, config={"comit.interval.ms": "500"}))
    cond = _degraded(env, "cfg", "InvalidConfig")
    assert "'comit.interval.ms'" in cond["message"], cond["message"]
    assert "did you mean commit.interval.ms?" in cond["message"], cond["message"]
    names = [
        s.metadata.name for s in client.AppsV1Api(env.api).list_namespaced_stateful_set(env.namespace).items
    ]
    assert "cfg" not in names, "nothing is deployed with the bad key"
    env.patch_spec("cfg", {"config": {"comit.interval.ms": None, "commit.interval.ms": "500"}})
    env.wait_running("cfg", 1, timeout=120)
    assert env.condition("cfg", "Degraded")["status"] == "False"


def test_crash_looping_upgrade_is_reported_then_rolled_back(env: Env) -> None:
    env.create("crash", env.spec(_app_id(), replicas=1, upgrade={"progressDeadlineSeconds": 30}))
    env.wait_running("crash", 1)
    wait_for("1.0.0 recorded as stable", lambda: env.status("crash").get("lastStableSpec"))
    env.patch_spec("crash", {"image": "registry.example/wordcount:crash"})

    crashing = _degraded(env, "crash", "CrashLoopBackOff", timeout=90)
    assert "crash-0" in crashing["message"] and "kubectl logs crash-0 --previous" in crashing["message"]
    assert env.status("crash")["phase"] == "Degraded"

    cond = _degraded(env, "crash", "UpgradeRolledBack", timeout=120)
    assert "progressDeadlineSeconds (30s)" in cond["message"] and "wordcount:1.0.0" in cond["message"]
    rollback = env.status("crash")["rollback"]
    assert rollback["toSpecHash"] == env.status("crash")["lastStableSpec"]["hash"]

    def back_on_stable() -> bool:
        sts = env.apps.read_namespaced_stateful_set("crash", env.namespace)
        pods = env.core.list_namespaced_pod(
            env.namespace, label_selector="kappaflow.io/streamapp=crash"
        ).items
        images = [p.spec.containers[0].image for p in pods if "job-name" not in (p.metadata.labels or {})]
        ready = sts.status.ready_replicas == 1
        return (
            sts.spec.template.spec.containers[0].image.endswith(":1.0.0")
            and images == ["registry.example/wordcount:1.0.0"]
            and ready
        )

    wait_for("the stable image running again", back_on_stable, timeout=120)
    _passes(env, "crash", 2)
    assert env.condition("crash", "Degraded")["reason"] == "UpgradeRolledBack", (
        "the failed spec is not retried"
    )
    assert _event_count(env, "crash", "UpgradeRolledBack") == 1

    env.patch_spec("crash", {"image": "registry.example/wordcount:2.0.0"})  # a fixed release
    env.wait_running("crash", 1, timeout=120)
    assert "rollback" not in env.status("crash")
    assert env.condition("crash", "Degraded")["status"] == "False"


def test_partition_mismatch_advises_what_can_run_and_posts_one_event(env: Env) -> None:
    from confluent_kafka.admin import NewTopic

    app_id = _app_id()
    changelog = f"{app_id}-counts-changelog"
    env.admin.create_topics([NewTopic(changelog, num_partitions=2, replication_factor=1)])[changelog].result(
        30
    )
    try:
        env.create("mm", env.spec(app_id))
        cond = _degraded(env, "mm", "TopicPartitionMismatch")
        assert "upgrade mode reset" not in cond["message"] and f"delete {changelog}" in cond["message"]
        _passes(env, "mm", 3)
        assert _event_count(env, "mm", "TopicPartitionMismatch") == 1
    finally:
        names = [n for n in (changelog, f"{app_id}-counts-repartition") if n in env.topics()]
        for future in env.admin.delete_topics(names).values():
            future.result(timeout=30)


def test_suspend_lag_and_a_scale_the_autoscaler_overrides(env: Env) -> None:
    auto = {"enabled": True, "minReplicas": 1, "maxReplicas": 2, "lagPerReplica": 1000, "intervalSeconds": 5}
    auto |= {"scaleUpCooldownSeconds": 0, "scaleDownCooldownSeconds": 0}
    env.create("ops", env.spec(_app_id(), replicas=1, autoscaling=auto))
    env.wait_running("ops", 1)
    wait_for("the LAG column filled", lambda: env.status("ops").get("consumerLag") == 0)

    env.custom.patch_namespaced_custom_object_scale(
        GROUP, VERSION, env.namespace, PLURAL, "ops", {"spec": {"replicas": 2}}
    )
    cond = wait_for(
        "ScaleOverridden",
        lambda: (
            env.condition("ops", "ScaleOverridden").get("status") == "True"
            and env.condition("ops", "ScaleOverridden")
        ),
    )
    assert "spec.replicas is 2" in cond["message"] and "runs 1" in cond["message"]
    assert "ScaleIgnored" in env.event_reasons("ops")

    env.patch_spec("ops", {"suspend": True, "image": "registry.example/wordcount:9.9.9"})
    wait_for("Paused", lambda: env.status("ops").get("phase") == "Paused")
    assert env.condition("ops", "Ready")["reason"] == "Suspended"
    _passes(env, "ops", 2)
    sts = env.apps.read_namespaced_stateful_set("ops", env.namespace)
    assert sts.spec.template.spec.containers[0].image.endswith(":1.0.0"), "suspended: nothing applied"

    env.patch_spec("ops", {"suspend": False})
    wait_for(
        "resumed onto the new image",
        lambda: (
            env.apps.read_namespaced_stateful_set("ops", env.namespace)
            .spec.template.spec.containers[0]
            .image.endswith(":9.9.9")
        ),
    )
