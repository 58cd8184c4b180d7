"""Orchestration: one reconcile pass = observe once, decide with the pure modules (models, desired, topics,
scaling, diff, status), act (k8s.py, kafka.py), and write status once. main.py's handlers only delegate.

One writer, fresh state: the update handler and the periodic timer both call `run_pass`, which takes the
per-app lock and only then reads the StreamApp (`observe`), so a pass never acts on a copy older than
what the previous pass wrote. The application id the pods run under is read from the StatefulSet. The
autoscaler's decision is part of the pass and lands in the same single status write.

Where the operator keeps its memory, and why:
- the topology (`kappaflow describe` output) in a ConfigMap `<name>-topology` owned by the StreamApp,
  keyed by `describe_key(spec)`: a new image or entry point is described again, nothing else is;
- the last applied spec, topology hash and application id as annotations on the StatefulSet it applied,
  so the change classification compares against what really runs (not against kopf's diff base, which
  records what kopf saw, including specs that failed to apply);
- the autoscaler's memory in status.autoscaler (it is observed state, and users should see it).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import kopf
from pydantic import ValidationError

from . import desired, expansion, metrics, reprocess, reset, scaling, status
from .admins import KafkaAdmins, SecretReferenceError
from .context import RETRY_S, Context, KafkaFactory
from .desired.common import (
    ACCEPTED_DESCRIBE_KEY,
    TOPOLOGY_KEY,
    AppRef,
    spec_hash,
    topology_configmap_name,
)
from .diff import Action, SpecDiff, classify
from .k8s import Kube, KubeError
from .kafka import KafkaAdmin, KafkaError
from .models import Rollback, StableSpec, StreamAppSpec, StreamAppStatus, TopologyDescription, TopologyStatus
from .observe import APPLICATION_ID_ANNOTATION, Snapshot, job_problem, observe
from .topics import internal_topic_names, plan_internal_topics

APPLIED_SPEC_ANNOTATION = "kappaflow.io/applied-spec"
TOPOLOGY_ANNOTATION = "kappaflow.io/topology-hash"
UPGRADED_AT_ANNOTATION = "kappaflow.io/upgraded-at"
DESCRIBE_KEY = ACCEPTED_DESCRIBE_KEY
TOPOLOGY_FILE = TOPOLOGY_KEY
#: The same event (app, type, reason, message) is posted at most once in this many seconds.


def _ref(body: Mapping[str, Any]) -> AppRef:
    meta = body["metadata"]
    return AppRef(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"])


def _status_of(body: Mapping[str, Any]) -> StreamAppStatus | None:
    raw = {k: v for k, v in (body.get("status") or {}).items() if k != "kopf"}
    try:
        return StreamAppStatus.model_validate(raw) if raw else None
    except ValidationError:  # written by an older/newer operator: start afresh rather than fail
        return None


def default_kafka_factory(kube: Kube) -> KafkaFactory:
    """Admin clients per connection and app (see admins.py), credentials from the referenced Secrets."""
    return KafkaAdmins(kube)


# ---- topology ------------------------------------------------------------------------------------------
def ensure_topology(
    ctx: Context, spec: StreamAppSpec, ref: AppRef, body: Mapping[str, Any]
) -> TopologyDescription | status.Problem | None:
    """The topology for this image + entry point, as the describe Job published it into the topology
    ConfigMap (`desired.describe`); starts that Job when needed; None while it runs."""
    found = _published_topology(ctx, spec, ref, body)
    if found is not None:
        return found
    job = desired.build_describe_job(spec, ref)
    job_name = job["metadata"]["name"]
    live = ctx.kube.get("batch/v1", "Job", ref.namespace, job_name)
    if live is not None and desired.job_outdated(live, job):
        # Its pod template is immutable: a spec fix (securityContext, pull secrets) needs a new Job,
        # created by the next pass once this one is gone.
        ctx.kube.delete("batch/v1", "Job", ref.namespace, job_name)
        ctx.kube.event(
            body, "Normal", "DescribeJobReplaced", f"Job {job_name} was built from an older pod template"
        )
        return None
    if live is None:
        for obj in desired.describe_access(spec, ref):  # the Job's service account, Role, ConfigMap
            ctx.kube.apply(obj)
        ctx.kube.apply(job)
        ctx.kube.event(body, "Normal", "DescribingTopology", f"started Job {job_name} for image {spec.image}")
    outcome = ctx.kube.job_outcome(ref.namespace, job_name)
    if outcome is None:
        return job_problem(ctx.kube, ref.namespace, job_name)
    if outcome.exit_code != 0:
        return status.Problem(
            "DescribeFailed", f"Job {job_name} exited {outcome.exit_code}: {outcome.message[-512:]}"
        )
    # The Job published before it exited: read again.
    found = _published_topology(ctx, spec, ref, body)
    if found is None:
        cm_name = topology_configmap_name(ref.name)
        return status.Problem(
            "DescribeFailed", f"Job {job_name} succeeded but published no topology to ConfigMap {cm_name}"
        )
    return found


def _published_topology(
    ctx: Context, spec: StreamAppSpec, ref: AppRef, body: Mapping[str, Any]
) -> TopologyDescription | status.Problem | None:
    """Read the topology ConfigMap; the first time a description is accepted, say so (event + mark)."""
    name = topology_configmap_name(ref.name)
    cm = ctx.kube.get("v1", "ConfigMap", ref.namespace, name)
    try:
        description = desired.published_topology(spec, cm)
    except (ValueError, ValidationError) as err:
        return status.Problem("DescribeFailed", f"ConfigMap {name} holds no valid topology: {err}")
    key = desired.describe_key(spec)
    if (
        description is None
        or ((cm or {}).get("metadata", {}).get("annotations") or {}).get(DESCRIBE_KEY) == key
    ):
        return description
    ctx.kube.patch("v1", "ConfigMap", ref.namespace, name, {"metadata": {"annotations": {DESCRIBE_KEY: key}}})
    ctx.kube.event(
        body,
        "Normal",
        "TopologyDescribed",
        f"{len(description.sub_topologies)} sub-topologies, internal topics: "
        + (", ".join(t.name for t in description.internal_topics) or "none"),
    )
    return description


# ---- the pass ------------------------------------------------------------------------------------------
@dataclass
class Pass:
    """One pass over one StreamApp: the snapshot it decides from and what it will write to status."""

    ctx: Context
    snap: Snapshot
    now: datetime
    tick: bool
    """A timer pass: the autoscaler may decide (handler passes only apply)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Status fields beyond compute_status's (topology, reprocessing, autoscaler, consumerLag)."""
    volume_problems: list[status.Problem] = field(default_factory=list)
    """Why claims do not have state.size; every write of this pass reports them (not as Degraded)."""

    @property
    def body(self) -> Mapping[str, Any]:
        assert self.snap.app is not None
        return self.snap.app

    @property
    def generation(self) -> int:
        return int(self.body["metadata"].get("generation") or 0)

    def problem(self, p: status.Problem) -> None:
        """Warn with an event (deduplicated by the Context: a pass every few seconds repeats none)."""
        self.ctx.event(self.body, "Warning", p.reason, p.message)

    def volume_problem(self, p: status.Problem) -> None:
        """Warned now, and in the VolumesMatchSpec condition of every status this pass writes."""
        self.problem(p)
        self.volume_problems.append(p)

    def write(self, prev: StreamAppStatus | None, obs: status.Observation) -> StreamAppStatus:
        """The pass's single status write."""
        meta = self.body["metadata"]
        new = status.compute_status(prev, obs, name=meta["name"], now=self.now)
        if self.extra:
            new = new.model_copy(update=self.extra)
        wire = new.to_wire()
        for key, value in self.extra.items():
            if value is None:  # a merge patch removes a field only when told so
                wire[StreamAppStatus.model_fields[key].alias or key] = None
        self.ctx.kube.patch_status(meta["namespace"], meta["name"], wire)
        return new

    def observation(self, replicas: int, **kw: Any) -> status.Observation:
        problems = [*kw.pop("problems", []), *status.pod_problems(self.snap.pods)]
        refused = status.creation_problem(self.snap.statefulset, self.snap.pods, self.snap.refusals)
        problems += [refused] if refused is not None else []
        kw["volume_problems"] = self.volume_problems
        return status.Observation(self.generation, replicas, self.snap.statefulset, problems=problems, **kw)


