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
from .desired.common import AppRef, spec_hash
from .desired.spark import SPARK_API_VERSION
from .diff import Action
from .kafka import KafkaError
from .models import ReprocessingRun, StreamAppSpec, StreamAppStatus, TopologyDescription
from .topics import plan_internal_topics

if TYPE_CHECKING:
    from .reconcile import Context

RETRY_S = 3.0
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
        return Outcome(app_id, previous_run)
    digest = spec_hash(spec)
    new_id = desired.reprocess_application_id(spec, digest)
    name = desired.spark_application_name(ref, digest)
    run = previous_run if previous_run is not None and previous_run.spark_application == name else None
    found = ctx.kube.get(SPARK_API_VERSION, "SparkApplication", ref.namespace, name)
    if found is None:
        try:
            admin = ctx.kafka_factory(spec, ref.namespace)
            plan = plan_internal_topics(description, new_id, admin.topic_partitions())
            if plan.to_create:
                admin.create_topics(plan.to_create, spec.kafka.replication_factor)
        except KafkaError as err:
            return Outcome(app_id, run, status.Problem("KafkaUnavailable", str(err)))
        ctx.kube.apply(
            desired.build_spark_application(spec, ref, spec_digest=digest, new_application_id=new_id)
        )
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
            started_at=now,
        )
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


def wait(reason: str) -> kopf.TemporaryError:
    return kopf.TemporaryError(f"reprocessing: {reason}", delay=RETRY_S)
