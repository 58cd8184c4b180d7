"""The reconcile pass's decision, pure: `decide(snapshot, now, tick) -> Decision`.

Why a pure function between `observe` and `act` (the shape of the Flink Kubernetes operator): every
branch of the reconciler (describe pending or failed, topics missing or mismatched, an invalid Secret,
refused pods, a rollback, the autoscaler, reprocess and reset steps, suspend) is a function of what was
observed, so it is unit-tested on plain snapshots; the only code that needs a control plane is the code
that reads (`observe`) and writes (`act`). A decision never sleeps: what must wait (a Job, a Spark run,
pods stopping, a StatefulSet being deleted) is a `Wait`, and the pass ends, releases the app's lock and
is called again after `Wait.delay`.

Imports only the pure modules (models, desired, topics, scaling, diff, status, volumes, movement, the
pure reprocess/reset steps, and decision.py's `Decision`/`Draft`); an import-linter contract keeps kopf,
kubernetes and confluent_kafka out. The finalizer's decision is cleanup.py's.

Where the operator keeps its memory, and why:
- the topology (`kappaflow describe` output) in a ConfigMap `<name>-topology` owned by the StreamApp,
  keyed by `describe_key(spec)`: a new image or entry point is described again, nothing else is;
- the last applied spec, topology hash and application id as annotations on the StatefulSet it applied,
  so the change classification compares against what really runs (not against kopf's diff base, which
  records what kopf saw, including specs that failed to apply);
- the autoscaler's memory in status.autoscaler, a reset's progress in status.reset (observed state,
  and users should see it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from kappaflow_contract.keys import key_problem

from . import departed, desired, movement, reprocess, reset, scaling, status, volumes
from .decision import Decision as Decision
from .decision import Draft
from .decision import state_claims as state_claims
from .desired.common import ACCEPTED_DESCRIBE_KEY, AppRef, spec_hash, topology_configmap_name
from .desired.statefulset import STATE_VOLUME
from .diff import Action, SpecDiff, classify
from .effects import (
    RETRY_S,
    Apply,
    CreateTopics,
    Delete,
    ExpandClaim,
    Patch,
    Wait,
)
from .models import Rollback, StableSpec, StreamAppSpec, StreamAppStatus, TopologyDescription, TopologyStatus
from .snapshot import APPLICATION_ID_ANNOTATION, JobFacts, Snapshot
from .topics import plan_internal_topics

APPLIED_SPEC_ANNOTATION = "kappaflow.io/applied-spec"
TOPOLOGY_ANNOTATION = "kappaflow.io/topology-hash"
UPGRADED_AT_ANNOTATION = "kappaflow.io/upgraded-at"


def app_ref(body: Mapping[str, Any]) -> AppRef:
    meta = body["metadata"]
    return AppRef(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"])


def application_id(spec: StreamAppSpec, prev: StreamAppStatus | None, snap: Snapshot) -> str:
    """The id the pods run (or will run) under: a completed reprocess's, else what the StatefulSet says,
    else what status last recorded, else the spec's."""
    return (
        reprocess.reprocessed_application_id(spec, prev)
        or snap.running_application_id
        or (prev.application_id if prev is not None else None)
        or spec.application_id
    )


def failed(snap: Snapshot, problem: status.Problem, now: datetime) -> Decision:
    """The status of a pass that failed carrying out its effects (an API refusal, Kafka unreachable)."""
    d = Draft(snap, now)
    prev = snap.status
    return d.done(prev, d.observation(prev.replicas or 0 if prev else 0, problems=[problem]))


