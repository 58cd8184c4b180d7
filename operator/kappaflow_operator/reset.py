"""`upgrade.mode: reset`: the steps that discard state before the new version starts from scratch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import kopf

from . import desired, status
from .context import RETRY_S
from .desired.common import APP_LABEL, AppRef
from .desired.jobs import DESCRIBE_JOB_LABEL
from .kafka import KafkaError
from .models import StreamAppSpec
from .observe import job_problem

if TYPE_CHECKING:
    from .context import Context


def run_reset(
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
            ctx.event(body, "Normal", "ResetStopping", "upgrade mode reset: stopping all pods")
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
            ctx.event(body, "Normal", "StateVolumesDeleted", f"deleted {len(claims)} state volume claims")
        ctx.kube.apply(desired.build_configmap(spec, ref, app_id))
        ctx.kube.apply(job)
        ctx.event(body, "Normal", "ResetStarted", f"started Job {job_name} (kappaflow reset)")
        raise kopf.TemporaryError("reset: waiting for the reset Job", delay=RETRY_S)
    outcome = ctx.kube.job_outcome(ref.namespace, job_name)
    if outcome is None:
        stuck = job_problem(ctx.kube, ref.namespace, job_name)
        if stuck is not None:
            return status.Problem("ResetFailed", stuck.message)
        raise kopf.TemporaryError("reset: waiting for the reset Job", delay=RETRY_S)
    if outcome.exit_code != 0:
        return status.Problem(
            "ResetFailed", f"Job {job_name} exited {outcome.exit_code}: {outcome.message[-512:]}"
        )
    ctx.event(body, "Normal", "ResetCompleted", "group offsets rewound, internal topics and state dropped")
    return None
