"""Phase and conditions from observed state."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kappaflow_operator.models import StableSpec, StreamAppSpec, TopologyDescription
from kappaflow_operator.scaling import cap_replicas
from kappaflow_operator.status import (
    STABLE_AFTER_S,
    Observation,
    Problem,
    compute_status,
    condition,
    creation_problem,
    name_problem,
    pod_problems,
    rollback_due,
)
from kappaflow_operator.topics import plan_internal_topics

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _sts(replicas, ready, current="r1", update="r1", generation=1, observed=1):
    return {
        "metadata": {"generation": generation},
        "status": {
            "replicas": replicas,
            "readyReplicas": ready,
            "updatedReplicas": replicas,
            "currentRevision": current,
            "updateRevision": update,
            "observedGeneration": observed,
        },
    }


def _status(obs, previous=None, now=T0):
    return compute_status(previous, obs, name="wc", now=now)


def _cond(status, type_):
    c = condition(status, type_)
    assert c is not None
    return (c.status, c.reason)


def test_running_when_all_ready():
    applied = StableSpec(hash="h", image="img:1", application_id="wc")
    s = _status(Observation(generation=2, desired_replicas=3, statefulset=_sts(3, 3), applied=applied))
    assert s.phase == "Running"
    assert s.observed_generation == 2
    assert (s.replicas, s.ready_replicas, s.selector) == (3, 3, "kappaflow.io/streamapp=wc")
    assert _cond(s, "Ready") == ("True", "AllReplicasReady")
    assert _cond(s, "Progressing") == ("False", "RolloutComplete")
    assert _cond(s, "Degraded") == ("False", "AsExpected")
    assert _cond(s, "Reconciling") == ("False", "RolloutComplete")
    assert _cond(s, "Stalled") == ("False", "AsExpected")
    assert s.last_stable_spec is None, "one ready observation is not stable yet"
    later = _status(
        Observation(generation=2, desired_replicas=3, statefulset=_sts(3, 3), applied=applied),
        previous=s,
        now=T0 + timedelta(seconds=STABLE_AFTER_S),
    )
    assert later.last_stable_spec == applied


def test_progress_phases():
    assert _status(Observation(1, 3, topology_known=False)).phase == "Pending"
    assert _status(Observation(1, 3)).phase == "Pending"  # no StatefulSet yet
    assert _status(Observation(1, 3, _sts(3, 0))).phase == "Pending"
    scaling = _status(Observation(1, 3, _sts(2, 2)))
    assert scaling.phase == "Scaling" and _cond(scaling, "Progressing") == ("True", "Scaling")
    rolling = _status(Observation(1, 3, _sts(3, 2, update="r2")))
    assert rolling.phase == "Upgrading" and _cond(rolling, "Ready") == ("False", "RollingUpdate")
    assert _status(Observation(1, 0, _sts(0, 0))).phase == "Paused"
    assert _status(Observation(1, 3, _sts(3, 3), reprocessing_active=True)).phase == "Reprocessing"
    assert _status(Observation(1, 3, _sts(3, 3, generation=2, observed=1))).phase == "Scaling"


def test_topic_mismatch_is_degraded():
    describe = TopologyDescription.model_validate(
        {"internal_topics": [{"name": "c-changelog", "type": "changelog", "partitions_from": ["in"]}]}
    )
    plan = plan_internal_topics(describe, "wc", {"in": 6, "wc-c-changelog": 4})
    s = _status(Observation(1, 3, _sts(3, 3), topic_plan=plan))
    assert s.phase == "Degraded"
    assert _cond(s, "Degraded") == ("True", "TopicPartitionMismatch")
    assert "wc-c-changelog has 4 partitions" in condition(s, "Degraded").message
    assert [(t.name, t.state) for t in s.internal_topics] == [("wc-c-changelog", "Mismatch")]
    assert _cond(s, "Ready")[0] == "False"


def test_problems_and_waiting_for_sources():
    s = _status(Observation(1, 3, problems=[Problem("DescribeFailed", "ImportError: no module x")]))
    assert s.phase == "Degraded" and _cond(s, "Degraded") == ("True", "DescribeFailed")
    describe = TopologyDescription.model_validate(
        {"internal_topics": [{"name": "c-changelog", "type": "changelog", "partitions_from": ["in"]}]}
    )
    waiting = _status(Observation(1, 3, topic_plan=plan_internal_topics(describe, "wc", {})))
    assert waiting.phase == "Pending" and _cond(waiting, "Progressing") == ("True", "WaitingForSourceTopics")


def test_capped_condition():
    s = _status(Observation(1, 6, _sts(6, 6), cap=cap_replicas(8, 6)))
    assert _cond(s, "ReplicasCapped") == ("True", "ExceedsPartitionCount")
    assert s.phase == "Running"


def test_transition_time_kept_while_status_unchanged():
    first = _status(Observation(1, 3, _sts(3, 1)))
    later = T0 + timedelta(minutes=5)
    second = _status(Observation(1, 3, _sts(3, 2)), previous=first, now=later)
    assert condition(second, "Ready").last_transition_time == T0  # still False
    assert condition(second, "Progressing").message == "2/3 pods ready"
    third = _status(Observation(1, 3, _sts(3, 3)), previous=second, now=later + timedelta(minutes=1))
    assert condition(third, "Ready").last_transition_time == later + timedelta(minutes=1)
    assert condition(third, "Degraded").last_transition_time == T0


def test_foreign_conditions_and_fields_are_kept():
    from kappaflow_operator.models import StreamAppStatus

    previous = StreamAppStatus.model_validate(
        {
            "conditions": [
                {"type": "Custom", "status": "True", "lastTransitionTime": "2025-01-01T00:00:00Z"}
            ],
            "consumerLag": 42,
            "autoscaler": {"desiredReplicas": 4},
        }
    )
    s = _status(Observation(1, 3, _sts(3, 3)), previous=previous)
    assert condition(s, "Custom") is not None
    assert s.consumer_lag == 42 and s.autoscaler.desired_replicas == 4
    wire = s.to_wire()
    assert wire["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"


def test_problems_are_stalled_for_kstatus():
    s = _status(Observation(3, 1, _sts(1, 1), problems=[Problem("SecretReferenceInvalid", "no key")]))
    stalled = condition(s, "Stalled")
    assert stalled is not None and (stalled.status, stalled.reason) == ("True", "SecretReferenceInvalid")
    assert stalled.observed_generation == 3 and stalled.message == "no key"
    rolling = _status(Observation(1, 3, _sts(3, 2, update="r2")))
    assert _cond(rolling, "Reconciling") == ("True", "RollingUpdate")
    assert _cond(_status(Observation(1, 3, _sts(3, 3), suspended=True)), "Ready") == ("False", "Suspended")


def test_claims_that_cannot_grow_are_a_condition_not_degraded():
    refused = Problem("VolumeExpansionNotAllowed", "StorageClass 'std' does not allow volume expansion")
    s = _status(Observation(1, 2, _sts(2, 2), volume_problems=[refused]))
    assert s.phase == "Running", "the app runs on as it is"
    assert _cond(s, "Degraded") == ("False", "AsExpected")
    volumes = condition(s, "VolumesMatchSpec")
    assert volumes is not None and (volumes.status, volumes.reason) == ("False", "VolumeExpansionNotAllowed")
    assert volumes.message == refused.message
    assert _cond(_status(Observation(1, 2, _sts(2, 2))), "VolumesMatchSpec") == ("True", "AsRequested")


def test_names_that_cannot_name_services():
    assert name_problem("word-count") is None
    assert "dots" in name_problem("a.b").message
    assert "52" in name_problem("w" * 53).message
    assert name_problem("9lives") is not None


def _pod(name, **container):
    return {"metadata": {"name": name}, "status": {"containerStatuses": [{"name": "app", **container}]}}


def test_pod_problems_name_the_pod_and_what_to_do():
    crash = _pod(
        "wc-1",
        restartCount=94,
        state={"waiting": {"reason": "CrashLoopBackOff"}},
        lastState={"terminated": {"exitCode": 2, "reason": "Error"}},
    )
    pull = _pod(
        "wc-0", image="r/x:nope", state={"waiting": {"reason": "ErrImagePull", "message": "not found"}}
    )
    fine = _pod("wc-2", ready=True, restartCount=0, state={"running": {}})
    found = {p.reason: p.message for p in pod_problems([crash, pull, fine])}
    assert set(found) == {"CrashLoopBackOff", "ImagePullFailed"}
    assert "wc-1" in found["CrashLoopBackOff"] and "94 times" in found["CrashLoopBackOff"]
    assert "kubectl logs wc-1 --previous" in found["CrashLoopBackOff"]
    assert "r/x:nope" in found["ImagePullFailed"] and "not found" in found["ImagePullFailed"]


def test_rollback_is_due_only_after_the_deadline_of_a_pod_change():
    base = {
        "image": "r/wc:1",
        "entryPoint": "m:f",
        "applicationId": "wc",
        "kafka": {"bootstrapServers": "k:9092"},
        "upgrade": {"progressDeadlineSeconds": 60},
    }
    stable = StableSpec(hash="h1", image="r/wc:1", application_id="wc", spec=base)
    broken = StreamAppSpec.model_validate({**base, "image": "r/wc:2"})
    stuck = _sts(1, 0, update="r2")
    kw = {"stable": stable, "statefulset": stuck, "desired": 1, "upgraded_at": T0}
    assert rollback_due(spec=broken, now=T0 + timedelta(seconds=59), **kw) is None
    reason = rollback_due(spec=broken, now=T0 + timedelta(seconds=61), **kw)
    assert reason is not None and "60s" in reason and "0/1 pods ready" in reason
    scaled = StreamAppSpec.model_validate({**base, "replicas": 3})
    assert rollback_due(spec=scaled, now=T0 + timedelta(seconds=600), **kw) is None, "a scale is no upgrade"
    done = {**kw, "statefulset": _sts(1, 1)}
    assert rollback_due(spec=broken, now=T0 + timedelta(seconds=600), **done) is None


def test_pods_refused_at_admission_count_only_while_missing_and_newer_than_every_pod():
    sts = {"metadata": {"name": "wc"}, "spec": {"replicas": 2}}
    refused = {
        "message": 'pods "wc-1" is forbidden: violates PodSecurity',
        "lastTimestamp": "2026-01-01T10:05:00Z",
    }
    older = {"message": "exceeded quota", "lastTimestamp": "2026-01-01T10:01:00Z"}
    pod = {"metadata": {"name": "wc-0", "creationTimestamp": "2026-01-01T10:02:00Z"}}
    found = creation_problem(sts, [pod], [older, refused])
    assert found == Problem("PodsRefused", f"StatefulSet wc cannot create its pods: {refused['message']}")
    assert creation_problem(sts, [pod], [older]) is None, "refused before a pod was created since: fixed"
    assert creation_problem(sts, [pod, pod], [refused]) is None, "no pod missing"
    assert creation_problem(sts, [], []) is None and creation_problem(None, [], [refused]) is None
