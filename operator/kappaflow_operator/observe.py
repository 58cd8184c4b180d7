"""One read of the cluster per reconcile pass: the `Snapshot` every decision of that pass is made from.

Why a snapshot, read under the per-app lock at the start of each pass: kopf hands each handler the body
it saw when the event (or the timer tick) was queued. The update handler and the periodic timer run one
after the other, so the second one used to act on a copy older than what the first had just written -
and undo it (a completed reprocess rolled back to the old application id; the autoscaler's status
flapped). Reading the StreamApp again once the lock is held, and taking the running application id from
the StatefulSet (what the pods really run) instead of from a status that may lag behind, makes every
pass start from the newest state, whichever handler runs it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import status
from .desired.common import APP_LABEL
from .desired.jobs import DESCRIBE_JOB_LABEL
from .k8s import Kube
from .models import API_VERSION

#: The application id the StatefulSet's pods run with, written with every apply.
APPLICATION_ID_ANNOTATION = "kappaflow.io/application-id"


@dataclass(frozen=True)
class Snapshot:
    """What one pass knows about one StreamApp: the object itself and what it owns, read once."""

    app: Mapping[str, Any] | None
    """The StreamApp as stored now (None once it is gone)."""
    statefulset: Mapping[str, Any] | None = None
    pods: Sequence[Mapping[str, Any]] = field(default_factory=list)
    """The StatefulSet's pods (Jobs' pods excluded)."""
    refusals: Sequence[Mapping[str, Any]] = field(default_factory=list)
    """The StatefulSet's FailedCreate events, read only while it has fewer pods than replicas."""

    @property
    def deleting(self) -> bool:
        return bool(self.app is not None and self.app["metadata"].get("deletionTimestamp"))

    @property
    def running_application_id(self) -> str | None:
        """The application id the pods run under, from the StatefulSet that runs them."""
        annotations = (self.statefulset or {}).get("metadata", {}).get("annotations") or {}
        value = annotations.get(APPLICATION_ID_ANNOTATION)
        return str(value) if value else None


def observe(kube: Kube, namespace: str, name: str) -> Snapshot:
    """Read the StreamApp, its StatefulSet and its pods (three GETs; a missing app ends there), and the
    StatefulSet's pod creation failures while pods are missing (admission, quota: only events say so)."""
    app = kube.get(API_VERSION, "StreamApp", namespace, name)
    if app is None:
        return Snapshot(None)
    sts = kube.get("apps/v1", "StatefulSet", namespace, name)
    pods = kube.list("v1", "Pod", namespace, f"{APP_LABEL}={name},!{DESCRIBE_JOB_LABEL}") if sts else []
    refusals: list[dict[str, Any]] = []
    if sts and len(pods) < int((sts.get("spec") or {}).get("replicas") or 0):
        fields = f"involvedObject.kind=StatefulSet,involvedObject.name={name},reason=FailedCreate"
        refusals = kube.list("v1", "Event", namespace, fields=fields)
    return Snapshot(app, sts, pods, refusals)


def job_problem(kube: Kube, namespace: str, job_name: str) -> status.Problem | None:
    """Why a Job that has not printed anything will not: failed (deadline, backoff), pods it cannot
    create (admission, PodSecurity, quota), pods that cannot start (image pull); None while it runs."""
    job = kube.get("batch/v1", "Job", namespace, job_name) or {}
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Failed" and cond.get("status") == "True":
            return status.Problem(
                "JobFailed", f"Job {job_name} failed ({cond.get('reason')}): {cond.get('message', '')}"
            )
    stuck = status.pod_problems(kube.list("v1", "Pod", namespace, f"job-name={job_name}"))
    if stuck:
        return status.Problem(stuck[0].reason, f"Job {job_name}: {stuck[0].message}")
    fields = f"involvedObject.kind=Job,involvedObject.name={job_name},reason=FailedCreate"
    refused = kube.list("v1", "Event", namespace, fields=fields)
    if refused:
        newest = max(refused, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
        return status.Problem(
            "JobFailed", f"Job {job_name} cannot create its pod: {newest.get('message', '')}"
        )
    return None
