"""Tasks on the move between pods, pure: what the pods report, and the scaling rules that follow.

The runtime already keeps a task where its state is (docs/concepts.md, "Task placement"): a pod joining
the group first warms up the tasks `range` will give it and joins only once they are within
`acceptable.recovery.lag`, and each task's standby sits on the member `range` gives it when its owner
leaves. What the operator adds is to wait for these instead of working against them:

- *Scale-out*: nothing to hold back (the new pod's warm-ups hold the move themselves), so the operator
  shows it - status.taskMovement and the autoscaler's block carry the warm-ups (count, largest lag), the
  Progressing condition says on which pod - and the autoscaler takes no other step while any warm-up
  runs (`scaling.autoscale`): a second step would move tasks again before the first move landed.
- *Scale-in*: a StatefulSet removes its highest ordinals. Before it loses them, every active task on
  those pods should have a standby within `acceptable.recovery.lag` on a pod that stays, so the task
  resumes there after the rebalance having restored at most that lag. `scale_in_step` holds the old
  replica count until that is true or `spec.scaleIn.standbyWaitSeconds` has passed since the hold began
  (kept in status, so an operator restart does not start the wait again); the pass requeues meanwhile,
  it never sleeps.

Why each pod's own `GET /health/ready` (metrics port) rather than `GET /v1/tasks` (query port): both
carry the same per-pod `tasks` map ({task: {role, lag}}), but the query server runs only with
interactive queries enabled, while the health endpoint always does (the probes use it) and answers with
the same body when the pod is not ready (503) - which a pod still warming up is not. A pod's local part
is enough: warm-ups exist only there (a warming pod is not in the group yet), and the scale-in rule needs
the removed pods' active tasks and the staying pods' standby lags, both local facts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kappaflow_contract.keys import DEFAULTS

from . import scaling
from .models import StreamAppSpec, StreamAppStatus, TaskMovement
from .snapshot import LocalTask, PodTasks

#: The path read on each pod's metrics port: its state and its own tasks, ready or not.
HEALTH_PATH = "/health/ready"
ROLES = frozenset({"active", "restoring", "standby", "warmup"})
#: At most this many task names in a message (status stays readable with hundreds of partitions).
NAMES_SHOWN = 10


def parse_pod_tasks(pod: str, body: bytes | str) -> PodTasks:
    """A pod's health answer -> its tasks. Roles it does not know are skipped (a newer runtime)."""
    try:
        doc: Any = json.loads(body)
    except ValueError as err:
        return PodTasks(pod, error=f"{HEALTH_PATH} answered no JSON: {err}")
    raw = doc.get("tasks") if isinstance(doc, dict) else None
    if not isinstance(raw, dict):
        return PodTasks(pod, error=f"{HEALTH_PATH} answered no tasks (a runtime older than task roles?)")
    tasks: dict[str, LocalTask] = {}
    for task, entry in raw.items():
        role = entry.get("role") if isinstance(entry, dict) else None
        if role not in ROLES:
            continue
        lag = entry.get("lag")
        tasks[str(task)] = LocalTask(
            str(role), lag if isinstance(lag, int) and not isinstance(lag, bool) else None
        )
    return PodTasks(pod, tasks)


def ordinal(pod: str, name: str) -> int | None:
    """A StatefulSet pod's ordinal (`<name>-<n>`), None for any other name."""
    match = re.fullmatch(re.escape(name) + r"-(\d+)", pod)
    return int(match.group(1)) if match else None


def acceptable_recovery_lag(spec: StreamAppSpec) -> int:
    """The lag the pods count as caught up: spec.config's `acceptable.recovery.lag`, else the runtime's
    default (Kafka Streams' 10000). config_problem refused a value that is not an integer."""
    value = spec.config.get("acceptable.recovery.lag")
    try:
        return int(value) if value is not None else int(DEFAULTS["acceptable.recovery.lag"])
    except ValueError:
        return int(DEFAULTS["acceptable.recovery.lag"])


def _names(items: Sequence[str]) -> str:
    shown = ", ".join(items[:NAMES_SHOWN])
    return shown + (f" and {len(items) - NAMES_SHOWN} more" if len(items) > NAMES_SHOWN else "")


@dataclass(frozen=True)
class Warmups:
    """The warm-ups and restorations the pods report."""

    count: int = 0
    max_lag: int | None = None
    pods: tuple[str, ...] = ()
    restoring: int = 0
    unreachable: tuple[str, ...] = ()
    """`pod: why` for each pod whose answer is missing."""

    def message(self, scaling_out: bool) -> str:
        """The Progressing condition's message while warm-ups run (empty when none do)."""
        if not self.count:
            return ""
        lag = f"largest lag {self.max_lag} records" if self.max_lag is not None else "lag not reported"
        pods = "pod" if len(self.pods) == 1 else "pods"
        return (
            f"{'scaling out: ' if scaling_out else ''}{self.count} tasks warming up on {pods} "
            f"{_names(self.pods)} ({lag}); their current owners keep processing them until "
            + ("it joins" if len(self.pods) == 1 else "they join")
        )


