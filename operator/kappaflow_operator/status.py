"""Status computation, pure: phase and conditions from what the reconciler observed.

`compute_status` takes the previous status and an `Observation` and returns the next status; the kopf
layer writes it through the /status subresource. Conditions follow Kubernetes conventions: one entry
per type, `lastTransitionTime` changes only when `status` flips (not when a message is refreshed).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from .desired.common import selector_string
from .diff import Action, classify
from .models import Condition, StableSpec, StreamAppSpec, StreamAppStatus
from .models.status import Phase
from .scaling import CapResult
from .snapshot import JobFacts
from .topics import TopicPlan

READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
REPLICAS_CAPPED = "ReplicasCapped"
#: kstatus' abnormal-true conditions: Reconciling (work under way) and Stalled (stuck until a user acts).
RECONCILING = "Reconciling"
STALLED = "Stalled"
SCALE_OVERRIDDEN = "ScaleOverridden"
#: False while a state claim does not have the spec's size (a class without expansion, a larger claim).
#: Not Degraded: the app runs as it is, and `state.size` cannot be set back (the CRD refuses shrinking).
VOLUMES_MATCH_SPEC = "VolumesMatchSpec"
#: Longest StreamApp name: `<name>-<10-char revision hash>` labels the pods and must fit 63 characters.
MAX_NAME_LENGTH = 52
#: A spec is stable once all replicas stayed ready this long (seen by two passes, not one lucky probe
#: of a crash-looping pod between restarts).
STABLE_AFTER_S = 5
#: Restarts after which a container that is not ready counts as crash-looping.
CRASH_RESTARTS = 3
#: Container waiting reasons that will not resolve by waiting, and the Problem reason they map to.
_STUCK_WAITING = {
    "CrashLoopBackOff": "CrashLoopBackOff",
    "ErrImagePull": "ImagePullFailed",
    "ImagePullBackOff": "ImagePullFailed",
    "InvalidImageName": "ImagePullFailed",
    "CreateContainerConfigError": "ContainerConfigError",
    "CreateContainerError": "ContainerConfigError",
}


#: What a pass changed on an existing StatefulSet: nothing, its pod template, or its replicas.
Applying = Literal["", "roll", "scale"]


@dataclass(frozen=True)
class Problem:
    """Something that makes the app Degraded: a CamelCase reason and a human message."""

    reason: str
    message: str


@dataclass(frozen=True)
class Observation:
    """What one reconcile pass saw and decided."""

    generation: int
    desired_replicas: int
    """Effective replicas given to the StatefulSet."""
    statefulset: Mapping[str, Any] | None = None
    """The live StatefulSet (metadata + status), None if it does not exist yet."""
    topology_known: bool = True
    topic_plan: TopicPlan | None = None
    created_topics: frozenset[str] = frozenset()
    cap: CapResult | None = None
    problems: Sequence[Problem] = ()
    reprocessing_active: bool = False
    consumer_lag: int | None = None
    applied: StableSpec | None = None
    """The spec this pass applied; it becomes status.lastStableSpec once the app is Running."""
    suspended: bool = False
    """spec.suspend: the operator leaves everything as it is."""
    scale_ignored: str | None = None
    """Why spec.replicas is not what runs (autoscaling on), for the ScaleOverridden condition."""
    volume_problems: Sequence[Problem] = ()
    """Why state claims do not have state.size (volumes.py), for the VolumesMatchSpec condition."""
    resetting: str = ""
    """The step an `upgrade.mode: reset` waits for (phase Resetting); empty when none runs."""
    applying: Applying = ""
    """What this pass changed on an existing StatefulSet. `statefulset` was read before the change, so
    its status cannot show it yet: the app is not Running (nor its spec stable) until a later pass sees
    the StatefulSet controller report the change done."""
    moving: tuple[str, str] | None = None
    """(reason, message) while tasks move between pods: warm-ups, a held scale-in (movement.py)."""


def name_problem(name: str) -> Problem | None:
    """A StreamApp name the owned objects cannot carry (the CRD's CEL rule refuses it too)."""
    if "." in name:
        return Problem(
            "InvalidName",
            f"name {name!r} contains dots; it names Services (<name>-headless), which must be DNS-1035 "
            "labels: recreate the StreamApp under a name without dots",
        )
    if len(name) > MAX_NAME_LENGTH:
        return Problem(
            "InvalidName",
            f"name {name!r} has {len(name)} characters; at most {MAX_NAME_LENGTH} fit the pods' revision "
            "label and the Services: recreate the StreamApp under a shorter name",
        )
    if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name):
        return Problem("InvalidName", f"name {name!r} must start with a letter (a Service name, DNS-1035)")
    return None


