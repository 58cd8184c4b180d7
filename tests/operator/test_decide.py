"""`decide()` on snapshots: every branch of a reconcile pass, no cluster, no broker.

Each test builds the `Snapshot` a pass would observe (plain dicts, as the API server returns them) and
checks what the pass decides: the effects, the status it writes once, and why it waits. The kube-tier
tests (test_reconcile_kube, test_failures_kube, test_reprocess_timeout_kube, test_volume_expansion_kube,
test_reconcile_race, tests/e2e) check that observe and act carry these decisions out on a real control
plane; here each branch is one test.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from kappaflow_operator import desired
from kappaflow_operator.cleanup import decide_cleanup
from kappaflow_operator.decide import (
    APPLIED_SPEC_ANNOTATION,
    UPGRADED_AT_ANNOTATION,
    Decision,
    decide,
    failed,
)
from kappaflow_operator.desired.common import (
    ACCEPTED_DESCRIBE_KEY,
    DESCRIBE_KEY_FIELD,
    TOPOLOGY_KEY,
    spec_hash,
    topology_configmap_name,
)
from kappaflow_operator.desired.jobs import JOB_TEMPLATE_ANNOTATION
from kappaflow_operator.desired.spark import SPARK_API_VERSION
from kappaflow_operator.effects import (
    RETRY_S,
    Apply,
    CreateTopics,
    Delete,
    DeleteTopics,
    Event,
    ExpandClaim,
    Patch,
)
from kappaflow_operator.models import StableSpec, StreamAppSpec
from kappaflow_operator.reset import TOPICS_SETTLE_S
from kappaflow_operator.snapshot import APPLICATION_ID_ANNOTATION, JobFacts, Snapshot
from kappaflow_operator.status import Problem
from tests.operator.specs import REF, spec_dict

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CHANGELOG = "wordcount-counts-changelog"
TOPOLOGY = {
    "sub_topologies": [
        {"id": 0, "source_topics": ["words"], "sink_topics": ["counts"], "stores": ["counts"]}
    ],
    "source_topics": ["words"],
    "sink_topics": ["counts"],
    "internal_topics": [
        {
            "name": "counts-changelog",
            "type": "changelog",
            "config": {"cleanup.policy": "compact"},
            "partitions_from": ["words"],
        }
    ],
}
TOPICS = {"words": 4, "counts": 4, CHANGELOG: 4}


# ---- snapshot builders ---------------------------------------------------------------------------------
def _app(
    spec: dict[str, Any], status: dict[str, Any] | None = None, *, generation: int = 1
) -> dict[str, Any]:
    meta = {"name": REF.name, "namespace": REF.namespace, "uid": REF.uid, "generation": generation}
    body: dict[str, Any] = {"apiVersion": "kappaflow.io/v1alpha1", "kind": "StreamApp", "metadata": meta}
    body["spec"] = spec
    if status is not None:
        body["status"] = status
    return body


def _cm(spec: dict[str, Any], *, accepted: bool = True, topology: str | None = None) -> dict[str, Any]:
    key = desired.describe_key(StreamAppSpec.model_validate(spec))
    meta: dict[str, Any] = {"name": topology_configmap_name(REF.name), "namespace": REF.namespace}
    if accepted:
        meta["annotations"] = {ACCEPTED_DESCRIBE_KEY: key}
    data = {TOPOLOGY_KEY: topology or json.dumps(TOPOLOGY), DESCRIBE_KEY_FIELD: key}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def _snap(spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None, **kw: Any) -> Snapshot:
    spec = spec if spec is not None else spec_dict()
    if "topology_configmap" not in kw:
        kw["topology_configmap"] = _cm(spec)
    kw.setdefault("topics", dict(TOPICS))
    return Snapshot(_app(spec, status, generation=kw.pop("generation", 1)), **kw)


def _applied(decision: Decision, kind: str = "StatefulSet") -> dict[str, Any]:
    objs = [dict(e.obj) for e in decision.effects if isinstance(e, Apply) and e.obj["kind"] == kind]
    assert len(objs) == 1, f"one {kind} applied, not {len(objs)}"
    return objs[0]


def _running(
    decision: Decision, *, ready: int | None = None, upgraded_at: datetime | None = None
) -> dict[str, Any]:
    """The StatefulSet `decision` applied, as the API server returns it once its pods run."""
    sts = _applied(decision)
    replicas = sts["spec"]["replicas"]
    if upgraded_at is not None:
        sts["metadata"]["annotations"][UPGRADED_AT_ANNOTATION] = upgraded_at.isoformat()
    sts["metadata"]["generation"] = 1
    sts["status"] = {
        "replicas": replicas,
        "readyReplicas": replicas if ready is None else ready,
        "updatedReplicas": replicas,
        "currentRevision": "r1",
        "updateRevision": "r1",
        "observedGeneration": 1,
    }
    return sts


def _reasons(decision: Decision) -> list[str]:
    return [e.reason for e in decision.events]


def _cond(decision: Decision, type_: str) -> tuple[str, str, str]:
    c = next(c for c in decision.status.conditions if c.type == type_)
    return c.status, c.reason, c.message


def _job_pod(exit_code: int, message: str = "") -> dict[str, Any]:
    term = {"exitCode": exit_code, "message": message, "finishedAt": "2026-01-01T00:00:01Z"}
    return {"status": {"containerStatuses": [{"name": "kappaflow", "state": {"terminated": term}}]}}


# ---- spec, name, suspend, Secrets ----------------------------------------------------------------------
def test_invalid_spec_is_degraded_and_nothing_is_applied() -> None:
    d = decide(_snap(spec_dict(replicas=-1), topology_configmap=None), now=T0)
    assert d.status.phase == "Degraded" and d.problems[0].reason == "InvalidSpec"
    assert "replicas" in d.problems[0].message
    assert d.effects == (Event("Warning", "InvalidSpec", d.problems[0].message),)
    assert d.wait is None


def test_a_name_that_cannot_name_a_service_is_degraded() -> None:
    snap = _snap()
    app = dict(snap.app or {})
    app["metadata"] = {**app["metadata"], "name": "word.count"}
    d = decide(replace(snap, app=app), now=T0)
    assert [p.reason for p in d.problems] == ["InvalidName"] and d.status.phase == "Degraded"


def test_suspend_leaves_everything_as_it_is() -> None:
    sts = {"metadata": {"name": REF.name}, "spec": {"replicas": 2}, "status": {"replicas": 2}}
    d = decide(_snap(spec_dict(suspend=True), statefulset=sts), now=T0)
    assert d.effects == () and d.wait is None
    assert d.status.phase == "Paused" and d.observation.desired_replicas == 2


def test_a_config_key_typo_is_degraded_naming_the_key_and_nothing_is_deployed() -> None:
    bad = spec_dict(config={"comit.interval.ms": "100", "consumer.fetch.max.bytes": "1048576"})
    d = decide(_snap(bad, topology_configmap=None), now=T0)
    assert [p.reason for p in d.problems] == ["InvalidConfig"] and d.status.phase == "Degraded"
    status_, reason, message = _cond(d, "Degraded")
    assert (status_, reason) == ("True", "InvalidConfig")
    assert "'comit.interval.ms'" in message and "did you mean commit.interval.ms?" in message
    assert "consumer.fetch" not in message  # a client override passes, as in the runtime
    assert d.effects == (Event("Warning", "InvalidConfig", d.problems[0].message),)  # no Job, no objects


def test_a_config_typo_in_a_running_app_keeps_the_running_version_and_a_fix_recovers() -> None:
    first = decide(_snap(), now=T0)
    sts = _running(first)
    bad = spec_dict(config={"comit.interval.ms": "100"})
    d = decide(_snap(bad, statefulset=sts, generation=2), now=T0 + timedelta(seconds=30))
    assert [p.reason for p in d.problems] == ["InvalidConfig"]
    assert not [e for e in d.effects if isinstance(e, Apply)]  # the pods keep the last good config
    assert d.observation.desired_replicas == sts["spec"]["replicas"]
    fixed = spec_dict(config={"commit.interval.ms": "100"})
    d = decide(_snap(fixed, statefulset=sts, generation=3), now=T0 + timedelta(seconds=60))
    assert d.problems == () and _cond(d, "Degraded")[0] == "False"
    assert "commit.interval.ms=100" in _applied(d, "ConfigMap")["data"]["streams.properties"]


def test_unsupported_and_unimplemented_config_keys_are_named_too() -> None:
    bad = spec_dict(config={"topology.optimization": "all,none", "task.timeout.ms": "1000"})
    (problem,) = decide(_snap(bad), now=T0).problems
    assert "'task.timeout.ms' is a Kafka Streams setting kappaflow does not implement" in problem.message
    assert "'topology.optimization'='all,none' is not valid" in problem.message


def test_a_missing_secret_is_reported_before_any_describe_job() -> None:
    d = decide(_snap(kafka_access_error="secret apps/kafka-user does not exist"), now=T0)
    assert [p.reason for p in d.problems] == ["SecretReferenceInvalid"]
    assert not [e for e in d.effects if isinstance(e, Apply)]
    assert _cond(d, "Degraded")[:2] == ("True", "SecretReferenceInvalid")


# ---- the describe Job ----------------------------------------------------------------------------------
def test_no_topology_starts_the_describe_job_and_waits() -> None:
    d = decide(_snap(topology_configmap=None), now=T0)
    kinds = [e.obj["kind"] for e in d.effects if isinstance(e, Apply)]
    assert kinds == ["ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Job"]
    assert _reasons(d) == ["DescribingTopology"]
    assert d.wait is not None and d.wait.delay == RETRY_S and "describe" in d.wait.reason
    assert d.status.phase == "Pending" and _cond(d, "Progressing")[1] == "DescribingTopology"


def test_a_running_describe_job_is_waited_for() -> None:
    job = desired.build_describe_job(StreamAppSpec.model_validate(spec_dict()), REF)
    facts = JobFacts(job["metadata"]["name"], job)
    d = decide(_snap(topology_configmap=None, describe_job=facts), now=T0)
    assert d.effects == () and d.wait is not None and d.status.phase == "Pending"


def test_a_describe_job_from_an_older_pod_template_is_replaced() -> None:
    job = desired.build_describe_job(StreamAppSpec.model_validate(spec_dict()), REF)
    job["metadata"]["annotations"] = {**job["metadata"]["annotations"], JOB_TEMPLATE_ANNOTATION: "older"}
    facts = JobFacts(job["metadata"]["name"], job)
    d = decide(_snap(topology_configmap=None, describe_job=facts), now=T0)
    assert d.effects[0] == Delete("batch/v1", "Job", facts.name)
    assert _reasons(d) == ["DescribeJobReplaced"] and d.wait is not None


def test_a_failed_describe_is_degraded_with_the_jobs_message() -> None:
    job = desired.build_describe_job(StreamAppSpec.model_validate(spec_dict()), REF)
    facts = JobFacts(job["metadata"]["name"], job, [_job_pod(1, "ModuleNotFoundError: no_such_module")])
    d = decide(_snap(topology_configmap=None, describe_job=facts), now=T0)
    assert d.problems[0].reason == "DescribeFailed" and "no_such_module" in d.problems[0].message
    assert d.status.phase == "Degraded" and "DescribeFailed" in _reasons(d) and d.wait is None


def test_a_describe_job_past_its_deadline_is_degraded() -> None:
    job = desired.build_describe_job(StreamAppSpec.model_validate(spec_dict()), REF)
    job["status"] = {"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]}
    d = decide(_snap(topology_configmap=None, describe_job=JobFacts(job["metadata"]["name"], job)), now=T0)
    assert d.problems[0].reason == "JobFailed" and "DeadlineExceeded" in d.problems[0].message


def test_a_describe_job_refused_at_admission_is_degraded() -> None:
    job = desired.build_describe_job(StreamAppSpec.model_validate(spec_dict()), REF)
    refusal = {
        "message": 'pods "x" is forbidden: violates PodSecurity',
        "lastTimestamp": "2026-01-01T00:00:00Z",
    }
    facts = JobFacts(job["metadata"]["name"], job, refusals=[refusal])
    d = decide(_snap(topology_configmap=None, describe_job=facts), now=T0)
    assert d.problems[0].reason == "JobFailed" and "PodSecurity" in d.problems[0].message


def test_a_describe_job_that_published_nothing_is_degraded() -> None:
    job = desired.build_describe_job(StreamAppSpec.model_validate(spec_dict()), REF)
    facts = JobFacts(job["metadata"]["name"], job, [_job_pod(0)])
    d = decide(_snap(topology_configmap=None, describe_job=facts), now=T0)
    assert d.problems[0].reason == "DescribeFailed" and "published no topology" in d.problems[0].message


def test_an_invalid_published_topology_is_degraded() -> None:
    d = decide(_snap(topology_configmap=_cm(spec_dict(), topology="Traceback: ImportError")), now=T0)
    assert d.problems[0].reason == "DescribeFailed" and "holds no valid topology" in d.problems[0].message


def test_a_newly_published_topology_is_accepted_once() -> None:
    d = decide(_snap(topology_configmap=_cm(spec_dict(), accepted=False)), now=T0)
    patch = next(e for e in d.effects if isinstance(e, Patch))
    assert patch.kind == "ConfigMap" and ACCEPTED_DESCRIBE_KEY in patch.body["metadata"]["annotations"]
    assert "TopologyDescribed" in _reasons(d)
    assert "TopologyDescribed" not in _reasons(decide(_snap(), now=T0))


# ---- Kafka and topics ----------------------------------------------------------------------------------
def test_kafka_unreachable_is_degraded_and_retried_later() -> None:
    d = decide(_snap(topics=None, kafka_error="cannot list topics: timed out"), now=T0)
    assert d.problems[0].reason == "KafkaUnavailable" and d.wait is not None
    assert d.wait.delay == RETRY_S * 5 and not [e for e in d.effects if isinstance(e, Apply)]


def test_missing_source_topics_wait_without_applying() -> None:
    d = decide(_snap(topics={}), now=T0)
    assert d.status.phase == "Pending" and _cond(d, "Progressing")[1] == "WaitingForSourceTopics"
    assert d.wait is not None and d.wait.delay == RETRY_S * 2
    assert not [e for e in d.effects if isinstance(e, (Apply, CreateTopics))]


def test_an_internal_topic_with_another_partition_count_is_degraded_not_resized() -> None:
    d = decide(_snap(topics={**TOPICS, CHANGELOG: 2}), now=T0)
    assert d.status.phase == "Degraded" and _cond(d, "Degraded")[1] == "TopicPartitionMismatch"
    assert _reasons(d) == ["TopicPartitionMismatch"] and d.wait is None
    assert not [e for e in d.effects if isinstance(e, (Apply, CreateTopics))]


# ---- create, steady state, pods ------------------------------------------------------------------------
def test_a_new_app_gets_its_topics_and_objects_in_order() -> None:
    d = decide(_snap(topics={"words": 4, "counts": 4}), now=T0)
    create = d.effects[0]
    assert isinstance(create, CreateTopics) and [t.name for t in create.topics] == [CHANGELOG]
    assert [e.obj["kind"] for e in d.effects if isinstance(e, Apply)] == [
        "ConfigMap",
        "Service",
        "PodDisruptionBudget",
        "StatefulSet",
    ]
    annotations = _applied(d)["metadata"]["annotations"]
    assert annotations[APPLICATION_ID_ANNOTATION] == "wordcount"
    assert json.loads(annotations[APPLIED_SPEC_ANNOTATION])["image"] == "registry.example/wordcount:1.0.0"
    assert "Created" in _reasons(d) and d.wait is None
    assert d.status.phase == "Pending" and d.status.internal_topics[0].state == "Created"
    assert d.status.topology is not None and d.status.topology.max_parallelism == 4


def test_a_running_app_is_applied_again_without_events() -> None:
    first = decide(_snap(), now=T0)
    d = decide(_snap(statefulset=_running(first)), now=T0 + timedelta(seconds=30))
    assert d.status.phase == "Running" and d.events == [] and d.wait is None
    assert d.status.application_id == "wordcount"


def test_a_change_is_not_running_until_the_statefulset_reports_it() -> None:
    """The pass that applies a new template or replica count read the StatefulSet before applying it: the
    app is Upgrading or Scaling (not Ready) until a later pass sees the StatefulSet controller report it,
    so `kubectl wait --for=condition=Ready` after an apply waits for the rollout."""
    sts = _running(decide(_snap(), now=T0))
    assert decide(_snap(statefulset=sts), now=T0).status.phase == "Running"
    new = spec_dict(image="registry.example/wordcount:2.0.0")
    rolled = decide(_snap(new, statefulset=sts, generation=2), now=T0)
    assert rolled.status.phase == "Upgrading" and _cond(rolled, "Ready")[0] == "False"
    assert rolled.status.observed_generation == 2
    scaled = decide(_snap(spec_dict(replicas=2), statefulset=sts, generation=2), now=T0)
    assert scaled.status.phase == "Scaling" and _cond(scaled, "Ready")[0] == "False"


def test_pods_refused_at_admission_are_degraded() -> None:
    sts = _running(decide(_snap(), now=T0), ready=0)
    sts["status"]["replicas"] = 0
    refusal = {"message": "forbidden: exceeded quota", "lastTimestamp": "2026-01-01T00:00:00Z"}
    d = decide(_snap(statefulset=sts, refusals=[refusal]), now=T0)
    assert [p.reason for p in d.problems] == ["PodsRefused"] and "quota" in d.problems[0].message


def test_a_crash_looping_pod_is_degraded() -> None:
    pod = {
        "metadata": {"name": "wordcount-0"},
        "status": {
            "containerStatuses": [
                {
                    "name": "kappaflow",
                    "ready": False,
                    "restartCount": 4,
                    "lastState": {"terminated": {"exitCode": 1}},
                }
            ]
        },
    }
    sts = _running(decide(_snap(), now=T0), ready=2)
    d = decide(_snap(statefulset=sts, pods=[pod]), now=T0)
    assert d.problems[0].reason == "CrashLoopBackOff" and "wordcount-0 --previous" in d.problems[0].message


def test_an_upgrade_past_its_deadline_rolls_back_to_the_last_stable_spec() -> None:
    stable = spec_dict()
    broken = spec_dict(image="registry.example/wordcount:2.0.0")
    record = StableSpec(
        hash=spec_hash(StreamAppSpec.model_validate(stable)),
        image=stable["image"],
        application_id="wordcount",
        spec=StreamAppSpec.model_validate(stable).to_wire(),
    )
    status = {"lastStableSpec": record.to_wire()}
    upgrade = decide(_snap(broken, topology_configmap=_cm(broken)), now=T0)
    sts = _running(upgrade, ready=1, upgraded_at=T0)
    later = T0 + timedelta(seconds=601)
    d = decide(_snap(broken, status, statefulset=sts, topology_configmap=_cm(broken)), now=later)
    assert d.problems[0].reason == "UpgradeRolledBack" and "UpgradeRolledBack" in _reasons(d)
    assert _applied(d)["spec"]["template"]["spec"]["containers"][0]["image"] == stable["image"]
    assert d.status.rollback is not None and d.status.phase == "Degraded"


# ---- replicas ------------------------------------------------------------------------------------------
def test_replicas_are_capped_at_the_partition_count() -> None:
    d = decide(_snap(spec_dict(replicas=10)), now=T0)
    assert _applied(d)["spec"]["replicas"] == 4
    assert _cond(d, "ReplicasCapped")[:2] == ("True", "ExceedsPartitionCount")
    assert "ReplicasCapped" in _reasons(d)


AUTO = {
    "enabled": True,
    "minReplicas": 1,
    "maxReplicas": 4,
    "lagPerReplica": 10,
    "scaleUpCooldownSeconds": 0,
    "scaleDownCooldownSeconds": 0,
}


def test_the_autoscaler_decides_on_timer_passes_from_the_observed_lag() -> None:
    snap = _snap(spec_dict(replicas=1, autoscaling=AUTO), lag=35)
    d = decide(snap, now=T0, tick=True)
    assert d.status.autoscaler is not None and d.status.autoscaler.desired_replicas == 4
    assert d.status.consumer_lag == 35 and "Autoscaled" in _reasons(d)
    assert _applied(d)["spec"]["replicas"] == 4
    handler = decide(snap, now=T0, tick=False)
    assert handler.status.autoscaler is None and _applied(handler)["spec"]["replicas"] == 1


def test_the_autoscaler_holds_within_its_interval() -> None:
    first = decide(_snap(spec_dict(replicas=1, autoscaling=AUTO), lag=35), now=T0, tick=True)
    status = first.status.to_wire()
    d = decide(
        _snap(spec_dict(replicas=1, autoscaling=AUTO), status, lag=0),
        now=T0 + timedelta(seconds=5),
        tick=True,
    )
    assert "Autoscaled" not in _reasons(d) and _applied(d)["spec"]["replicas"] == 4
    assert d.status.consumer_lag == 0


def test_an_unreadable_lag_is_an_event_not_a_failure() -> None:
    d = decide(_snap(lag_error="cannot measure lag"), now=T0, tick=True)
    assert "LagUnavailable" in _reasons(d) and d.problems == () and d.wait is None


def test_a_scale_the_autoscaler_overrides_is_reported() -> None:
    auto = {**AUTO, "minReplicas": 2, "maxReplicas": 2}
    d = decide(_snap(spec_dict(replicas=3, autoscaling=auto)), now=T0)
    assert _applied(d)["spec"]["replicas"] == 2 and "ScaleIgnored" in _reasons(d)
    assert _cond(d, "ScaleOverridden")[:2] == ("True", "AutoscalingEnabled")


# ---- upgrade mode reprocess ----------------------------------------------------------------------------
REPROCESS_V1 = spec_dict(upgrade={"mode": "reprocess"})
REPROCESS_V2 = spec_dict(upgrade={"mode": "reprocess"}, image="registry.example/wordcount:2.0.0")


def _reprocess_snap(status: dict[str, Any] | None = None, **kw: Any) -> Snapshot:
    sts = _running(decide(_snap(REPROCESS_V1), now=T0))
    return _snap(REPROCESS_V2, status, statefulset=sts, topology_configmap=_cm(REPROCESS_V2), **kw)


def _spark(state: str, **status: Any) -> dict[str, Any]:
    digest = spec_hash(StreamAppSpec.model_validate(REPROCESS_V2))
    name = desired.spark_application_name(REF, digest)
    return {
        "metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "status": {"applicationState": {"state": state, **status}},
    }


def test_reprocess_submits_a_spark_application_and_keeps_the_old_version() -> None:
    d = decide(_reprocess_snap(), now=T0)
    create = next(e for e in d.effects if isinstance(e, CreateTopics))
    new_id = d.status.reprocessing.application_id if d.status.reprocessing else ""
    assert new_id != "wordcount" and [t.name for t in create.topics] == [f"{new_id}-counts-changelog"]
    assert "SparkApplication" in [e.obj["kind"] for e in d.effects if isinstance(e, Apply)]
    assert "StatefulSet" not in [e.obj["kind"] for e in d.effects if isinstance(e, Apply)]
    assert d.wait is not None and d.wait.reason.startswith("reprocessing")
    assert d.status.phase == "Reprocessing" and "ReprocessStarted" in _reasons(d)


def test_a_running_reprocess_is_waited_for() -> None:
    d = decide(_reprocess_snap(spark_application=_spark("RUNNING")), now=T0)
    assert (
        d.wait is not None and d.status.reprocessing is not None and d.status.reprocessing.state == "Running"
    )
    assert not [e for e in d.effects if isinstance(e, Apply)]


def test_a_failed_reprocess_is_degraded_and_the_old_version_keeps_running() -> None:
    d = decide(_reprocess_snap(spark_application=_spark("FAILED", errorMessage="OOM")), now=T0)
    assert d.problems[0].reason == "ReprocessFailed" and "OOM" in d.problems[0].message
    assert d.wait is None and not [e for e in d.effects if isinstance(e, Apply)]


def test_a_completed_reprocess_rolls_the_pods_onto_the_new_id() -> None:
    submitted = decide(_reprocess_snap(), now=T0).status.to_wire()
    d = decide(
        _reprocess_snap(submitted, spark_application=_spark("COMPLETED")), now=T0 + timedelta(minutes=5)
    )
    run = d.status.reprocessing
    assert run is not None and run.state == "Completed"
    assert _applied(d)["metadata"]["annotations"][APPLICATION_ID_ANNOTATION] == run.application_id
    assert {"ReprocessCompleted", "RollingOntoReprocessedState"} <= set(_reasons(d))


def test_a_reprocess_past_its_timeout_is_stopped() -> None:
    later = T0 + timedelta(hours=7)
    d = decide(_reprocess_snap(spark_application=_spark("RUNNING")), now=later)
    assert Delete(SPARK_API_VERSION, "SparkApplication", _spark("RUNNING")["metadata"]["name"]) in d.effects
    assert d.problems[0].reason == "ReprocessTimedOut" and d.status.reprocessing is not None
    assert d.status.reprocessing.state == "Failed" and d.wait is None


def test_after_a_settled_reprocess_the_replaced_ids_topics_and_runs_are_deleted() -> None:
    v2 = spec_dict(upgrade={"mode": "reprocess", "spark": {"cleanupPolicy": "Delete"}}, image="r/wc:2")
    digest = spec_hash(StreamAppSpec.model_validate(v2))
    run = {
        "sparkApplication": "wordcount-reprocess-new",
        "applicationId": "wordcount-r1",
        "image": "r/wc:2",
        "specHash": digest,
        "state": "Completed",
        "startedAt": T0.isoformat(),
        "previousApplicationId": "wordcount",
    }
    status = {"reprocessing": run, "applicationId": "wordcount-r1", "replicas": 3, "readyReplicas": 3}
    topics = {**TOPICS, "wordcount-r1-counts-changelog": 4}
    runs = [
        {"metadata": {"name": "wordcount-reprocess-old"}},
        {"metadata": {"name": "wordcount-reprocess-new"}},
    ]
    d = decide(_snap(v2, status, topology_configmap=_cm(v2), topics=topics, spark_applications=runs), now=T0)
    assert DeleteTopics([CHANGELOG]) in d.effects
    assert Delete(SPARK_API_VERSION, "SparkApplication", "wordcount-reprocess-old") in d.effects
    assert d.status.reprocessing is not None and d.status.reprocessing.cleaned_up


# ---- upgrade mode reset --------------------------------------------------------------------------------
RESET_V1 = spec_dict(upgrade={"mode": "reset"})
RESET_V2 = spec_dict(upgrade={"mode": "reset"}, image="registry.example/wordcount:2.0.0")


def _reset_snap(*, replicas: int = 0, status: dict[str, Any] | None = None, **kw: Any) -> Snapshot:
    sts = _running(decide(_snap(RESET_V1), now=T0))
    sts["spec"]["replicas"] = replicas
    return _snap(RESET_V2, status, statefulset=sts, topology_configmap=_cm(RESET_V2), generation=2, **kw)


def _reset_job(*pods: dict[str, Any]) -> JobFacts:
    job = desired.build_reset_job(StreamAppSpec.model_validate(RESET_V2), REF, 2)
    return JobFacts(job["metadata"]["name"], job, list(pods))


def test_a_reset_first_stops_every_pod() -> None:
    d = decide(_reset_snap(replicas=3), now=T0)
    assert Patch("apps/v1", "StatefulSet", REF.name, {"spec": {"replicas": 0}}) in d.effects
    assert "ResetStopping" in _reasons(d) and d.wait is not None
    assert d.status.phase == "Resetting" and d.status.reset is not None and d.status.reset.generation == 2
    assert not [e for e in d.effects if isinstance(e, Apply) and e.obj["kind"] == "StatefulSet"]


def test_a_reset_waits_for_pods_and_for_an_empty_group() -> None:
    pods = decide(_reset_snap(pods=[{"metadata": {"name": "wordcount-0"}}]), now=T0)
    assert pods.wait is not None and "pods to stop" in pods.wait.reason and pods.status.phase == "Resetting"
    members = decide(_reset_snap(group_members=2), now=T0)
    assert members.wait is not None and "2 group member(s)" in members.wait.reason and members.effects == ()


def test_a_reset_drops_the_state_volumes_and_starts_its_job() -> None:
    claims = [{"metadata": {"name": f"state-{REF.name}-0"}, "spec": {}, "status": {}}]
    d = decide(_reset_snap(group_members=0, claims=claims), now=T0)
    assert Delete("v1", "PersistentVolumeClaim", f"state-{REF.name}-0") in d.effects
    assert [e.obj["kind"] for e in d.effects if isinstance(e, Apply)] == ["ConfigMap", "Job"]
    assert {"StateVolumesDeleted", "ResetStarted"} <= set(_reasons(d)) and d.wait is not None


def test_a_failed_reset_job_is_degraded() -> None:
    d = decide(_reset_snap(reset_job=_reset_job(_job_pod(1, "group not empty"))), now=T0)
    assert d.problems[0].reason == "ResetFailed" and "group not empty" in d.problems[0].message
    assert d.status.phase == "Degraded" and d.status.reset is None


def test_after_the_reset_job_the_internal_topics_are_recreated_until_they_stay() -> None:
    job = _reset_job(_job_pod(0))
    missing = decide(_reset_snap(reset_job=job, topics={"words": 4, "counts": 4}), now=T0)
    creates = [e for e in missing.effects if isinstance(e, CreateTopics)]
    assert creates and all(c.tolerate_errors for c in creates) and missing.wait is not None
    present = decide(_reset_snap(reset_job=job), now=T0)
    assert present.wait is not None and present.status.reset is not None
    assert present.status.reset.topics_present_since == T0
    settled = T0 + timedelta(seconds=TOPICS_SETTLE_S)
    done = decide(_reset_snap(reset_job=job, status=present.status.to_wire()), now=settled)
    assert done.wait is None and done.status.reset is None and done.wire()["reset"] is None
    assert _applied(done)["spec"]["replicas"] == 3 and "ResetCompleted" in _reasons(done)


# ---- state volumes -------------------------------------------------------------------------------------
def test_a_state_volume_change_replaces_the_statefulset_by_re_entry() -> None:
    sts = _running(decide(_snap(), now=T0))
    d = decide(_snap(spec_dict(state={"size": "2Gi"}), statefulset=sts), now=T0)
    assert Delete("apps/v1", "StatefulSet", REF.name, propagation="Orphan") in d.effects
    assert "RecreatingStatefulSet" in _reasons(d) and d.wait is not None
    sts["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    going = decide(_snap(spec_dict(state={"size": "2Gi"}), statefulset=sts), now=T0)
    assert not [e for e in going.effects if isinstance(e, Delete)] and going.wait is not None
    gone = decide(_snap(spec_dict(state={"size": "2Gi"})), now=T0)
    assert gone.wait is None and _applied(gone)["spec"]["volumeClaimTemplates"]


def _claim(storage_class: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"state-{REF.name}-0"},
        "spec": {"storageClassName": storage_class, "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}},
    }


def test_state_claims_grow_when_their_class_allows_it() -> None:
    sts = _running(decide(_snap(spec_dict(state={"size": "2Gi"})), now=T0))
    classes = {"fast": {"allowVolumeExpansion": True}}
    d = decide(
        _snap(
            spec_dict(state={"size": "2Gi"}),
            statefulset=sts,
            claims=[_claim("fast")],
            storage_classes=classes,
        ),
        now=T0,
    )
    assert ExpandClaim(f"state-{REF.name}-0", "2Gi") in d.effects
    assert _cond(d, "VolumesMatchSpec")[0] == "True"


def test_a_class_without_expansion_is_reported_not_degraded() -> None:
    sts = _running(decide(_snap(spec_dict(state={"size": "2Gi"})), now=T0))
    classes: dict[str, Any] = {"slow": {}}
    d = decide(
        _snap(
            spec_dict(state={"size": "2Gi"}),
            statefulset=sts,
            claims=[_claim("slow")],
            storage_classes=classes,
        ),
        now=T0,
    )
    assert not [e for e in d.effects if isinstance(e, ExpandClaim)]
    assert _cond(d, "VolumesMatchSpec")[0] == "False" and d.status.phase == "Running"
    refused = d.with_volume_problems([Problem("VolumeExpansionFailed", "claim x: denied")])
    assert "claim x: denied" in _cond(refused, "VolumesMatchSpec")[2]


def _pending_claim(storage_class: str) -> dict[str, Any]:
    claim = _claim(storage_class)
    claim["status"] = {"phase": "Pending"}
    return claim


def _unschedulable_pod() -> dict[str, Any]:
    message = "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. not found"
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    return {"metadata": {"name": f"{REF.name}-0"}, "status": {"phase": "Pending", "conditions": [cond]}}


def test_a_volume_that_cannot_be_provisioned_is_degraded_with_the_reason() -> None:
    typo = spec_dict(state={"size": "1Gi", "storageClassName": "fast-ssd"})
    sts = _running(decide(_snap(typo, topology_configmap=_cm(typo)), now=T0), ready=0)
    failed_event = {
        "involvedObject": {"kind": "PersistentVolumeClaim", "name": f"state-{REF.name}-0"},
        "reason": "ProvisioningFailed",
        "message": 'storageclass.storage.k8s.io "fast-ssd" not found',
        "lastTimestamp": "2026-01-01T00:00:00Z",
    }
    d = decide(
        _snap(
            typo,
            topology_configmap=_cm(typo),
            statefulset=sts,
            pods=[_unschedulable_pod()],
            claims=[_pending_claim("fast-ssd")],
            storage_classes={"fast-ssd": None},
            provisioning_failures=[failed_event],
        ),
        now=T0,
    )
    reasons = {p.reason: p.message for p in d.problems}
    assert '"fast-ssd" not found' in reasons["VolumeProvisioningFailed"], reasons
    assert "unbound immediate PersistentVolumeClaims" in reasons["PodsUnschedulable"], reasons
    assert d.status.phase == "Degraded" and _cond(d, "Degraded")[0] == "True"
    # the spec's class is wrong, not the claim: nothing is deleted yet
    assert not [e for e in d.effects if isinstance(e, Delete) and e.kind == "PersistentVolumeClaim"]


def test_a_fixed_storage_class_replaces_the_claim_that_never_bound_and_its_pod() -> None:
    fixed = spec_dict(state={"size": "1Gi", "storageClassName": "standard"})
    sts = _running(decide(_snap(fixed, topology_configmap=_cm(fixed)), now=T0), ready=0)
    d = decide(
        _snap(
            fixed,
            statefulset=sts,
            pods=[_unschedulable_pod()],
            claims=[_pending_claim("fast-ssd")],
            storage_classes={"fast-ssd": None},
            topology_configmap=_cm(fixed),
        ),
        now=T0,
    )
    assert Delete("v1", "PersistentVolumeClaim", f"state-{REF.name}-0") in d.effects
    assert Delete("v1", "Pod", f"{REF.name}-0") in d.effects
    assert "ReplacingUnboundClaim" in _reasons(d)
    bound = decide(
        _snap(fixed, statefulset=sts, claims=[_claim("fast-ssd")], topology_configmap=_cm(fixed)), now=T0
    )
    deleted = [e.kind for e in bound.effects if isinstance(e, Delete)]
    assert "PersistentVolumeClaim" not in deleted and "Pod" not in deleted, "a bound claim holds data"


# ---- errors while acting, deletion ---------------------------------------------------------------------
def test_an_error_while_acting_ends_in_status() -> None:
    d = failed(_snap(), Problem("KubernetesApiError", "Kubernetes API error 422: invalid"), T0)
    assert d.status.phase == "Degraded" and _cond(d, "Degraded")[1] == "KubernetesApiError"
    assert d.effects == ()


def test_deletion_applies_the_topic_cleanup_policy() -> None:
    retain = decide_cleanup(_app(spec_dict(topicCleanupPolicy="Retain")), None)
    assert [e.reason for e in retain if isinstance(e, Event)] == ["TopicsRetained"] and len(retain) == 1
    status = {
        "internalTopics": [
            {"name": "wordcount-old-repartition", "type": "repartition", "partitions": 4, "state": "Ready"}
        ]
    }
    delete = decide_cleanup(_app(spec_dict(topicCleanupPolicy="Delete"), status), _cm(spec_dict()))
    assert delete == [DeleteTopics([CHANGELOG, "wordcount-old-repartition"], announce=True)]
    assert decide_cleanup(_app(spec_dict(replicas=-1)), None) == []