def run_pass(ctx: Context, namespace: str, name: str, *, now: datetime, tick: bool = False) -> None:
    """Observe, decide, act, write status: serialized per app, from state read under the lock."""
    with ctx.lock(namespace, name), metrics.timed() as outcome:
        snap = observe(ctx.kube, namespace, name)
        if snap.app is None or snap.deleting:
            outcome.set("skipped")
            return
        p = Pass(ctx, snap, now, tick)
        try:
            reconcile(p)
        except kopf.TemporaryError:
            outcome.set("waiting")
            raise
        except KubeError as err:
            # Any API refusal (a name the apiserver rejects, RBAC, admission) ends in status.
            outcome.set("error")
            problem = status.Problem("KubernetesApiError", str(err)[:2048])
            p.problem(problem)
            prev = _status_of(snap.app)
            p.write(prev, p.observation(prev.replicas or 0 if prev else 0, problems=[problem]))
            raise kopf.TemporaryError(str(err)[:512], delay=RETRY_S * 5) from err


def on_change(ctx: Context, body: Mapping[str, Any], *, now: datetime) -> None:
    """Create/update/resume: a full pass (the body only names the app; the pass reads it afresh)."""
    meta = body["metadata"]
    run_pass(ctx, meta["namespace"], meta["name"], now=now)