def pod_problems(pods: Sequence[Mapping[str, Any]]) -> list[Problem]:
    """Pods that will not get better by waiting: crash loops, image pulls, missing config, no place to
    run; one problem per reason."""
    found: dict[str, list[str]] = {}
    for pod in pods:
        pod_name = (pod.get("metadata") or {}).get("name", "?")
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            reason = _STUCK_WAITING.get(str(waiting.get("reason") or ""))
            if reason is None and not cs.get("ready") and int(cs.get("restartCount") or 0) >= CRASH_RESTARTS:
                reason = "CrashLoopBackOff"  # between crashes a kubelet reports Running, not waiting
            if reason is None:
                continue
            detail = str(waiting.get("message") or "")
            if reason == "CrashLoopBackOff":
                last = (cs.get("lastState") or {}).get("terminated") or {}
                detail = (
                    f"restarted {cs.get('restartCount', 0)} times, last exit code {last.get('exitCode', '?')}"
                    f" ({last.get('reason') or 'Error'}); see `kubectl logs {pod_name} --previous`"
                )
            elif reason == "ImagePullFailed":
                detail = f"cannot pull image {cs.get('image', '?')}: {detail or waiting.get('reason')}"
            found.setdefault(reason, []).append(f"pod {pod_name} container {cs.get('name', '?')}: {detail}")
    for pod in pods:
        unschedulable = _unschedulable(pod)
        if unschedulable:
            pod_name = (pod.get("metadata") or {}).get("name", "?")
            found.setdefault("PodsUnschedulable", []).append(f"pod {pod_name}: {unschedulable}")
    return [Problem(reason, "; ".join(msgs)[:2048]) for reason, msgs in found.items()]


