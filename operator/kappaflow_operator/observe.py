"""Every read of one reconcile pass: the `Snapshot` (snapshot.py) that `decide` decides from.

Why a snapshot, read under the per-app lock at the start of each pass: kopf hands each handler the body
it saw when the event (or the timer tick) was queued. The update handler and the periodic timer run one
after the other, so the second one used to act on a copy older than what the first had just written -
and undo it (a completed reprocess rolled back to the old application id; the autoscaler's status
flapped). Reading the StreamApp again once the lock is held, and taking the running application id from
the StatefulSet (what the pods really run) instead of from a status that may lag behind, makes every
pass start from the newest state, whichever handler runs it.

Why everything is read here, Kafka's side included: `decide` is then a pure function of the snapshot.
What is read depends on the spec (the describe Job only while no topology is published for it, the
reset Job only in reset mode, the group's member count only once a reset stopped every pod, its static
members whenever the StatefulSet exists (departed.py), the lag only on
timer passes, the pods' own tasks on timer passes and while a scale-in is pending), decided by small
pure predicates the decision modules own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from . import desired, movement, reprocess, reset, status, volumes
from .admins import KafkaAdmins, SecretReferenceError
from .context import Context
from .decide import app_ref, application_id, state_claims, statefulset_replicas
from .desired.common import APP_LABEL, AppRef, spec_hash, topology_configmap_name
from .desired.jobs import DESCRIBE_JOB_LABEL
from .desired.spark import REPROCESS_OF_LABEL, SPARK_API_VERSION
from .k8s import Kube
from .kafka import KafkaAdmin, KafkaError
from .models import API_VERSION, StreamAppSpec
from .snapshot import APPLICATION_ID_ANNOTATION, JobFacts, Snapshot, spec_or_none

__all__ = ["APPLICATION_ID_ANNOTATION", "Snapshot", "admin_for", "observe", "read_app"]


def read_app(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    return kube.get(API_VERSION, "StreamApp", namespace, name)


def admin_for(ctx: Context, spec: StreamAppSpec, ref: AppRef) -> KafkaAdmin:
    """The app's Kafka admin client (admins.py: one per connection, credentials from the Secrets)."""
    factory = ctx.kafka_factory
    if isinstance(factory, KafkaAdmins):
        return factory(spec, ref.namespace, owner=f"{ref.namespace}/{ref.name}")
    return factory(spec, ref.namespace)


def job_facts(kube: Kube, namespace: str, name: str) -> JobFacts:
    """A Job, its pods and its FailedCreate events (three reads; one when it does not exist)."""
    job = kube.get("batch/v1", "Job", namespace, name)
    if job is None:
        return JobFacts(name)
    pods = kube.list("v1", "Pod", namespace, f"job-name={name}")
    fields = f"involvedObject.kind=Job,involvedObject.name={name},reason=FailedCreate"
    return JobFacts(name, job, pods, kube.list("v1", "Event", namespace, fields=fields))


def observe(
    ctx: Context, app: Mapping[str, Any], *, tick: bool = False
) -> tuple[Snapshot, KafkaAdmin | None]:
    """Read what the pass decides from; returns the snapshot and the Kafka client `act` uses (None when
    the spec's Secrets are missing or the pass stops before Kafka matters)."""
    kube = ctx.kube
    ref = app_ref(app)
    namespace, name = ref.namespace, ref.name
    sts = kube.get("apps/v1", "StatefulSet", namespace, name)
    pods = kube.list("v1", "Pod", namespace, f"{APP_LABEL}={name},!{DESCRIBE_JOB_LABEL}") if sts else []
    refusals: list[dict[str, Any]] = []
    if sts and len(pods) < int((sts.get("spec") or {}).get("replicas") or 0):
        fields = f"involvedObject.kind=StatefulSet,involvedObject.name={name},reason=FailedCreate"
        refusals = kube.list("v1", "Event", namespace, fields=fields)
    snap = Snapshot(app, sts, pods, refusals)
    spec = spec_or_none(app)
    if spec is None or status.name_problem(name) is not None or spec.suspend:
        return snap, None

    claims = kube.list("v1", "PersistentVolumeClaim", namespace, f"{APP_LABEL}={name}")
    state = state_claims(name, claims)
    unbound = [c for c in state if not c.bound]
    wanted = volumes.classes_to_read(spec.state.size, state) | {
        c.storage_class for c in unbound if c.storage_class
    }
    classes = {c: kube.get_cluster_scoped("storage.k8s.io/v1", "StorageClass", c) for c in sorted(wanted)}
    failures: list[dict[str, Any]] = []
    if unbound:
        fields = "involvedObject.kind=PersistentVolumeClaim,reason=ProvisioningFailed"
        failures = kube.list("v1", "Event", namespace, fields=fields)
    cm_name = topology_configmap_name(name)
    cm = kube.get("v1", "ConfigMap", namespace, cm_name)
    describe_job: JobFacts | None = None
    try:
        description = desired.published_topology(spec, cm)
        if description is None:
            describe_job = job_facts(kube, namespace, desired.describe_job_name(spec, ref))
            outcome = describe_job.outcome
            if outcome is not None and outcome.exit_code == 0:
                cm = kube.get("v1", "ConfigMap", namespace, cm_name)  # it published before it exited
                description = desired.published_topology(spec, cm)
    except (ValueError, ValidationError):
        description = None  # decide() reports it
    snap = replace(
        snap,
        claims=claims,
        storage_classes=classes,
        provisioning_failures=failures,
        topology_configmap=cm,
        describe_job=describe_job,
    )

    try:
        admin = admin_for(ctx, spec, ref)
    except SecretReferenceError as err:
        return replace(snap, kafka_access_error=str(err)), None
    try:
        snap = replace(snap, topics=admin.topic_partitions())
    except KafkaError as err:
        return replace(snap, kafka_error=str(err)), admin

    prev = snap.status
    app_id = application_id(spec, prev, snap)
    if sts is not None:
        try:
            snap = replace(snap, static_members=admin.static_members(app_id))
        except KafkaError as err:
            snap = replace(snap, static_members_error=str(err))
    if movement.read_due(spec, prev, statefulset_replicas(snap), tick):
        snap = replace(snap, pod_tasks=ctx.read_pod_tasks(pods, spec.metrics.port))
    if tick and description is not None:
        try:
            snap = replace(snap, lag=admin.consumer_lag(app_id, sorted(description.source_topics)))
        except KafkaError as err:
            snap = replace(snap, lag_error=str(err))
    if spec.upgrade.mode == "reprocess":
        spark_name = desired.spark_application_name(ref, spec_hash(spec))
        snap = replace(
            snap, spark_application=kube.get(SPARK_API_VERSION, "SparkApplication", namespace, spark_name)
        )
    if reprocess.cleanup_due(prev):
        runs = kube.list(SPARK_API_VERSION, "SparkApplication", namespace, f"{REPROCESS_OF_LABEL}={name}")
        snap = replace(snap, spark_applications=runs)
    if spec.upgrade.mode == "reset" and sts is not None:
        snap = replace(
            snap, reset_job=job_facts(kube, namespace, reset.reset_job_name(spec, ref, snap.generation))
        )
        if reset.group_read_due(snap, spec):
            try:
                snap = replace(snap, group_members=admin.group_members(app_id))
            except KafkaError as err:
                snap = replace(snap, group_error=str(err))
    return snap, admin
