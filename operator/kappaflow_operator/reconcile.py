"""Orchestration: one reconcile pass = pure decisions (models, desired, topics, scaling, diff, status)
followed by the I/O they call for (k8s.py, kafka.py). kopf handlers in main.py only delegate here.

Where the operator keeps its memory, and why:
- the topology (`kappaflow describe` output) in a ConfigMap `<name>-topology` owned by the StreamApp,
  keyed by `describe_key(spec)`: a new image or entry point is described again, nothing else is;
- the last applied spec and topology hash as annotations on the StatefulSet it applied, so the change
  classification compares against what really runs (not against kopf's diff base, which records what
  kopf saw, including specs that failed to apply);
- the autoscaler's memory in status.autoscaler (it is observed state, and users should see it).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import kopf
from pydantic import ValidationError

from . import desired, reprocess, scaling, status
from .desired.common import (
    ACCEPTED_DESCRIBE_KEY,
    APP_LABEL,
    TOPOLOGY_KEY,
    AppRef,
    spec_hash,
    topology_configmap_name,
)
from .desired.jobs import DESCRIBE_JOB_LABEL
from .diff import Action, SpecDiff, classify
from .k8s import Kube
from .kafka import KafkaAdmin, KafkaError, client_config
from .models import (
    AutoscalerDecision,
    AutoscalerStatus,
    StableSpec,
    StreamAppSpec,
    StreamAppStatus,
    TopologyDescription,
    TopologyStatus,
)
from .topics import internal_topic_names, plan_internal_topics

APPLIED_SPEC_ANNOTATION = "kappaflow.io/applied-spec"
TOPOLOGY_ANNOTATION = "kappaflow.io/topology-hash"
DESCRIBE_KEY = ACCEPTED_DESCRIBE_KEY
TOPOLOGY_FILE = TOPOLOGY_KEY
#: How soon to look again while waiting for something outside our control (a Job, a topic).
RETRY_S = 3.0

KafkaFactory = Callable[[StreamAppSpec, str], KafkaAdmin]


@dataclass
class Context:
    """Process-wide clients, built once at start-up (kopf's memo)."""

    kube: Kube
    kafka_factory: KafkaFactory
    locks: dict[str, threading.Lock] = field(default_factory=dict)

    def lock(self, body: Mapping[str, Any]) -> threading.Lock:
        """kopf runs timers beside event handlers: one pass per object at a time keeps status coherent."""
        return self.locks.setdefault(str(body["metadata"]["uid"]), threading.Lock())


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
    """Admin clients per connection, credentials read from the Secrets the spec names."""
    cache: dict[str, KafkaAdmin] = {}

    def make(spec: StreamAppSpec, namespace: str) -> KafkaAdmin:
        k = spec.kafka
        secrets: dict[str, str] = {}
        if k.sasl is not None:
            secrets["sasl.mechanism"] = k.sasl.mechanism
            for key, ref in (
                ("sasl.username", k.sasl.username_secret_ref),
                ("sasl.password", k.sasl.password_secret_ref),
            ):
                secrets[key] = kube.read_secret_key(namespace, ref.name, ref.key)
        if k.tls is not None:
            for key, tls_ref in (
                ("ssl.ca.location", k.tls.ca_secret_ref),
                ("ssl.certificate.location", k.tls.certificate_secret_ref),
                ("ssl.key.location", k.tls.key_secret_ref),
            ):
                if tls_ref is not None:
                    secrets[key] = kube.read_secret_key(namespace, tls_ref.name, tls_ref.key)
        cache_key = json.dumps([k.bootstrap_servers, k.security_protocol, secrets], sort_keys=True)
        if cache_key not in cache:
            cache[cache_key] = KafkaAdmin(client_config(k.bootstrap_servers, k.security_protocol, secrets))
        return cache[cache_key]

    return make


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
    if ctx.kube.get("batch/v1", "Job", ref.namespace, job_name) is None:
        for obj in desired.describe_access(spec, ref):  # the Job's service account, Role, ConfigMap
            ctx.kube.apply(obj)
        ctx.kube.apply(job)
        ctx.kube.event(body, "Normal", "DescribingTopology", f"started Job {job_name} for image {spec.image}")
    outcome = ctx.kube.job_outcome(ref.namespace, job_name)
    if outcome is None:
        return None
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
def _write_status(
    ctx: Context,
    body: Mapping[str, Any],
    prev: StreamAppStatus | None,
    obs: status.Observation,
    now: datetime,
    **extra: Any,
) -> StreamAppStatus:
    meta = body["metadata"]
    new = status.compute_status(prev, obs, name=meta["name"], now=now)
    if extra:
        new = new.model_copy(update=extra)
    ctx.kube.patch_status(meta["namespace"], meta["name"], new.to_wire())
    return new


def _sts(ctx: Context, ref: AppRef) -> dict[str, Any] | None:
    return ctx.kube.get("apps/v1", "StatefulSet", ref.namespace, ref.name)


def _problem_once(
    ctx: Context, body: Mapping[str, Any], prev: StreamAppStatus | None, p: status.Problem
) -> None:
    """Warn with an event only when the Degraded reason is new (the timer must not spam events)."""
    old = status.condition(prev, status.DEGRADED) if prev is not None else None
    if old is None or old.status != "True" or old.reason != p.reason or old.message != p.message:
        ctx.kube.event(body, "Warning", p.reason, p.message)


def reconcile(
    ctx: Context, body: Mapping[str, Any], *, now: datetime, prev: StreamAppStatus | None = None
) -> StreamAppStatus:
    """Bring the cluster and Kafka to the spec, then write status. Idempotent: every pass applies all.

    Raises kopf.TemporaryError while waiting on something (the describe Job, source topics), so kopf
    calls again after a short delay.
    """
    ref = _ref(body)
    prev = prev if prev is not None else _status_of(body)
    generation = int(body["metadata"].get("generation") or 0)
    try:
        spec = StreamAppSpec.model_validate(body.get("spec") or {})
    except ValidationError as err:
        msg = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        problem = status.Problem("InvalidSpec", msg)
        _problem_once(ctx, body, prev, problem)
        obs = status.Observation(generation, 0, _sts(ctx, ref), problems=[problem])
        return _write_status(ctx, body, prev, obs, now)

    found = ensure_topology(ctx, spec, ref, body)
    if found is None:
        obs = status.Observation(generation, spec.replicas, _sts(ctx, ref), topology_known=False)
        _write_status(ctx, body, prev, obs, now)
        raise kopf.TemporaryError("waiting for the describe Job", delay=RETRY_S)
    if isinstance(found, status.Problem):
        _problem_once(ctx, body, prev, found)
        obs = status.Observation(
            generation, spec.replicas, _sts(ctx, ref), topology_known=False, problems=[found]
        )
        return _write_status(ctx, body, prev, obs, now)
    description = found

    app_id = (
        reprocess.reprocessed_application_id(spec, prev)
        or (prev.application_id if prev is not None else None)
        or spec.application_id
    )
    try:
        admin = ctx.kafka_factory(spec, ref.namespace)
        plan = plan_internal_topics(description, app_id, admin.topic_partitions())
        created: list[str] = []
        if plan.ready and plan.to_create:
            created = admin.create_topics(plan.to_create, spec.kafka.replication_factor)
            ctx.kube.event(body, "Normal", "TopicsCreated", "created " + ", ".join(created))
    except KafkaError as err:
        problem = status.Problem("KafkaUnavailable", str(err))
        _problem_once(ctx, body, prev, problem)
        _write_status(
            ctx,
            body,
            prev,
            status.Observation(generation, spec.replicas, _sts(ctx, ref), problems=[problem]),
            now,
        )
        raise kopf.TemporaryError(str(err), delay=RETRY_S * 5) from err
    topo_status = TopologyStatus(
        hash=description.fingerprint(),
        described_image=spec.image,
        described_entry_point=spec.entry_point,
        source_topics=sorted(description.source_topics),
        max_parallelism=plan.max_parallelism,
    )
    if not plan.ready:
        obs = status.Observation(generation, spec.replicas, _sts(ctx, ref), topic_plan=plan)
        for m in plan.mismatches:
            _problem_once(ctx, body, prev, status.Problem("TopicPartitionMismatch", m.message))
        written = _write_status(ctx, body, prev, obs, now, topology=topo_status)
        if plan.missing_sources and not plan.mismatches:
            raise kopf.TemporaryError("waiting for source topics", delay=RETRY_S * 2)
        return written

    cap = scaling.effective_replicas(spec, prev, plan.max_parallelism)

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
        ctx.kube.event(
            body, "Normal", "TopicsCreated", "created " + (", ".join(sorted(set(made))) or "no topics")
        )

    extra: dict[str, Any] = {"topology": topo_status}
    if spec.upgrade.mode == "reprocess":
        change = _pending_change(ctx, ref, spec, description)
        outcome = reprocess.step(ctx, body, spec, ref, description, change.action, app_id, prev, now)
        extra["reprocessing"] = outcome.run
        if outcome.problem is not None or outcome.waiting:
            # The running version stays as it is while Spark works, and when Spark failed.
            problems = [outcome.problem] if outcome.problem is not None else []
            for problem in problems:
                _problem_once(ctx, body, prev, problem)
            obs = status.Observation(
                generation,
                cap.replicas,
                _sts(ctx, ref),
                topic_plan=plan,
                cap=cap,
                problems=problems,
                reprocessing_active=bool(outcome.waiting),
            )
            written = _write_status(ctx, body, prev, obs, now, **extra)
            if outcome.waiting:
                raise reprocess.wait(outcome.waiting)
            return written
        app_id = outcome.application_id
    failure = _apply(ctx, body, spec, ref, description, cap, app_id, prev, recreate_topics)
    if failure is not None:
        _problem_once(ctx, body, prev, failure)
        obs = status.Observation(
            generation, cap.replicas, _sts(ctx, ref), topic_plan=plan, problems=[failure]
        )
        return _write_status(ctx, body, prev, obs, now, **extra)
    obs = status.Observation(
        generation,
        cap.replicas,
        _sts(ctx, ref),
        topic_plan=plan,
        created_topics=frozenset(created),
        cap=cap,
        applied=StableSpec(hash=spec_hash(spec), image=spec.image, application_id=app_id),
    )
    return _write_status(ctx, body, prev, obs, now, **extra)


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
    ctx: Context,
    ref: AppRef,
    spec: StreamAppSpec,
    description: TopologyDescription,
    sts: Mapping[str, Any] | None = None,
) -> SpecDiff:
    """How `spec` differs from what the StatefulSet runs (compared with its annotations)."""
    sts = sts if sts is not None else _sts(ctx, ref)
    annotations = (sts or {}).get("metadata", {}).get("annotations") or {}
    return classify(
        _applied_spec(sts),
        spec,
        old_topology=annotations.get(TOPOLOGY_ANNOTATION),
        new_topology=description.fingerprint(),
    )