def _unschedulable(pod: Mapping[str, Any]) -> str:
    """The scheduler's message for a pod it cannot place (a state claim no StorageClass provisions, no
    node with the requested resources), empty otherwise. The scheduler retries on every cluster change,
    but only a user (or a cluster autoscaler adding a node) makes room, so it is reported, not awaited."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if (cond.get("type"), cond.get("status"), cond.get("reason")) == (
            "PodScheduled",
            "False",
            "Unschedulable",
        ):
            return str(cond.get("message") or "Unschedulable")
    return ""


def creation_problem(
    sts: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]], refusals: Sequence[Mapping[str, Any]]
) -> Problem | None:
    """Pods the StatefulSet cannot create (PodSecurity, quota, LimitRange refuse them at admission), from
    its newest FailedCreate event; only while pods are missing and only if the refusal is newer than
    every pod that exists (an old refusal, since fixed, would otherwise come back on the next scale-up)."""
    if sts is None or not refusals:
        return None
    if len(pods) >= int((sts.get("spec") or {}).get("replicas") or 0):
        return None
    newest = max(refusals, key=_event_time)
    created = [str((p.get("metadata") or {}).get("creationTimestamp") or "") for p in pods]
    if created and _event_time(newest) < max(created):
        return None
    name = (sts.get("metadata") or {}).get("name", "?")
    return Problem(
        "PodsRefused", f"StatefulSet {name} cannot create its pods: {newest.get('message', '')}"[:2048]
    )


def job_problem(job: JobFacts) -> Problem | None:
    """Why a Job that has not printed anything will not: failed (deadline, backoff), pods it cannot
    create (admission, PodSecurity, quota), pods that cannot start (image pull); None while it runs."""
    for cond in ((job.job or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Failed" and cond.get("status") == "True":
            return Problem(
                "JobFailed", f"Job {job.name} failed ({cond.get('reason')}): {cond.get('message', '')}"
            )
    stuck = pod_problems(job.pods)
    if stuck:
        return Problem(stuck[0].reason, f"Job {job.name}: {stuck[0].message}")
    if job.refusals:
        newest = max(job.refusals, key=_event_time)
        return Problem("JobFailed", f"Job {job.name} cannot create its pod: {newest.get('message', '')}")
    return None


def _event_time(event: Mapping[str, Any]) -> str:
    """RFC 3339 in UTC ('...Z'), so strings compare in time order."""
    return str(event.get("lastTimestamp") or event.get("eventTime") or "")


@dataclass(frozen=True)
class _Rollout:
    replicas: int
    ready: int
    updated: int
    rolling: bool
    settled: bool


def _rollout(sts: Mapping[str, Any], desired: int) -> _Rollout:
    status = sts.get("status") or {}
    replicas = int(status.get("replicas") or 0)
    ready = int(status.get("readyReplicas") or 0)
    updated = int(status.get("updatedReplicas") or 0)
    current_rev, update_rev = status.get("currentRevision"), status.get("updateRevision")
    rolling = bool(update_rev) and current_rev != update_rev
    generation = (sts.get("metadata") or {}).get("generation")
    observed = status.get("observedGeneration")
    settled = generation is None or (observed is not None and observed >= generation)
    return _Rollout(replicas, ready, updated if rolling else replicas, rolling and desired > 0, settled)


def _phase(obs: Observation, roll: _Rollout | None) -> tuple[Phase, str, str]:
    """(phase, Progressing reason, message), in priority order."""
    if obs.problems or (obs.topic_plan is not None and obs.topic_plan.mismatches):
        return "Degraded", "Degraded", "see the Degraded condition"
    if obs.suspended:
        return "Paused", "Suspended", "spec.suspend is true: the operator leaves the app as it is"
    if obs.resetting:
        return "Resetting", "Resetting", obs.resetting
    if obs.reprocessing_active:
        return "Reprocessing", "Reprocessing", "rebuilding state on Spark before rolling the new version"
    if not obs.topology_known:
        return "Pending", "DescribingTopology", "waiting for the describe Job to report the topology"
    if obs.topic_plan is not None and obs.topic_plan.missing_sources:
        return "Pending", "WaitingForSourceTopics", "; ".join(obs.topic_plan.problems())
    if obs.desired_replicas == 0:
        if roll is None or roll.replicas == 0:
            return "Paused", "Paused", "replicas is 0"
        return "Scaling", "ScalingDown", f"stopping {roll.replicas} pods to pause"
    if roll is None:
        return "Pending", "CreatingStatefulSet", "the StatefulSet does not exist yet"
    if obs.applying == "roll":
        return "Upgrading", "RollingUpdate", f"applied a new pod template to {obs.desired_replicas} pods"
    if obs.applying == "scale":
        return "Scaling", "Scaling", f"applied {obs.desired_replicas} replicas"
    if roll.rolling:
        return "Upgrading", "RollingUpdate", f"{roll.updated}/{obs.desired_replicas} pods updated"
    if obs.moving is not None:
        return "Scaling", *obs.moving
    if roll.ready == 0:
        return "Pending", "PodsStarting", f"0/{obs.desired_replicas} pods ready (restoring state)"
    if roll.replicas != obs.desired_replicas or roll.ready != obs.desired_replicas or not roll.settled:
        return "Scaling", "Scaling", f"{roll.ready}/{obs.desired_replicas} pods ready"
    return "Running", "RolloutComplete", f"{roll.ready}/{obs.desired_replicas} pods ready"


def desired_conditions(obs: Observation) -> list[tuple[str, str, str, str]]:
    """(type, status, reason, message) of every condition this observation implies."""
    roll = _rollout(obs.statefulset, obs.desired_replicas) if obs.statefulset is not None else None
    phase, reason, message = _phase(obs, roll)
    problems = list(obs.problems)
    if obs.topic_plan is not None:
        problems += [Problem("TopicPartitionMismatch", m.message) for m in obs.topic_plan.mismatches]
    if problems:
        degraded = ("True", problems[0].reason, "; ".join(p.message for p in problems))
    else:
        degraded = ("False", "AsExpected", "")
    if phase == "Running":
        ready = ("True", "AllReplicasReady", message)
    else:
        ready = (
            "False",
            reason if phase != "Degraded" else degraded[1],
            message if phase != "Degraded" else "",
        )
    progressing_phases = ("Pending", "Scaling", "Upgrading", "Reprocessing", "Resetting")
    progressing = ("True", reason, message) if phase in progressing_phases else ("False", reason, message)
    conditions = [
        (READY, *ready),
        (PROGRESSING, *progressing),
        (DEGRADED, *degraded),
    ]
    # kstatus: Reconciling while work is under way, Stalled when only a user can unblock it.
    conditions.append(
        (RECONCILING, *progressing) if progressing[0] == "True" else (RECONCILING, "False", reason, "")
    )
    if problems:
        conditions.append((STALLED, "True", degraded[1], degraded[2]))
    else:
        conditions.append((STALLED, "False", "AsExpected", ""))
    if obs.cap is not None and obs.cap.reason:
        conditions.append((REPLICAS_CAPPED, "True", "ExceedsPartitionCount", obs.cap.reason))
    else:
        conditions.append((REPLICAS_CAPPED, "False", "WithinPartitionCount", ""))
    if obs.scale_ignored:
        conditions.append((SCALE_OVERRIDDEN, "True", "AutoscalingEnabled", obs.scale_ignored))
    else:
        conditions.append((SCALE_OVERRIDDEN, "False", "AsRequested", ""))
    if obs.volume_problems:
        messages = "; ".join(p.message for p in obs.volume_problems)
        conditions.append((VOLUMES_MATCH_SPEC, "False", obs.volume_problems[0].reason, messages))
    else:
        conditions.append((VOLUMES_MATCH_SPEC, "True", "AsRequested", ""))
    return conditions


def merge_conditions(
    previous: Sequence[Condition],
    wanted: Sequence[tuple[str, str, str, str]],
    now: datetime,
    generation: int | None = None,
) -> list[Condition]:
    """New conditions, keeping each one's lastTransitionTime when its status did not change."""
    before = {c.type: c for c in previous}
    out: list[Condition] = []
    for type_, status, reason, message in wanted:
        old = before.get(type_)
        since = old.last_transition_time if old is not None and old.status == status else now
        out.append(
            Condition.model_validate(
                {
                    "type": type_,
                    "status": status,
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": since,
                    "observedGeneration": generation,
                }
            )
        )
    wanted_types = {w[0] for w in wanted}
    # Conditions owned by someone else (or a newer operator) are kept untouched.
    out += [c for c in previous if c.type not in wanted_types]
    return out


