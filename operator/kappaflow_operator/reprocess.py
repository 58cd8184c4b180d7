"""`upgrade: reprocess`: rebuild outputs and state on Spark for the new version, then roll onto it.

When a change of image or topology is classified REPROCESS, the running version is left alone and:

1. the new application id (`desired.reprocess_application_id`: the declared id plus a hash of the new
   spec) gets its internal topics, created here because the pods' config says the operator owns topics
   (`kappaflow.internal.topics.create=false`, which `kappaflow reprocess` honours too);
2. a uniquely named SparkApplication runs `kappaflow reprocess <entry> --application-id <new id>` with
   the new image; its `status.applicationState.state` is followed on every pass;
3. COMPLETED: the pass continues with the new id, so the ConfigMap and StatefulSet roll the pods onto
   it; they restore the compacted changelogs Spark wrote and continue from the committed end offsets.
   FAILED: the StreamApp is Degraded with Spark's message and the old version keeps running until the
   spec changes again (a new spec hash names a new SparkApplication).

Everything is recoverable from the cluster: the SparkApplication's name and the new id follow from the
spec, and the run is recorded in `status.reprocessing`, from which `reprocessed_application_id` tells
later passes which id the current spec runs under.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import kopf

from . import desired, status
from .context import RETRY_S
from .desired.common import APP_LABEL, AppRef, spec_hash
from .desired.spark import SPARK_API_VERSION
from .diff import Action
from .kafka import KafkaError
from .models import ReprocessingRun, StreamAppSpec, StreamAppStatus, TopologyDescription
from .topics import plan_internal_topics

if TYPE_CHECKING:
    from .context import Context

_STATES = {"COMPLETED": "Completed", "FAILED": "Failed", "SUBMISSION_FAILED": "Failed"}


@dataclass
class Outcome:
    """What the reprocess step decided: the id to apply with, the run to record, or why to stop."""

    application_id: str
    run: ReprocessingRun | None = None
    problem: status.Problem | None = None
    waiting: str = ""


def reprocessed_application_id(spec: StreamAppSpec, prev: StreamAppStatus | None) -> str | None:
    """The id a completed reprocessing run built for exactly this spec, if there was one."""
    run = prev.reprocessing if prev is not None else None
    if run is not None and run.state == "Completed" and run.spec_hash == spec_hash(spec):
        return run.application_id
    return None


def step(
    ctx: Context,
    body: Mapping[str, Any],
    spec: StreamAppSpec,
    ref: AppRef,
    description: TopologyDescription,
    action: Action,
    app_id: str,
    prev: StreamAppStatus | None,
    now: datetime,
) -> Outcome:
    """Advance the reprocessing of this spec by one pass (see the module docstring)."""
    previous_run = prev.reprocessing if prev is not None else None
    if action != Action.REPROCESS:
        return Outcome(app_id, _clean_up_replaced_id(ctx, body, spec, ref, prev))
    digest = spec_hash(spec)
    new_id = desired.reprocess_application_id(spec, digest)
    name = desired.spark_application_name(ref, digest)
    run = previous_run if previous_run is not None and previous_run.spark_application == name else None
    found = ctx.kube.get(SPARK_API_VERSION, "SparkApplication", ref.namespace, name)
    if (
        found is None
        and run is not None
        and run.state == "Failed"
        and desired.reprocess_timed_out(spec, run.started_at, run.finished_at or now)
    ):
        # Timed out and stopped: stay on the old id until the spec changes again (no resubmission).
        return Outcome(app_id, run, status.Problem("ReprocessTimedOut", run.message))
    if found is None:
        try:
            admin = ctx.kafka_factory(spec, ref.namespace)
            plan = plan_internal_topics(description, new_id, admin.topic_partitions())
            if plan.to_create:
                admin.create_topics(plan.to_create, spec.kafka.replication_factor)
        except KafkaError as err:
            return Outcome(app_id, run, status.Problem("KafkaUnavailable", str(err)))
        for obj in desired.reprocess_resources(spec, ref, spec_digest=digest, new_application_id=new_id):
            ctx.kube.apply(obj)  # the run's config, rendered from the new spec, then the application
        ctx.kube.event(
            body, "Normal", "ReprocessStarted", f"SparkApplication {name} rebuilds state into '{new_id}'"
        )
        run = ReprocessingRun(
            spark_application=name,
            application_id=new_id,
            image=spec.image,
            spec_hash=digest,
            state="Pending",
            started_at=now,
            previous_application_id=app_id,
        )
        return Outcome(app_id, run, waiting="SparkApplication submitted")
    spark_state = desired.spark_state(found) or ""
    state = _STATES.get(spark_state, "Running" if spark_state else "Pending")
    if run is None:  # the status was lost (or written by another operator): rebuild the record
        run = ReprocessingRun(
            spark_application=name,
            application_id=new_id,
            image=spec.image,
            spec_hash=digest,
            state="Pending",
            started_at=_created_at(found) or now,
            previous_application_id=app_id,
        )
    if state in ("Pending", "Running") and desired.reprocess_timed_out(spec, run.started_at, now):
        return _stop_timed_out(ctx, body, spec, ref, run, app_id, now)
    if state in ("Pending", "Running"):
        return Outcome(app_id, run.model_copy(update={"state": state}), waiting=f"Spark state {spark_state}")
    if run.state != state:
        run = run.model_copy(update={"state": state, "finished_at": now})
    if state == "Failed":
        message = str(((found.get("status") or {}).get("applicationState") or {}).get("errorMessage") or "")
        run = run.model_copy(update={"message": message[-512:]})
        return Outcome(
            app_id,
            run,
            status.Problem(
                "ReprocessFailed",
                f"SparkApplication {name} {spark_state}: {message[-300:] or 'no message'}; "
                "the previous version keeps running",
            ),
        )
    if previous_run is None or previous_run.state != "Completed":
        ctx.kube.event(body, "Normal", "ReprocessCompleted", f"rolling onto application id '{new_id}'")
    return Outcome(new_id, run)


def _created_at(obj: Mapping[str, Any]) -> datetime | None:
    stamp = (obj.get("metadata") or {}).get("creationTimestamp")
    return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")) if stamp else None


def _stop_timed_out(
    ctx: Context,
    body: Mapping[str, Any],
    spec: StreamAppSpec,
    ref: AppRef,
    run: ReprocessingRun,
    app_id: str,
    now: datetime,
) -> Outcome:
    """`upgrade.spark.timeoutSeconds` passed: stop the SparkApplication, keep the old application id."""
    ctx.kube.delete(SPARK_API_VERSION, "SparkApplication", ref.namespace, run.spark_application)
    message = (
        f"SparkApplication {run.spark_application} ran longer than upgrade.spark.timeoutSeconds "
        f"({spec.upgrade.spark.timeout_seconds}s) and was stopped; application id '{app_id}' keeps running"
    )
    ctx.kube.event(body, "Warning", "ReprocessTimedOut", message)
    failed = run.model_copy(update={"state": "Failed", "finished_at": now, "message": message})
    return Outcome(app_id, failed, status.Problem("ReprocessTimedOut", message))


def _clean_up_replaced_id(
    ctx: Context, body: Mapping[str, Any], spec: StreamAppSpec, ref: AppRef, prev: StreamAppStatus | None
) -> ReprocessingRun | None:
    """After a completed reprocess, once every pod runs ready on the new id: apply `cleanupPolicy`.

    Delete: the replaced id's internal topics (`desired.previous_id_topics`) and the SparkApplications
    (with their config) of earlier runs; the completed run's own application stays as the record.
    """
    run = prev.reprocessing if prev is not None else None
    if prev is None or run is None or run.state != "Completed" or run.cleaned_up:
        return run
    settled = prev.application_id == run.application_id and (prev.ready_replicas or 0) == (prev.replicas or 0)
    if spec.upgrade.spark.cleanup_policy != "Delete" or not settled or not run.previous_application_id:
        return run
    try:
        admin = ctx.kafka_factory(spec, ref.namespace)
        topics = desired.previous_id_topics(
            run.previous_application_id, run.application_id, list(admin.topic_partitions())
        )
        deleted = admin.delete_topics(topics) if topics else []
    except KafkaError:
        return run  # try again on a later pass
    apps = ctx.kube.list(SPARK_API_VERSION, "SparkApplication", ref.namespace, f"{APP_LABEL}={ref.name}")
    removed = [a["metadata"]["name"] for a in apps if a["metadata"]["name"] != run.spark_application]
    for name in removed:
        ctx.kube.delete(SPARK_API_VERSION, "SparkApplication", ref.namespace, name)
        ctx.kube.delete("v1", "ConfigMap", ref.namespace, f"{name}-config")
    ctx.kube.event(
        body,
        "Normal",
        "ReplacedIdCleanedUp",
        f"application id '{run.previous_application_id}': deleted topics {', '.join(deleted) or 'none'}; "
        f"SparkApplications {', '.join(removed) or 'none'}",
    )
    return run.model_copy(update={"cleaned_up": True})


def wait(reason: str) -> kopf.TemporaryError:
    return kopf.TemporaryError(f"reprocessing: {reason}", delay=RETRY_S)