def decide(snap: Snapshot, *, now: datetime, tick: bool = False) -> Decision:
    """Bring the cluster and Kafka to the spec: every pass decides everything (idempotent), in order of
    what blocks what: a valid spec and name, the Secrets, the topology, the topics, then the replicas,
    a rollback, the upgrade mode's steps, and the apply. `tick` marks a timer pass: only it measures the
    lag and lets the autoscaler decide (handler passes only apply)."""
    assert snap.app is not None
    d = Draft(snap, now)
    ref = app_ref(snap.app)
    prev = snap.status
    try:
        spec = snap.spec()
    except ValidationError as err:
        msg = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        problem = status.Problem("InvalidSpec", msg)
        d.problem(problem)
        return d.done(prev, d.observation(0, problems=[problem]))
    bad_name = status.name_problem(ref.name)
    if bad_name is not None:
        d.problem(bad_name)
        return d.done(prev, d.observation(0, problems=[bad_name]))
    if spec.suspend:
        return d.done(prev, d.observation(statefulset_replicas(snap), suspended=True))
    bad_config = config_problem(spec)
    if bad_config is not None:  # the pods would crash-loop on it: deploy nothing, keep what runs
        d.problem(bad_config)
        return d.done(prev, d.observation(statefulset_replicas(snap), problems=[bad_config]))
    if snap.kafka_access_error is not None:  # checked first: a describe Job could not start without them
        problem = status.Problem("SecretReferenceInvalid", snap.kafka_access_error)
        d.problem(problem)
        return d.done(prev, d.observation(spec.replicas, problems=[problem]))
    found = _topology(d, spec, ref)
    if found is None:
        obs = d.observation(spec.replicas, topology_known=False)
        return d.done(prev, obs, Wait("waiting for the describe Job", RETRY_S))
    if isinstance(found, status.Problem):
        d.problem(found)
        return d.done(prev, d.observation(spec.replicas, topology_known=False, problems=[found]))
    description = found

    app_id = application_id(spec, prev, snap)
    if snap.topics is None:
        problem = status.Problem("KafkaUnavailable", snap.kafka_error or "the topics were not listed")
        d.problem(problem)
        obs = d.observation(spec.replicas, problems=[problem])
        return d.done(prev, obs, Wait(problem.message, RETRY_S * 5))
    plan = plan_internal_topics(description, app_id, snap.topics)
    created: list[str] = []
    if plan.ready and plan.to_create:
        # While a reset's Job deletes the topics, creating one still being deleted fails: reset.step
        # creates them again until they stay.
        resetting = snap.reset_job is not None and snap.reset_job.job is not None
        d.effects.append(
            CreateTopics(plan.to_create, spec.kafka.replication_factor, tolerate_errors=resetting)
        )
        created = sorted(t.name for t in plan.to_create)
    d.extra["topology"] = TopologyStatus(
        hash=description.fingerprint(),
        described_image=spec.image,
        described_entry_point=spec.entry_point,
        source_topics=sorted(description.source_topics),
        max_parallelism=plan.max_parallelism,
    )
    if not plan.ready:
        obs = d.observation(spec.replicas, topic_plan=plan)
        if plan.mismatches:
            d.problem(status.Problem("TopicPartitionMismatch", "; ".join(m.message for m in plan.mismatches)))
        if plan.missing_sources and not plan.mismatches:
            return d.done(prev, obs, Wait("waiting for source topics", RETRY_S * 2))
        return d.done(prev, obs)

    prev = _measure(d, spec, prev, tick, plan.max_parallelism)
    cap = scaling.effective_replicas(spec, prev, plan.max_parallelism)
    ignored = scaling.ignored_scale_request(spec, cap.replicas)
    if ignored is not None:
        d.event("Warning", "ScaleIgnored", ignored)
    current = statefulset_replicas(snap)
    moves = movement.plan(
        spec,
        prev,
        name=ref.name,
        pods=snap.pod_tasks,
        statefulset=snap.statefulset,
        current=current,
        target=cap.replicas,
        now=now,
        retry_s=RETRY_S * 2,
    )
    if snap.pod_tasks is not None or moves.step.held:
        d.extra["task_movement"] = moves.block
    if moves.step.held:  # the StatefulSet keeps its pods this pass (movement.py says why)
        cap = replace(cap, replicas=moves.step.replicas)
        wait_s = spec.scale_in.standby_wait_seconds
        d.event(
            "Normal",
            "ScaleInHeld",
            f"scale-in {current} -> {moves.step.target} waits up to {wait_s}s "
            "for caught-up standbys of the removed pods' tasks (status.taskMovement)",
        )
    elif moves.step.message:
        d.event("Warning", "ScaleInProceeds", moves.step.message)
    common: dict[str, Any] = {"topic_plan": plan, "cap": cap, "scale_ignored": ignored}
    common["moving"] = moves.progressing

    rolled = _rollback(d, spec, prev, cap.replicas)
    if rolled is not None:
        stable_spec, stable, rollback = rolled
        applied = _apply(d, stable_spec, ref, description, cap, stable.application_id, prev)
        problem = status.Problem(
            "UpgradeRolledBack",
            f"{rollback.reason}; rolled back to the last stable spec (image {stable.image}); fix the spec "
            "and apply it again",
        )
        problems = [problem, *([applied.problem] if applied.problem is not None else [])]
        obs = d.observation(
            cap.replicas,
            problems=problems,
            resetting=applied.resetting,
            applying=applied.applying,
            **common,
        )
        return d.done(prev, obs, applied.wait)
    if spec.upgrade.mode == "reprocess":
        change = pending_change(spec, description, snap.statefulset)
        outcome = reprocess.step(snap, spec, ref, description, change.action, app_id, prev, now)
        d.effects += outcome.effects
        d.extra["reprocessing"] = outcome.run
        if outcome.problem is not None or outcome.waiting:
            # The running version stays as it is while Spark works, and when Spark failed.
            problems = [outcome.problem] if outcome.problem is not None else []
            for problem in problems:
                d.problem(problem)
            obs = d.observation(
                cap.replicas, problems=problems, reprocessing_active=bool(outcome.waiting), **common
            )
            wait = Wait(f"reprocessing: {outcome.waiting}", RETRY_S) if outcome.waiting else None
            return d.done(prev, obs, wait)
        app_id = outcome.application_id
    applied = _apply(d, spec, ref, description, cap, app_id, prev)
    if applied.problem is not None:
        d.problem(applied.problem)
        return d.done(prev, d.observation(cap.replicas, problems=[applied.problem], **common))
    if applied.wait is not None:
        return d.done(prev, d.observation(cap.replicas, resetting=applied.resetting, **common), applied.wait)
    obs = d.observation(
        cap.replicas,
        applying=applied.applying,
        created_topics=frozenset(created),
        applied=StableSpec(
            hash=spec_hash(spec), image=spec.image, application_id=app_id, spec=spec.to_wire()
        ),
        **common,
    )
    if moves.step.held:
        return d.done(prev, obs, Wait(moves.step.message, moves.step.retry_s))
    return d.done(prev, obs, _departures(d, ref.name, app_id, cap.replicas))