def resync(ctx: Context, body: Mapping[str, Any], *, now: datetime) -> None:
    """The periodic pass: refreshes status from the pods and Kafka, and lets the autoscaler decide."""
    meta = body["metadata"]
    if meta.get("deletionTimestamp"):
        return
    run_pass(ctx, meta["namespace"], meta["name"], now=now, tick=True)


def _admin(p: Pass, spec: StreamAppSpec, ref: AppRef) -> KafkaAdmin:
    factory = p.ctx.kafka_factory
    if isinstance(factory, KafkaAdmins):
        return factory(spec, ref.namespace, owner=f"{ref.namespace}/{ref.name}")
    return factory(spec, ref.namespace)


def reconcile(p: Pass) -> StreamAppStatus:
    """Bring the cluster and Kafka to the spec, then write status. Idempotent: every pass applies all.

    Raises kopf.TemporaryError while waiting on something (the describe Job, source topics), so kopf
    calls again after a short delay.
    """
    ctx, body, snap = p.ctx, p.body, p.snap
    ref = _ref(body)
    prev = _status_of(body)
    try:
        spec = StreamAppSpec.model_validate(body.get("spec") or {})
    except ValidationError as err:
        msg = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        problem = status.Problem("InvalidSpec", msg)
        p.problem(problem)
        return p.write(prev, p.observation(0, problems=[problem]))
    bad_name = status.name_problem(ref.name)
    if bad_name is not None:
        p.problem(bad_name)
        return p.write(prev, p.observation(0, problems=[bad_name]))
    if spec.suspend:
        return p.write(prev, p.observation(snap_replicas(snap), suspended=True))

    try:  # the Secrets the spec names are checked first: a describe Job could not start without them
        admin = _admin(p, spec, ref)
    except SecretReferenceError as err:
        problem = status.Problem("SecretReferenceInvalid", str(err))
        p.problem(problem)
        return p.write(prev, p.observation(spec.replicas, problems=[problem]))
    found = ensure_topology(ctx, spec, ref, body)
    if found is None:
        p.write(prev, p.observation(spec.replicas, topology_known=False))
        raise kopf.TemporaryError("waiting for the describe Job", delay=RETRY_S)
    if isinstance(found, status.Problem):
        p.problem(found)
        return p.write(prev, p.observation(spec.replicas, topology_known=False, problems=[found]))
    description = found

    app_id = (
        reprocess.reprocessed_application_id(spec, prev)
        or snap.running_application_id
        or (prev.application_id if prev is not None else None)
        or spec.application_id
    )
    try:
        plan = plan_internal_topics(description, app_id, admin.topic_partitions())
        created: list[str] = []
        if plan.ready and plan.to_create:
            created = admin.create_topics(plan.to_create, spec.kafka.replication_factor)
            ctx.event(body, "Normal", "TopicsCreated", "created " + ", ".join(created))
    except KafkaError as err:
        problem = status.Problem("KafkaUnavailable", str(err))
        p.problem(problem)
        p.write(prev, p.observation(spec.replicas, problems=[problem]))
        raise kopf.TemporaryError(str(err), delay=RETRY_S * 5) from err
    p.extra["topology"] = TopologyStatus(
        hash=description.fingerprint(),
        described_image=spec.image,
        described_entry_point=spec.entry_point,
        source_topics=sorted(description.source_topics),
        max_parallelism=plan.max_parallelism,
    )
    if not plan.ready:
        obs = p.observation(spec.replicas, topic_plan=plan)
        if plan.mismatches:
            mismatch = "; ".join(m.message for m in plan.mismatches)
            p.problem(status.Problem("TopicPartitionMismatch", mismatch))
        written = p.write(prev, obs)
        if plan.missing_sources and not plan.mismatches:
            raise kopf.TemporaryError("waiting for source topics", delay=RETRY_S * 2)
        return written

    prev = _measure(p, spec, prev, admin, app_id, sorted(description.source_topics), plan.max_parallelism)
    cap = scaling.effective_replicas(spec, prev, plan.max_parallelism)
    ignored = scaling.ignored_scale_request(spec, cap.replicas)
    if ignored is not None:
        ctx.event(body, "Warning", "ScaleIgnored", ignored)

    def recreate_topics() -> None:
        """After `kappaflow reset` deleted the internal topics, create them again.

        Topic deletion is asynchronous: a topic can still be listed (or refuse creation) for a while,
        so create whatever is missing until every topic has been seen present for a few seconds.
        """
        made: list[str] = []
        stable_since: float | None = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            fresh = plan_internal_topics(description, app_id, admin.topic_partitions())
            if fresh.to_create:
                stable_since = None
                with contextlib.suppress(KafkaError):  # still being deleted: try again
                    made += admin.create_topics(fresh.to_create, spec.kafka.replication_factor)
            elif stable_since is None:
                stable_since = time.monotonic()
            elif time.monotonic() - stable_since >= 3:
                break
            time.sleep(0.5)
        ctx.event(body, "Normal", "TopicsCreated", "created " + (", ".join(sorted(set(made))) or "no topics"))

    common: dict[str, Any] = {"topic_plan": plan, "cap": cap, "scale_ignored": ignored}
    rolled = _rollback(p, spec, prev, cap.replicas)
    if rolled is not None:
        stable_spec, stable, rollback = rolled
        failure = _apply(p, stable_spec, ref, description, cap, stable.application_id, prev, recreate_topics)
        problem = status.Problem(
            "UpgradeRolledBack",
            f"{rollback.reason}; rolled back to the last stable spec (image {stable.image}); fix the spec "
            "and apply it again",
        )
        problems = [problem, *([failure] if failure is not None else [])]
        return p.write(prev, p.observation(cap.replicas, problems=problems, **common))
    if spec.upgrade.mode == "reprocess":
        change = _pending_change(spec, description, snap.statefulset)
        outcome = reprocess.step(ctx, body, spec, ref, description, change.action, app_id, prev, p.now)
        p.extra["reprocessing"] = outcome.run
        if outcome.problem is not None or outcome.waiting:
            # The running version stays as it is while Spark works, and when Spark failed.
            problems = [outcome.problem] if outcome.problem is not None else []
            for problem in problems:
                p.problem(problem)
            obs = p.observation(
                cap.replicas, problems=problems, reprocessing_active=bool(outcome.waiting), **common
            )
            written = p.write(prev, obs)
            if outcome.waiting:
                raise reprocess.wait(outcome.waiting)
            return written
        app_id = outcome.application_id
    failure = _apply(p, spec, ref, description, cap, app_id, prev, recreate_topics)
    if failure is not None:
        p.problem(failure)
        return p.write(prev, p.observation(cap.replicas, problems=[failure], **common))
    obs = p.observation(
        cap.replicas,
        created_topics=frozenset(created),
        applied=StableSpec(
            hash=spec_hash(spec), image=spec.image, application_id=app_id, spec=spec.to_wire()
        ),
        **common,
    )
    return p.write(prev, obs)