def _apply(
    ctx: Context,
    body: Mapping[str, Any],
    spec: StreamAppSpec,
    ref: AppRef,
    description: TopologyDescription,
    cap: scaling.CapResult,
    app_id: str,
    prev: StreamAppStatus | None,
    recreate_topics: Callable[[], None],
) -> status.Problem | None:
    """Apply the desired state for `spec`; returns a Problem when an upgrade step failed."""
    sts = _sts(ctx, ref)
    old_spec = _applied_spec(sts)
    fingerprint = description.fingerprint()
    change = _pending_change(ctx, ref, spec, description, sts)
    if change.recreate_statefulset and sts is not None:
        # volumeClaimTemplates are immutable: replace the StatefulSet, leaving pods and claims in place.
        ctx.kube.delete("apps/v1", "StatefulSet", ref.namespace, ref.name, propagation="Orphan")
        deadline = time.monotonic() + 30
        while _sts(ctx, ref) is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        ctx.kube.event(
            body,
            "Normal",
            "RecreatingStatefulSet",
            "state volume settings changed: " + ", ".join(change.changed),
        )
    if change.action == Action.RESET and sts is not None:
        failed = _reset(ctx, body, spec, ref, sts, app_id)
        if failed is not None:
            return failed
        recreate_topics()
    elif change.action == Action.REPROCESS:
        # reconcile() got here only once the SparkApplication COMPLETED: app_id is the rebuilt one.
        ctx.kube.event(
            body, "Normal", "RollingOntoReprocessedState", f"rolling the pods onto application id '{app_id}'"
        )
    for obj in desired.desired_resources(spec, ref, desired.Facts(cap.replicas, app_id)):
        if obj["kind"] == "StatefulSet":
            obj["metadata"].setdefault("annotations", {}).update(
                {
                    APPLIED_SPEC_ANNOTATION: json.dumps(spec.to_wire(), sort_keys=True),
                    TOPOLOGY_ANNOTATION: fingerprint,
                }
            )
        ctx.kube.apply(obj)
    for api_version, kind, name in desired.obsolete_resources(spec, ref):
        if ctx.kube.delete(api_version, kind, ref.namespace, name):
            ctx.kube.event(body, "Normal", "Deleted", f"deleted {kind} {name}")
    if change.action == Action.SCALE:
        ctx.kube.event(body, "Normal", "Scaled", f"StatefulSet {ref.name} runs {cap.replicas} replicas")
    elif change.action != Action.NONE:
        verb = "Created" if old_spec is None else "RollingUpdate"
        ctx.kube.event(
            body, "Normal", verb, f"applied StatefulSet {ref.name} ({', '.join(change.changed)[:400]})"
        )
    old_cap = status.condition(prev, status.REPLICAS_CAPPED) if prev is not None else None
    if cap.reason and (old_cap is None or old_cap.message != cap.reason):
        ctx.kube.event(body, "Warning", "ReplicasCapped", cap.reason)
    return None