def warmups(pods: Sequence[PodTasks]) -> Warmups:
    """Count the warm-ups (and restoring active tasks) across the pods' answers."""
    lags = [t.lag for p in pods for t in p.tasks.values() if t.role == "warmup"]
    known = [lag for lag in lags if lag is not None]
    return Warmups(
        count=len(lags),
        max_lag=max(known) if known else None,
        pods=tuple(sorted(p.pod for p in pods if any(t.role == "warmup" for t in p.tasks.values()))),
        restoring=sum(1 for p in pods for t in p.tasks.values() if t.role == "restoring"),
        unreachable=tuple(f"{p.pod}: {p.error}" for p in sorted(pods, key=lambda p: p.pod) if p.error),
    )


def uncovered_tasks(pods: Sequence[PodTasks], name: str, target: int, acceptable_lag: int) -> tuple[str, ...]:
    """Active tasks (`task@pod`) on the pods a scale-in to `target` removes that have no standby within
    `acceptable_lag` on a pod that stays. A standby whose lag is not reported does not count (it may be
    anywhere behind); a staying pod that did not answer covers nothing; a removed pod that did not answer
    has nothing to hand over that waiting would help (its tasks left with it or move regardless)."""
    covered = {
        task
        for p in pods
        if (n := ordinal(p.pod, name)) is not None and n < target
        for task, t in p.tasks.items()
        if t.role == "standby" and t.lag is not None and t.lag <= acceptable_lag
    }
    # Only tasks some pod keeps a standby of have state to hand over: a stateless task (a sub-topology
    # with no store, e.g. the word count's splitting one) never has a standby, and waiting for one would
    # hold every scale-in for the whole timeout.
    # Every task counts when a pod did not answer: the standbys it keeps are unknown.
    kept_standby = {task for p in pods for task, t in p.tasks.items() if t.role == "standby"}
    everything = any(p.error for p in pods)
    return tuple(
        f"{task}@{p.pod}"
        for p in sorted(pods, key=lambda p: ordinal(p.pod, name) or 0)
        if (n := ordinal(p.pod, name)) is not None and n >= target
        for task, t in sorted(p.tasks.items())
        if t.role in ("active", "restoring") and (everything or task in kept_standby) and task not in covered
    )


@dataclass(frozen=True)
class ScaleInStep:
    """What the StatefulSet gets this pass, and whether (and why) a scale-in is held."""

    replicas: int
    target: int
    """Where the scale goes (the replicas once released)."""
    held: bool = False
    message: str = ""
    """Why it is held, or why it proceeded without every standby caught up; empty otherwise."""
    waiting_for: tuple[str, ...] = ()
    since: datetime | None = None
    """When the hold began (kept while it lasts)."""
    retry_s: float = 0.0
    """When to look again while held."""


def scale_in_step(
    *,
    name: str,
    current: int,
    target: int,
    pods: Sequence[PodTasks] | None,
    acceptable_lag: int,
    standby_replicas: int,
    wait_s: int,
    held_to: int | None,
    held_since: datetime | None,
    now: datetime,
    retry_s: float,
) -> ScaleInStep:
    """Hold a scale-in `current -> target` while a removed pod's active task has no caught-up standby on
    a staying pod, for at most `wait_s` from when the hold on this target began.

    A scale-in by several pods goes part of the way when only that part is covered: the runtime puts a
    task's standby where `range` sends the task if its owner *alone* leaves, so removing pods 2 and 3 at
    once often finds 3's standbys on 2. Removing the highest pods whose tasks are covered first lets the
    group place the standbys for the next step, which the following passes wait for in turn. (Coverage
    only grows as fewer pods go, so the first covered count from the target up is the furthest step.)

    Not held: a scale-up or no change; a pause (`target` 0: nothing stays to hand over to); no standby
    replicas or `wait_s` 0 (nothing to wait for). `pods` None (not read) counts as nothing verified.
    """
    if not 0 < target < current or standby_replicas == 0 or wait_s == 0:
        return ScaleInStep(target, target)
    since = held_since if held_to == target and held_since is not None else now
    if pods is None:
        waiting: tuple[str, ...] = ("(the pods' tasks were not read)",)
    else:
        waiting = uncovered_tasks(pods, name, target, acceptable_lag)
    if not waiting:
        return ScaleInStep(target, target)
    removed = ", ".join(f"{name}-{i}" for i in range(target, current))
    left = wait_s - (now - since).total_seconds()
    what = (
        f"{len(waiting)} active tasks of {removed} have no standby within acceptable.recovery.lag "
        f"({acceptable_lag} records) on the pods that stay: {_names(waiting)}"
    )
    if left <= 0:
        return ScaleInStep(
            target,
            target,
            message=f"scale-in {current} -> {target} proceeds after waiting {wait_s}s; {what} (they restore)",
            waiting_for=waiting,
        )
    covered = (
        []
        if pods is None
        else [n for n in range(target + 1, current) if not uncovered_tasks(pods, name, n, acceptable_lag)]
    )
    step_to = covered[0] if covered else current
    first = f", going to {step_to} first" if step_to < current else ""
    return ScaleInStep(
        step_to,
        target,
        held=True,
        message=f"scale-in {current} -> {target} held for caught-up standbys ({int(left)}s left{first}): "
        + what,
        waiting_for=waiting,
        since=since,
        retry_s=min(retry_s, max(left, 1.0)),
    )