def _departures(d: Draft, name: str, group: str, replicas: int) -> Wait | None:
    """Take the static members of pods a scale-in removed out of the group (departed.py says why); wait
    for removed pods that are still stopping. `replicas` is what this pass applies, so the pass that
    scales in already waits for the pods it stops."""
    if d.snap.static_members_error is not None:
        d.event("Warning", "GroupUnavailable", d.snap.static_members_error)
    if d.snap.static_members is None:
        return None
    pods = {str(p["metadata"]["name"]) for p in d.snap.pods}
    found = departed.departures(name, replicas, pods, d.snap.static_members)
    d.effects += found.effects(group)
    return found.wait(group)


def config_problem(spec: StreamAppSpec) -> status.Problem | None:
    """spec.config keys the runtime would refuse at start-up (a typo, with the key it most likely means;
    a Kafka Streams key kappaflow lacks; an unsupported value), by the runtime's own rule
    (`kappaflow_contract.keys.key_problem`). The API server accepts any key, so without this the pods
    would crash-loop on it; keys the operator owns are refused by the CRD already."""
    problems = [p for k, v in sorted(spec.config.items()) if (p := key_problem(k, v)) is not None]
    if not problems:
        return None
    return status.Problem("InvalidConfig", "spec.config: " + "; ".join(problems))