def _reset(
    ctx: Context,
    body: Mapping[str, Any],
    spec: StreamAppSpec,
    ref: AppRef,
    sts: Mapping[str, Any],
    app_id: str,
) -> status.Problem | None:
    """`upgrade.mode: reset`: stop every pod, wait for an empty group, drop the state volumes, run
    `kappaflow reset`.

    Returns None once the reset Job succeeded (the caller then recreates the internal topics and applies
    the new spec); raises kopf.TemporaryError while a step is under way. Each step is recognisable from
    the cluster alone (StatefulSet scaled to 0, no pods, the generation's Job), so a restarted operator
    resumes where it stopped. A reset with live members would be refused by the broker, and a pod that
    kept its volume would restore state the reset just invalidated: hence the order.
    """
    generation = int(body["metadata"].get("generation") or 0)
    job = desired.build_reset_job(spec, ref, generation)
    job_name = job["metadata"]["name"]
    if ctx.kube.get("batch/v1", "Job", ref.namespace, job_name) is None:
        if (sts.get("spec") or {}).get("replicas") != 0:
            ctx.kube.patch("apps/v1", "StatefulSet", ref.namespace, ref.name, {"spec": {"replicas": 0}})
            ctx.kube.event(body, "Normal", "ResetStopping", "upgrade mode reset: stopping all pods")
        selector = f"{APP_LABEL}={ref.name},!{DESCRIBE_JOB_LABEL}"
        if ctx.kube.list("v1", "Pod", ref.namespace, selector):
            raise kopf.TemporaryError("reset: waiting for the pods to stop", delay=RETRY_S)
        try:
            members = ctx.kafka_factory(spec, ref.namespace).group_members(app_id)
        except KafkaError as err:
            raise kopf.TemporaryError(f"reset: {err}", delay=RETRY_S * 5) from err
        if members:
            # Static members linger until session.timeout.ms; `kappaflow reset` needs an empty group.
            raise kopf.TemporaryError(f"reset: {members} group member(s) not expired yet", delay=RETRY_S)
        claims = ctx.kube.list("v1", "PersistentVolumeClaim", ref.namespace, f"{APP_LABEL}={ref.name}")
        for claim in claims:
            ctx.kube.delete("v1", "PersistentVolumeClaim", ref.namespace, claim["metadata"]["name"])
        if claims:
            ctx.kube.event(
                body, "Normal", "StateVolumesDeleted", f"deleted {len(claims)} state volume claims"
            )
        ctx.kube.apply(desired.build_configmap(spec, ref, app_id))
        ctx.kube.apply(job)
        ctx.kube.event(body, "Normal", "ResetStarted", f"started Job {job_name} (kappaflow reset)")
        raise kopf.TemporaryError("reset: waiting for the reset Job", delay=RETRY_S)
    outcome = ctx.kube.job_outcome(ref.namespace, job_name)
    if outcome is None:
        raise kopf.TemporaryError("reset: waiting for the reset Job", delay=RETRY_S)
    if outcome.exit_code != 0:
        return status.Problem(
            "ResetFailed", f"Job {job_name} exited {outcome.exit_code}: {outcome.message[-512:]}"
        )
    ctx.kube.event(
        body, "Normal", "ResetCompleted", "group offsets rewound, internal topics and state dropped"
    )
    return None


