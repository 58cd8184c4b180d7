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

Pure: `step` turns the snapshot (the SparkApplication of this spec, the topics, the app's runs) into an
`Outcome` whose effects `act` carries out; the pass re-enters while Spark works (never waiting in it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from . import desired, status
from .desired.common import AppRef, spec_hash
from .desired.spark import SPARK_API_VERSION
from .diff import Action
from .effects import Apply, CreateTopics, Delete, DeleteTopics, Effect, Event
from .models import ReprocessingRun, StreamAppSpec, StreamAppStatus, TopologyDescription
from .snapshot import Snapshot
from .topics import plan_internal_topics

_STATES = {"COMPLETED": "Completed", "FAILED": "Failed", "SUBMISSION_FAILED": "Failed"}


@dataclass
class Outcome:
    """What the reprocess step decided: the id to apply with, the run to record, or why to stop."""

    application_id: str
    run: ReprocessingRun | None = None
    problem: status.Problem | None = None
    waiting: str = ""
    effects: list[Effect] = field(default_factory=list)


def reprocessed_application_id(spec: StreamAppSpec, prev: StreamAppStatus | None) -> str | None:
    """The id a completed reprocessing run built for exactly this spec, if there was one."""
    run = prev.reprocessing if prev is not None else None
    if run is not None and run.state == "Completed" and run.spec_hash == spec_hash(spec):
        return run.application_id
    return None


def cleanup_due(prev: StreamAppStatus | None) -> bool:
    """Whether a completed run may still have a replaced id to clean up (observe then lists the runs)."""
    run = prev.reprocessing if prev is not None else None
    return run is not None and run.state == "Completed" and not run.cleaned_up


def step(
    snap: Snapshot,
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
        return _clean_up_replaced_id(snap, spec, prev, app_id)
    digest = spec_hash(spec)
    new_id = desired.reprocess_application_id(spec, digest)
    name = desired.spark_application_name(ref, digest)
    run = previous_run if previous_run is not None and previous_run.spark_application == name else None
    found = snap.spark_application
    if (
        found is None
        and run is not None
        and run.state == "Failed"
        and desired.reprocess_timed_out(spec, run.started_at, run.finished_at or now)
    ):
        # Timed out and stopped: stay on the old id until the spec changes again (no resubmission).
        return Outcome(app_id, run, status.Problem("ReprocessTimedOut", run.message))
    if found is None:
        plan = plan_internal_topics(description, new_id, snap.topics or {})
        effects: list[Effect] = []
        if plan.to_create:
            effects.append(CreateTopics(plan.to_create, spec.kafka.replication_factor, announce=False))
        # the run's config, rendered from the new spec, then the application
        effects += [
            Apply(obj)
            for obj in desired.reprocess_resources(spec, ref, spec_digest=digest, new_application_id=new_id)
        ]
        effects.append(
            Event(
                "Normal", "ReprocessStarted", f"SparkApplication {name} rebuilds state into '{new_id}'", False
            )
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
        return Outcome(app_id, run, waiting="SparkApplication submitted", effects=effects)
    spark_state = desired.spark_state(dict(found)) or ""
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
        return _stop_timed_out(spec, run, app_id, now)
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
    effects = []
    if previous_run is None or previous_run.state != "Completed":
        effects.append(
            Event("Normal", "ReprocessCompleted", f"rolling onto application id '{new_id}'", False)
        )
    return Outcome(new_id, run, effects=effects)


def _created_at(obj: Mapping[str, Any]) -> datetime | None:
    stamp = (obj.get("metadata") or {}).get("creationTimestamp")
    return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")) if stamp else None


def _stop_timed_out(spec: StreamAppSpec, run: ReprocessingRun, app_id: str, now: datetime) -> Outcome:
    """`upgrade.spark.timeoutSeconds` passed: stop the SparkApplication, keep the old application id."""
    message = (
        f"SparkApplication {run.spark_application} ran longer than upgrade.spark.timeoutSeconds "
        f"({spec.upgrade.spark.timeout_seconds}s) and was stopped; application id '{app_id}' keeps running"
    )
    failed = run.model_copy(update={"state": "Failed", "finished_at": now, "message": message})
    effects: list[Effect] = [
        Delete(SPARK_API_VERSION, "SparkApplication", run.spark_application),
        Event("Warning", "ReprocessTimedOut", message, False),
    ]
    return Outcome(app_id, failed, status.Problem("ReprocessTimedOut", message), effects=effects)


def _clean_up_replaced_id(
    snap: Snapshot, spec: StreamAppSpec, prev: StreamAppStatus | None, app_id: str
) -> Outcome:
    """After a completed reprocess, once every pod runs ready on the new id: apply `cleanupPolicy`.

    Delete: the replaced id's internal topics (`desired.previous_id_topics`) and the SparkApplications
    (with their config) of earlier runs; the completed run's own application stays as the record. A
    Kafka failure fails the pass (KafkaUnavailable in status) and the next pass tries again.
    """
    run = prev.reprocessing if prev is not None else None
    if prev is None or run is None or run.state != "Completed" or run.cleaned_up:
        return Outcome(app_id, run)
    settled = prev.application_id == run.application_id and (prev.ready_replicas or 0) == (prev.replicas or 0)
    if spec.upgrade.spark.cleanup_policy != "Delete" or not settled or not run.previous_application_id:
        return Outcome(app_id, run)
    existing = snap.topics or {}
    topics = desired.previous_id_topics(run.previous_application_id, run.application_id, list(existing))
    deleted = sorted(t for t in topics if t in existing)
    effects: list[Effect] = [DeleteTopics(deleted)] if deleted else []
    removed = [
        a["metadata"]["name"]
        for a in snap.spark_applications
        if a["metadata"]["name"] != run.spark_application
    ]
    for name in removed:
        effects.append(Delete(SPARK_API_VERSION, "SparkApplication", name))
        effects.append(Delete("v1", "ConfigMap", f"{name}-config"))
    effects.append(
        Event(
            "Normal",
            "ReplacedIdCleanedUp",
            f"application id '{run.previous_application_id}': deleted topics {', '.join(deleted) or 'none'}; "
            f"SparkApplications {', '.join(removed) or 'none'}",
            False,
        )
    )
    return Outcome(app_id, run.model_copy(update={"cleaned_up": True}), effects=effects)