def compute_status(
    previous: StreamAppStatus | None, obs: Observation, *, name: str, now: datetime
) -> StreamAppStatus:
    """The next status: previous fields the reconcile pass does not own are carried over."""
    base = previous or StreamAppStatus()
    roll = _rollout(obs.statefulset, obs.desired_replicas) if obs.statefulset is not None else None
    phase, _, _ = _phase(obs, roll)
    updates: dict[str, Any] = {
        "observed_generation": obs.generation,
        "phase": phase,
        "conditions": merge_conditions(base.conditions, desired_conditions(obs), now, obs.generation),
        "replicas": roll.replicas if roll is not None else 0,
        "ready_replicas": roll.ready if roll is not None else 0,
        "selector": selector_string(name),
        "last_reconciled": now,
    }
    if obs.topic_plan is not None:
        updates["internal_topics"] = obs.topic_plan.status(obs.created_topics)
    if obs.consumer_lag is not None:
        updates["consumer_lag"] = obs.consumer_lag
    if phase == "Running" and obs.applied is not None:
        updates["application_id"] = obs.applied.application_id
        was_ready = condition(base, READY)
        steady = timedelta(seconds=STABLE_AFTER_S)
        if (
            was_ready is not None
            and was_ready.status == "True"
            and now - was_ready.last_transition_time >= steady
        ):
            # Every replica stayed ready on this spec: a later failed upgrade can fall back to it.
            updates["last_stable_spec"] = obs.applied
    return base.model_copy(update=updates)


def condition(status: StreamAppStatus, type_: str) -> Condition | None:
    """The condition of `type_`, if present."""
    return next((c for c in status.conditions if c.type == type_), None)


def rollback_due(
    *,
    spec: StreamAppSpec,
    stable: StableSpec | None,
    upgraded_at: datetime | None,
    now: datetime,
    statefulset: Mapping[str, Any] | None,
    desired: int,
) -> str | None:
    """Why the running upgrade must be rolled back to `stable`, or None.

    Due when the pods have not all become ready on the new template within
    `spec.upgrade.progressDeadlineSeconds` of when it was applied (`upgraded_at`), and the stable spec
    differs from `spec` in what the pods run (a replicas-only difference is a scale, never rolled back).
    """
    if stable is None or stable.spec is None or upgraded_at is None or statefulset is None:
        return None
    deadline = spec.upgrade.progress_deadline_seconds
    if now - upgraded_at < timedelta(seconds=deadline):
        return None
    try:
        stable_spec = StreamAppSpec.model_validate(stable.spec)
    except ValueError:
        return None
    if classify(stable_spec, spec).action in (Action.NONE, Action.SCALE):
        return None
    roll = _rollout(statefulset, desired)
    if not roll.rolling and roll.ready == desired and roll.settled:
        return None
    return (
        f"the upgrade did not complete within upgrade.progressDeadlineSeconds ({deadline}s): "
        f"{roll.ready}/{desired} pods ready"
    )