def _upgraded_at(sts: Mapping[str, Any] | None) -> datetime | None:
    value = ((sts or {}).get("metadata", {}).get("annotations") or {}).get(UPGRADED_AT_ANNOTATION)
    try:
        return datetime.fromisoformat(value) if value else None
    except ValueError:
        return None


def _rollback(
    p: Pass, spec: StreamAppSpec, prev: StreamAppStatus | None, desired_replicas: int
) -> tuple[StreamAppSpec, StableSpec, Rollback] | None:
    """The stable spec to run instead of `spec` when `spec` is an upgrade that missed its deadline.

    The decision is `status.rollback_due`; once taken it is kept in status.rollback for as long as the
    spec stays the failed one, so later passes do not try the failed upgrade again. A new spec clears it.
    """
    digest = spec_hash(spec)
    stable = prev.last_stable_spec if prev is not None else None
    current = prev.rollback if prev is not None else None
    if current is not None and current.failed_spec_hash != digest:
        p.extra["rollback"] = None
        current = None
    if stable is None or stable.spec is None:
        return None
    if current is None:
        sts = p.snap.statefulset
        reason = status.rollback_due(
            spec=spec,
            stable=stable,
            upgraded_at=_upgraded_at(sts),
            now=p.now,
            statefulset=sts,
            desired=desired_replicas,
        )
        if reason is None:
            return None
        current = Rollback(failed_spec_hash=digest, to_spec_hash=stable.hash, time=p.now, reason=reason)
        p.ctx.event(p.body, "Warning", "UpgradeRolledBack", f"{reason}; rolling back to image {stable.image}")
    p.extra["rollback"] = current
    return StreamAppSpec.model_validate(stable.spec), stable, current