def read_due(
    spec: StreamAppSpec, prev: StreamAppStatus | None, statefulset_replicas: int, tick: bool
) -> bool:
    """Whether a pass reads the pods' tasks: every timer pass (warm-ups for status and the autoscaler),
    and any pass that may scale in (the StatefulSet runs more than is requested) or holds one."""
    if spec.replicas == 0 or statefulset_replicas == 0:
        return False
    if tick or (prev is not None and prev.task_movement is not None and prev.task_movement.scale_in_to):
        return True
    max_parallelism = prev.topology.max_parallelism if prev is not None and prev.topology else None
    return scaling.effective_replicas(spec, prev, max_parallelism).replicas < statefulset_replicas


def status_block(found: Warmups, step: ScaleInStep, scaling_out: bool) -> TaskMovement | None:
    """status.taskMovement, None when nothing moves and every pod answered."""
    if not (found.count or found.restoring or step.held or found.unreachable):
        return None
    return TaskMovement(
        warmup_tasks=found.count,
        warmup_max_lag=found.max_lag,
        warmup_pods=list(found.pods),
        restoring_tasks=found.restoring,
        scale_in_to=step.target if step.held else None,
        scale_in_held_since=step.since,
        waiting_for=list(step.waiting_for[: NAMES_SHOWN * 10]),
        unreachable_pods=list(found.unreachable),
        message=step.message if step.held else found.message(scaling_out),
    )


def held_memory(prev: StreamAppStatus | None) -> tuple[int | None, datetime | None]:
    """The held scale-in's target and start, from status."""
    memory = prev.task_movement if prev is not None else None
    if memory is None:
        return None, None
    return memory.scale_in_to, memory.scale_in_held_since


def is_scaling_out(found: Warmups, name: str, statefulset: Mapping[str, Any] | None) -> bool:
    """Whether the warm-ups are a scale-out's: on a pod past the ready ones (a new, highest ordinal)."""
    ready = int(((statefulset or {}).get("status") or {}).get("readyReplicas") or 0)
    return any((ordinal(p, name) or 0) >= ready for p in found.pods)


@dataclass(frozen=True)
class Moves:
    """One pass's view of moving tasks: the warm-ups, the scale-in step, what status and the Progressing
    condition say about them."""

    found: Warmups
    step: ScaleInStep
    block: TaskMovement | None
    """status.taskMovement (meaningful only when the pods were read)."""
    progressing: tuple[str, str] | None
    """(reason, message) for the Progressing condition while tasks move; None otherwise."""


def plan(
    spec: StreamAppSpec,
    prev: StreamAppStatus | None,
    *,
    name: str,
    pods: Sequence[PodTasks] | None,
    statefulset: Mapping[str, Any] | None,
    current: int,
    target: int,
    now: datetime,
    retry_s: float,
) -> Moves:
    """Warm-ups from the pods' answers and the scale-in `current -> target` (held or not)."""
    found = warmups(pods or ())
    held_to, held_since = held_memory(prev)
    step = scale_in_step(
        name=name,
        current=current,
        target=target,
        pods=pods,
        acceptable_lag=acceptable_recovery_lag(spec),
        standby_replicas=spec.standby_replicas,
        wait_s=spec.scale_in.standby_wait_seconds,
        held_to=held_to,
        held_since=held_since,
        now=now,
        retry_s=retry_s,
    )
    out = is_scaling_out(found, name, statefulset)
    progressing = None
    if step.held:
        progressing = ("ScaleInHeld", step.message)
    elif found.count:
        progressing = ("WarmingUp", found.message(out))
    return Moves(found, step, status_block(found, step, out), progressing)
