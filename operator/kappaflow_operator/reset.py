"""`upgrade.mode: reset`: the steps that discard state before the new version starts from scratch.

Pure: `step` reads the snapshot and says what to do next; the pass re-enters until the reset is done
(the app lock is never held while pods stop, the group empties or the Job runs). Order, and why: stop
every pod (a reset with live members is refused by the broker), wait for an empty group (static members
linger until session.timeout.ms), drop the state volumes (a pod that kept its volume would restore state
the reset just invalidated), run `kappaflow reset`, recreate the internal topics it deleted and see them
stay for a few seconds (deletion in Kafka is asynchronous). Each step is recognisable from the cluster
(StatefulSet scaled to 0, no pods, the generation's Job), so a restarted operator resumes where it
stopped; the last step's clock is kept in status.reset.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from . import desired, status
from .desired.common import AppRef
from .effects import RETRY_S, Apply, CreateTopics, Delete, Effect, Event, Patch
from .models import ResetProgress, StreamAppSpec, StreamAppStatus, TopologyDescription
from .snapshot import JobFacts, Snapshot
from .topics import plan_internal_topics

#: Recreated internal topics must be seen present this long before the new version starts.
TOPICS_SETTLE_S = 3.0


@dataclass
class Step:
    """One pass of a reset: what to do now, and either why to wait, why it failed, or that it is done."""

    effects: list[Effect] = field(default_factory=list)
    waiting: str = ""
    delay: float = RETRY_S
    problem: status.Problem | None = None
    memory: ResetProgress | None = None
    """status.reset after this pass (None once done or failed)."""

    @property
    def done(self) -> bool:
        return not self.waiting and self.problem is None


def reset_job_name(spec: StreamAppSpec, ref: AppRef, generation: int) -> str:
    return str(desired.build_reset_job(spec, ref, generation)["metadata"]["name"])


def group_read_due(snap: Snapshot, spec: StreamAppSpec) -> bool:
    """Whether observe must ask the broker for the group's members: a reset that stopped every pod and
    has not started its Job yet."""
    sts = snap.statefulset
    return (
        spec.upgrade.mode == "reset"
        and sts is not None
        and (sts.get("spec") or {}).get("replicas") == 0
        and not snap.pods
        and (snap.reset_job is None or snap.reset_job.job is None)
    )


def step(
    snap: Snapshot,
    spec: StreamAppSpec,
    ref: AppRef,
    sts: Mapping[str, Any],
    app_id: str,
    description: TopologyDescription,
    prev: StreamAppStatus | None,
    now: datetime,
) -> Step:
    """The next step of the reset of this generation (see the module docstring)."""
    generation = snap.generation
    job = desired.build_reset_job(spec, ref, generation)
    facts = snap.reset_job or JobFacts(job["metadata"]["name"])
    memory = prev.reset if prev is not None and prev.reset is not None else None
    if memory is not None and memory.generation != generation:
        memory = None

    def wait(what: str, effects: list[Effect] | None = None, delay: float = RETRY_S) -> Step:
        since = memory.topics_present_since if memory is not None else None
        progress = ResetProgress(generation=generation, step=what, topics_present_since=since)
        return Step(effects or [], f"reset: {what}", delay, memory=progress)

    if facts.job is None:
        if (sts.get("spec") or {}).get("replicas") != 0:
            stop: list[Effect] = [
                Patch("apps/v1", "StatefulSet", ref.name, {"spec": {"replicas": 0}}),
                Event("Normal", "ResetStopping", "upgrade mode reset: stopping all pods"),
            ]
            return wait("waiting for the pods to stop", stop)
        if snap.pods:
            return wait("waiting for the pods to stop")
        if snap.group_error is not None:
            return wait(snap.group_error, delay=RETRY_S * 5)
        if snap.group_members is None:
            return wait("reading the consumer group")
        if snap.group_members:
            return wait(f"{snap.group_members} group member(s) not expired yet")
        effects: list[Effect] = [
            Delete("v1", "PersistentVolumeClaim", c["metadata"]["name"]) for c in snap.claims
        ]
        if snap.claims:
            effects.append(
                Event("Normal", "StateVolumesDeleted", f"deleted {len(snap.claims)} state volume claims")
            )
        effects += [Apply(desired.build_configmap(spec, ref, app_id)), Apply(job)]
        effects.append(Event("Normal", "ResetStarted", f"started Job {facts.name} (kappaflow reset)"))
        return wait("waiting for the reset Job", effects)
    outcome = facts.outcome
    if outcome is None:
        stuck = status.job_problem(facts)
        if stuck is not None:
            return Step(problem=status.Problem("ResetFailed", stuck.message))
        return wait("waiting for the reset Job")
    if outcome.exit_code != 0:
        return Step(
            problem=status.Problem(
                "ResetFailed", f"Job {facts.name} exited {outcome.exit_code}: {outcome.message[-512:]}"
            )
        )
    done: list[Effect] = [
        Event("Normal", "ResetCompleted", "group offsets rewound, internal topics and state dropped")
    ]
    plan = plan_internal_topics(description, app_id, snap.topics or {})
    if plan.to_create:
        # Still being deleted, a topic refuses creation: create what is missing until all stay present.
        memory = None
        create = CreateTopics(plan.to_create, spec.kafka.replication_factor, tolerate_errors=True)
        return wait("recreating the internal topics", [*done, create], delay=min(RETRY_S, 1.0))
    since = memory.topics_present_since if memory is not None else None
    if since is None or now - since < timedelta(seconds=TOPICS_SETTLE_S):
        progress = ResetProgress(
            generation=generation, step="internal topics recreated", topics_present_since=since or now
        )
        return Step(done, "reset: internal topics recreated, checking they stay", 1.0, memory=progress)
    return Step(done)