def snap_replicas(snap: Snapshot) -> int:
    """Replicas the StatefulSet is set to now (a suspended app is left exactly as it is)."""
    return int(((snap.statefulset or {}).get("spec") or {}).get("replicas") or 0)


def _measure(
    p: Pass,
    spec: StreamAppSpec,
    prev: StreamAppStatus | None,
    admin: KafkaAdmin,
    app_id: str,
    sources: list[str],
    max_parallelism: int | None,
) -> StreamAppStatus | None:
    """Lag on every timer pass (the LAG column, with or without autoscaling) and the autoscaler's tick.

    Returns the status to decide replicas from: `prev` with the autoscaler's new memory, which the
    pass's single status write then records.
    """
    if not p.tick:
        return prev
    try:
        lag = admin.consumer_lag(app_id, sources)
    except KafkaError as err:
        p.ctx.event(p.body, "Warning", "LagUnavailable", str(err))
        return prev
    p.extra["consumer_lag"] = lag
    ticked = scaling.tick(spec, prev, lag=lag, max_parallelism=max_parallelism, now=p.now)
    if ticked is None:
        return prev
    p.extra["autoscaler"] = ticked.memory
    if ticked.scaled is not None:
        p.ctx.event(p.body, "Normal", "Autoscaled", ticked.scaled)
    base = prev or StreamAppStatus()
    return base.model_copy(update={"autoscaler": ticked.memory, "consumer_lag": lag})


def _applied_spec(sts: Mapping[str, Any] | None) -> StreamAppSpec | None:
    """The spec last applied to the StatefulSet (its annotation), None when absent or unreadable."""
    annotations = (sts or {}).get("metadata", {}).get("annotations") or {}
    if APPLIED_SPEC_ANNOTATION not in annotations:
        return None
    try:
        return StreamAppSpec.model_validate(json.loads(annotations[APPLIED_SPEC_ANNOTATION]))
    except (ValueError, ValidationError):
        return None


def _pending_change(
    spec: StreamAppSpec, description: TopologyDescription, sts: Mapping[str, Any] | None
) -> SpecDiff:
    """How `spec` differs from what the StatefulSet runs (compared with its annotations)."""
    annotations = (sts or {}).get("metadata", {}).get("annotations") or {}
    return classify(
        _applied_spec(sts),
        spec,
        old_topology=annotations.get(TOPOLOGY_ANNOTATION),
        new_topology=description.fingerprint(),
    )