# ---- topology ------------------------------------------------------------------------------------------
def _topology(d: Draft, spec: StreamAppSpec, ref: AppRef) -> TopologyDescription | status.Problem | None:
    """The topology for this image + entry point, as the describe Job published it into the topology
    ConfigMap (`desired.describe`); starts that Job when needed; None while it runs."""
    found = _published(d, spec, ref)
    if found is not None:
        return found
    job = desired.build_describe_job(spec, ref)
    facts = d.snap.describe_job or JobFacts(job["metadata"]["name"])
    if facts.job is not None and desired.job_outdated(facts.job, job):
        # Its pod template is immutable: a spec fix (securityContext, pull secrets) needs a new Job,
        # created by the next pass once this one is gone.
        d.effects.append(Delete("batch/v1", "Job", facts.name))
        d.event("Normal", "DescribeJobReplaced", f"Job {facts.name} was built from an older pod template")
        return None
    if facts.job is None:
        # the Job's service account, Role and ConfigMap, then the Job
        d.effects += [Apply(obj) for obj in desired.describe_access(spec, ref)]
        d.effects.append(Apply(job))
        d.event(
            "Normal", "DescribingTopology", f"started Job {facts.name} for image {spec.image}", dedupe=False
        )
        return None
    outcome = facts.outcome
    if outcome is None:
        return status.job_problem(facts)
    if outcome.exit_code != 0:
        return status.Problem(
            "DescribeFailed", f"Job {facts.name} exited {outcome.exit_code}: {outcome.message[-512:]}"
        )
    cm_name = topology_configmap_name(ref.name)
    return status.Problem(
        "DescribeFailed", f"Job {facts.name} succeeded but published no topology to ConfigMap {cm_name}"
    )


def _published(d: Draft, spec: StreamAppSpec, ref: AppRef) -> TopologyDescription | status.Problem | None:
    """The topology ConfigMap's description; the first time one is accepted, say so (event + mark)."""
    name = topology_configmap_name(ref.name)
    cm = d.snap.topology_configmap
    try:
        description = desired.published_topology(spec, dict(cm) if cm is not None else None)
    except (ValueError, ValidationError) as err:
        return status.Problem("DescribeFailed", f"ConfigMap {name} holds no valid topology: {err}")
    key = desired.describe_key(spec)
    if (
        description is None
        or ((cm or {}).get("metadata", {}).get("annotations") or {}).get(ACCEPTED_DESCRIBE_KEY) == key
    ):
        return description
    d.effects.append(
        Patch("v1", "ConfigMap", name, {"metadata": {"annotations": {ACCEPTED_DESCRIBE_KEY: key}}})
    )
    d.event(
        "Normal",
        "TopologyDescribed",
        f"{len(description.sub_topologies)} sub-topologies, internal topics: "
        + (", ".join(t.name for t in description.internal_topics) or "none"),
        dedupe=False,
    )
    return description


# ---- replicas ------------------------------------------------------------------------------------------
def statefulset_replicas(snap: Snapshot) -> int:
    """Replicas the StatefulSet is set to now (a suspended app is left exactly as it is)."""
    return int(((snap.statefulset or {}).get("spec") or {}).get("replicas") or 0)


def _measure(
    d: Draft, spec: StreamAppSpec, prev: StreamAppStatus | None, tick: bool, max_parallelism: int | None
) -> StreamAppStatus | None:
    """The lag on every timer pass (the LAG column, with or without autoscaling) and the autoscaler's tick.

    Returns the status to decide replicas from: `prev` with the autoscaler's new memory, which the
    pass's single status write then records.
    """
    if not tick:
        return prev
    if d.snap.lag_error is not None:
        d.event("Warning", "LagUnavailable", d.snap.lag_error)
        return prev
    lag = d.snap.lag
    if lag is None:
        return prev
    d.extra["consumer_lag"] = lag
    found = movement.warmups(d.snap.pod_tasks or ())
    ticked = scaling.tick(
        spec,
        prev,
        lag=lag,
        max_parallelism=max_parallelism,
        now=d.now,
        warming_up=found.count,
        warming_on=", ".join(found.pods),
        warmup_max_lag=found.max_lag,
    )
    if ticked is None:
        return prev
    d.extra["autoscaler"] = ticked.memory
    if ticked.scaled is not None:
        d.event("Normal", "Autoscaled", ticked.scaled)
    base = prev or StreamAppStatus()
    return base.model_copy(update={"autoscaler": ticked.memory, "consumer_lag": lag})