# ---- autoscaler ----------------------------------------------------------------------------------------
def autoscale(ctx: Context, body: Mapping[str, Any], *, now: datetime) -> StreamAppStatus | None:
    """One autoscaler tick: measure lag, decide, record the decision. Returns the new status when it
    changed the replica target (the caller then reconciles to apply it), else None."""
    prev = _status_of(body)
    try:
        spec = StreamAppSpec.model_validate(body.get("spec") or {})
    except ValidationError:
        return None
    auto = spec.autoscaling
    if not auto.enabled or spec.replicas == 0 or prev is None or prev.topology is None:
        return None
    last = prev.autoscaler.last_decision if prev.autoscaler is not None else None
    if last is not None and now - last.time < timedelta(seconds=auto.interval_seconds):
        return None
    ref = _ref(body)
    app_id = prev.application_id or spec.application_id
    try:
        lag = ctx.kafka_factory(spec, ref.namespace).consumer_lag(app_id, prev.topology.source_topics)
    except KafkaError as err:
        ctx.kube.event(body, "Warning", "LagUnavailable", str(err))
        return None
    current = scaling.effective_replicas(spec, prev, prev.topology.max_parallelism).replicas
    decision = scaling.autoscale(
        current=current,
        total_lag=lag,
        lag_per_replica=auto.lag_per_replica,
        min_replicas=auto.min_replicas,
        max_replicas=auto.max_replicas,
        scale_up_cooldown_s=auto.scale_up_cooldown_seconds,
        scale_down_cooldown_s=auto.scale_down_cooldown_seconds,
        last_scale_time=prev.autoscaler.last_scale_time if prev.autoscaler is not None else None,
        now=now,
        max_parallelism=prev.topology.max_parallelism,
    )
    record = AutoscalerDecision(
        time=now, from_replicas=current, to_replicas=decision.replicas, lag=lag, reason=decision.reason
    )
    auto_status = AutoscalerStatus(
        desired_replicas=decision.replicas,
        last_scale_time=now
        if decision.changed
        else (prev.autoscaler.last_scale_time if prev.autoscaler else None),
        last_decision=record,
    )
    new = prev.model_copy(update={"autoscaler": auto_status, "consumer_lag": lag})
    meta = body["metadata"]
    ctx.kube.patch_status(
        meta["namespace"], meta["name"], {"autoscaler": auto_status.to_wire(), "consumerLag": lag}
    )
    if not decision.changed:
        return None
    ctx.kube.event(body, "Normal", "Autoscaled", decision.reason)
    return new


def on_change(ctx: Context, body: Mapping[str, Any], *, now: datetime) -> None:
    """Create/update/resume: a full pass, serialized with the timer's."""
    with ctx.lock(body):
        reconcile(ctx, body, now=now)


def resync(ctx: Context, body: Mapping[str, Any], *, now: datetime) -> None:
    """The periodic pass: autoscaler tick, then a full reconcile (refreshes status from the pods)."""
    if body["metadata"].get("deletionTimestamp"):
        return
    with ctx.lock(body):
        scaled = autoscale(ctx, body, now=now)
        reconcile(ctx, body, now=now, prev=scaled)


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
    except KafkaError as err:
        raise kopf.TemporaryError(str(err), delay=RETRY_S * 5) from err
    ctx.kube.event(body, "Normal", "TopicsDeleted", "deleted " + (", ".join(deleted) or "no topics"))