def _apply(
    p: Pass,
    spec: StreamAppSpec,
    ref: AppRef,
    description: TopologyDescription,
    cap: scaling.CapResult,
    app_id: str,
    prev: StreamAppStatus | None,
    recreate_topics: Callable[[], None],
) -> status.Problem | None:
    """Apply the desired state for `spec`; returns a Problem when an upgrade step failed."""
    ctx, body, sts = p.ctx, p.body, p.snap.statefulset
    old_spec = _applied_spec(sts)
    fingerprint = description.fingerprint()
    change = _pending_change(spec, description, sts)
    # Claims first, then the template (volumes.py says why both); a claim that cannot grow stops nothing.
    for problem in expansion.expand_claims(ctx, body, ref, spec.state.size):
        p.volume_problem(problem)
    if change.recreate_statefulset and sts is not None:
        expansion.replace_statefulset(ctx, body, ref, change.changed)
    if change.action == Action.RESET and sts is not None:
        failed = reset.run_reset(ctx, body, spec, ref, sts, app_id)
        if failed is not None:
            return failed
        recreate_topics()
    elif change.action == Action.REPROCESS:
        # reconcile() got here only once the SparkApplication COMPLETED: app_id is the rebuilt one.
        ctx.event(
            body, "Normal", "RollingOntoReprocessedState", f"rolling the pods onto application id '{app_id}'"
        )
    # When the pods last got a new template: the start of the progress deadline (a scale is no upgrade).
    before = ((sts or {}).get("metadata", {}).get("annotations") or {}).get(UPGRADED_AT_ANNOTATION)
    upgraded = change.action in (Action.ROLL, Action.REPROCESS, Action.RESET) or not before
    upgraded_at = p.now.isoformat() if upgraded else str(before)
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
        ctx.kube.apply(obj)
    for api_version, kind, name in desired.obsolete_resources(spec, ref):
        if ctx.kube.delete(api_version, kind, ref.namespace, name):
            ctx.event(body, "Normal", "Deleted", f"deleted {kind} {name}")
    if change.action == Action.SCALE:
        ctx.event(body, "Normal", "Scaled", f"StatefulSet {ref.name} runs {cap.replicas} replicas")
    elif change.action != Action.NONE:
        verb = "Created" if old_spec is None else "RollingUpdate"
        ctx.event(body, "Normal", verb, f"applied StatefulSet {ref.name} ({', '.join(change.changed)[:400]})")
    old_cap = status.condition(prev, status.REPLICAS_CAPPED) if prev is not None else None
    if cap.reason and (old_cap is None or old_cap.message != cap.reason):
        ctx.event(body, "Warning", "ReplicasCapped", cap.reason)
    return None


# ---- deletion ------------------------------------------------------------------------------------------
def cleanup(ctx: Context, body: Mapping[str, Any]) -> None:
    """The finalizer: apply topicCleanupPolicy. Owned objects go by garbage collection (owner refs)."""
    try:
        spec = StreamAppSpec.model_validate(body.get("spec") or {})
    except ValidationError:
        return  # never got far enough to create topics
    if spec.topic_cleanup_policy != "Delete":
        ctx.kube.event(body, "Normal", "TopicsRetained", "topicCleanupPolicy Retain: internal topics kept")
        return
    ref = _ref(body)
    prev = _status_of(body)
    app_id = (prev.application_id if prev is not None else None) or spec.application_id
    names = {t.name for t in (prev.internal_topics if prev is not None else [])}
    cm = ctx.kube.get("v1", "ConfigMap", ref.namespace, topology_configmap_name(ref.name))
    if cm is not None and TOPOLOGY_FILE in (cm.get("data") or {}):
        names |= set(internal_topic_names(TopologyDescription.parse(cm["data"][TOPOLOGY_FILE]), app_id))
    try:
        deleted = ctx.kafka_factory(spec, ref.namespace).delete_topics(sorted(names))
    except (KafkaError, SecretReferenceError) as err:
        raise kopf.TemporaryError(str(err), delay=RETRY_S * 5) from err
    factory = ctx.kafka_factory
    if isinstance(factory, KafkaAdmins):
        factory.release(f"{ref.namespace}/{ref.name}")
    ctx.kube.event(body, "Normal", "TopicsDeleted", "deleted " + (", ".join(deleted) or "no topics"))