# ---- rollback ------------------------------------------------------------------------------------------
def _upgraded_at(sts: Mapping[str, Any] | None) -> datetime | None:
    value = ((sts or {}).get("metadata", {}).get("annotations") or {}).get(UPGRADED_AT_ANNOTATION)
    try:
        return datetime.fromisoformat(value) if value else None
    except ValueError:
        return None


def _rollback(
    d: Draft, spec: StreamAppSpec, prev: StreamAppStatus | None, desired_replicas: int
) -> tuple[StreamAppSpec, StableSpec, Rollback] | None:
    """The stable spec to run instead of `spec` when `spec` is an upgrade that missed its deadline.

    The decision is `status.rollback_due`; once taken it is kept in status.rollback for as long as the
    spec stays the failed one, so later passes do not try the failed upgrade again. A new spec clears it.
    """
    digest = spec_hash(spec)
    stable = prev.last_stable_spec if prev is not None else None
    current = prev.rollback if prev is not None else None
    if current is not None and current.failed_spec_hash != digest:
        d.extra["rollback"] = None
        current = None
    if stable is None or stable.spec is None:
        return None
    if current is None:
        sts = d.snap.statefulset
        reason = status.rollback_due(
            spec=spec,
            stable=stable,
            upgraded_at=_upgraded_at(sts),
            now=d.now,
            statefulset=sts,
            desired=desired_replicas,
        )
        if reason is None:
            return None
        current = Rollback(failed_spec_hash=digest, to_spec_hash=stable.hash, time=d.now, reason=reason)
        d.event("Warning", "UpgradeRolledBack", f"{reason}; rolling back to image {stable.image}")
    d.extra["rollback"] = current
    return StreamAppSpec.model_validate(stable.spec), stable, current


# ---- apply ---------------------------------------------------------------------------------------------
def applied_spec(sts: Mapping[str, Any] | None) -> StreamAppSpec | None:
    """The spec last applied to the StatefulSet (its annotation), None when absent or unreadable."""
    annotations = (sts or {}).get("metadata", {}).get("annotations") or {}
    if APPLIED_SPEC_ANNOTATION not in annotations:
        return None
    try:
        return StreamAppSpec.model_validate(json.loads(annotations[APPLIED_SPEC_ANNOTATION]))
    except (ValueError, ValidationError):
        return None


def pending_change(
    spec: StreamAppSpec, description: TopologyDescription, sts: Mapping[str, Any] | None
) -> SpecDiff:
    """How `spec` differs from what the StatefulSet runs (compared with its annotations)."""
    annotations = (sts or {}).get("metadata", {}).get("annotations") or {}
    return classify(
        applied_spec(sts),
        spec,
        old_topology=annotations.get(TOPOLOGY_ANNOTATION),
        new_topology=description.fingerprint(),
    )


@dataclass(frozen=True)
class _Applied:
    problem: status.Problem | None = None
    """An upgrade step failed."""
    wait: Wait | None = None
    resetting: str = ""
    """The reset step under way, when `wait` is one."""
    applying: status.Applying = ""
    """What was applied to an existing StatefulSet (status.Observation.applying)."""


def _apply(
    d: Draft,
    spec: StreamAppSpec,
    ref: AppRef,
    description: TopologyDescription,
    cap: scaling.CapResult,
    app_id: str,
    prev: StreamAppStatus | None,
) -> _Applied:
    """The desired state for `spec`, or the upgrade step that must come first."""
    sts = d.snap.statefulset
    old_spec = applied_spec(sts)
    fingerprint = description.fingerprint()
    change = pending_change(spec, description, sts)
    # Claims first, then the template (volumes.py says why both); a claim that cannot grow stops nothing.
    plan = volumes.plan_expansion(
        spec.state.size, state_claims(ref.name, d.snap.claims), d.snap.storage_classes
    )
    for problem in plan.problems:
        d.problem(problem)
        d.volume_problems.append(problem)
    d.effects += [ExpandClaim(name, plan.size) for name in plan.expand]
    if change.recreate_statefulset and sts is not None:
        # volumeClaimTemplates are immutable: delete the StatefulSet with orphan propagation (pods and
        # claims stay) and create it again once it is gone; the new one adopts the pods, none restarts.
        if not (sts.get("metadata") or {}).get("deletionTimestamp"):
            d.effects.append(Delete("apps/v1", "StatefulSet", ref.name, propagation="Orphan"))
            d.event(
                "Normal",
                "RecreatingStatefulSet",
                "state volume settings changed: " + ", ".join(change.changed),
            )
        return _Applied(wait=Wait("waiting for the StatefulSet to be deleted (orphan)", RETRY_S))
    claims = state_claims(ref.name, d.snap.claims)
    for claim in volumes.unbound_claims_to_replace(
        spec.state.storage_class_name, claims, d.snap.storage_classes
    ):
        # The StatefulSet makes the claim again, from its current template, with the pod.
        pod = claim.removeprefix(f"{STATE_VOLUME}-")
        d.effects += [Delete("v1", "PersistentVolumeClaim", claim), Delete("v1", "Pod", pod)]
        d.event(
            "Normal",
            "ReplacingUnboundClaim",
            f"claim {claim} never bound and asks for another StorageClass than state.storageClassName: "
            f"deleted with pod {pod}, which the StatefulSet recreates",
        )
    if change.action == Action.RESET and sts is not None:
        step = reset.step(d.snap, spec, ref, sts, app_id, description, prev, d.now)
        d.effects += step.effects
        d.extra["reset"] = step.memory
        if step.problem is not None:
            return _Applied(problem=step.problem)
        if step.waiting:
            return _Applied(
                wait=Wait(step.waiting, step.delay), resetting=step.memory.step if step.memory else ""
            )
    else:
        if prev is not None and prev.reset is not None:
            d.extra["reset"] = None
        if change.action == Action.REPROCESS:
            # decide() got here only once the SparkApplication COMPLETED: app_id is the rebuilt one.
            d.event(
                "Normal", "RollingOntoReprocessedState", f"rolling the pods onto application id '{app_id}'"
            )
    # When the pods last got a new template: the start of the progress deadline (a scale is no upgrade).
    before = ((sts or {}).get("metadata", {}).get("annotations") or {}).get(UPGRADED_AT_ANNOTATION)
    upgraded = change.action in (Action.ROLL, Action.REPROCESS, Action.RESET) or not before
    upgraded_at = d.now.isoformat() if upgraded else str(before)
    for obj in desired.desired_resources(spec, ref, desired.Facts(cap.replicas, app_id)):
        if obj["kind"] == "StatefulSet":
            obj["metadata"].setdefault("annotations", {}).update(
                {
                    APPLIED_SPEC_ANNOTATION: json.dumps(spec.to_wire(), sort_keys=True),
                    TOPOLOGY_ANNOTATION: fingerprint,
                    APPLICATION_ID_ANNOTATION: app_id,
                    UPGRADED_AT_ANNOTATION: upgraded_at,
                }
            )
        d.effects.append(Apply(obj))
    d.effects += [
        Delete(v, kind, name, announce=True) for v, kind, name in desired.obsolete_resources(spec, ref)
    ]
    applying: status.Applying = ""
    if sts is not None and change.action in (Action.ROLL, Action.REPROCESS, Action.RESET):
        applying = "roll"
    elif sts is not None and statefulset_replicas(d.snap) != cap.replicas:
        applying = "scale"  # spec.replicas or the autoscaler
    if change.action == Action.SCALE:
        d.event("Normal", "Scaled", f"StatefulSet {ref.name} runs {cap.replicas} replicas")
    elif change.action != Action.NONE:
        verb = "Created" if old_spec is None else "RollingUpdate"
        d.event("Normal", verb, f"applied StatefulSet {ref.name} ({', '.join(change.changed)[:400]})")
    old_cap = status.condition(prev, status.REPLICAS_CAPPED) if prev is not None else None
    if cap.reason and (old_cap is None or old_cap.message != cap.reason):
        d.event("Warning", "ReplicasCapped", cap.reason)
    return _Applied(applying=applying)
