"""Warm-up replicas: an instance joining the group first catches up the state of the tasks it will get.

Kafka Streams keeps a task on its caught-up owner while a warm-up replica restores it on the new owner,
and moves it with a probing rebalance once the warm-up is caught up (KIP-441). With librdkafka the
assignment is the group's `range` (runner/range_forecast.py), which moves tasks the moment a member
joins. So the move is held back at the only point kappaflow controls: the join itself. Before it
subscribes, a static member (group.instance.id) forecasts the tasks `range` will give it, opens their
stores as warm-up replicas (standby tasks tailing the changelogs, at most `max.warmup.replicas` behind
at once) and subscribes only when every one is within `acceptable.recovery.lag`; until then the
current owners keep processing them. A restart with its state on disk is caught up at once and joins
at once; a pod that lost its volume, or a new one on scale-out, joins once warm, and its tasks resume
after restoring at most the acceptable lag. Every `probing.rebalance.interval.ms` it reads the group
again and forecasts anew (a probe here is a describe call, not a rebalance).

Exactly-once is untouched: a warm-up only reads changelogs, like a standby; it never processes or
commits, and ownership is still what the coordinator assigns once the member joins.

It joins at once when warming could not help: no other instance is in the group to keep the tasks
running, the member is dynamic (its place in `range` is the broker's random member id), or the
group's assignment is not one `range` forecasts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from kappaflow.api.metrics import Metrics
from kappaflow.api.processor import TaskId
from kappaflow.clients.admin import GroupMember
from kappaflow.runner.placement import range_members
from kappaflow.runner.range_forecast import RangeMember, counts_from_assignments, forecast, forecasts_group
from kappaflow.runner.tasks import TaskManager

log = logging.getLogger(__name__)

UNSTABLE_RETRY_S = 0.5  # a group in the middle of a rebalance is described again after this
# ... and after this long rebalancing, the member joins without a forecast rather than wait on
UNSTABLE_GIVE_UP_S = 30.0


@dataclass(frozen=True)
class WarmupStep:
    """What to do next: the tasks to open as warm-ups now, and whether every forecast task is caught up."""

    open_now: tuple[TaskId, ...]
    caught_up: bool


def next_warmups(
    forecast_tasks: Sequence[TaskId], lags: Mapping[TaskId, int | None], acceptable_lag: int, max_warmups: int
) -> WarmupStep:
    """Pure: given each forecast task's warm-up lag (None: not open yet), open the next ones in order
    while fewer than `max_warmups` open ones are still behind; done when all are within the lag."""
    opened = {t: lag for t in forecast_tasks if (lag := lags.get(t)) is not None}
    behind = sum(1 for lag in opened.values() if lag > acceptable_lag)
    to_open: list[TaskId] = []
    for task_id in forecast_tasks:
        if task_id not in opened and behind + len(to_open) < max_warmups:
            to_open.append(task_id)
    done = len(opened) == len(set(forecast_tasks)) and behind == 0
    return WarmupStep(tuple(to_open), done)


def tasks_to_warm(
    state: str,
    members: list[GroupMember],
    instance_id: str,
    task_ids_for: Callable[[list[tuple[str, int]]], Mapping[TaskId, object]],
    stateful: Callable[[TaskId], bool],
) -> list[TaskId] | None:
    """Pure: the stateful tasks a static member `instance_id` should warm before joining, in order; None
    when it should join now (the module docstring says when). Raises LookupError for a group that is
    rebalancing (ask again shortly)."""
    others = [m for m in members if m.instance_id != instance_id]
    if not instance_id or not others:
        return None
    if state.upper() != "STABLE":
        raise LookupError(f"group is {state}")
    ranged = range_members(members)
    if ranged is None or not forecasts_group(ranged, {m.member_id: m.assignment for m in members}):
        return None
    counts = counts_from_assignments(m.assignment for m in members)
    joiner = RangeMember("", instance_id, ("", ""))
    mine = forecast(ranged, joiner, counts, task_ids_for)
    return sorted((t for t in mine if stateful(t)), key=lambda t: (t.subtopology, t.partition))


class JoinWarmup:
    """Runs the warm-up of a joining member (the module docstring) on the stream thread, before it
    subscribes; the decisions are `tasks_to_warm` and `next_warmups`."""

    def __init__(
        self,
        tasks: TaskManager,
        group_view: Callable[[], tuple[str, list[GroupMember]]],
        instance_id: str,
        stateful: Callable[[TaskId], bool],
        metrics: Metrics,
        acceptable_lag: int,
        max_warmups: int,
        probing_interval_s: float,
        clock: Callable[[], float] = time.monotonic,
        state_lock: threading.RLock | None = None,
    ) -> None:
        """`state_lock`: held while warm-ups open, close and restore, as the stream thread holds it for
        its steps, so readers on other threads (interactive queries, a peer's snapshot request) see
        each store between two restore batches."""
        self._tasks = tasks
        self._lock = state_lock if state_lock is not None else threading.RLock()
        self._group_view = group_view
        self._instance_id = instance_id
        self._stateful = stateful
        self._metrics = metrics
        self._acceptable_lag = acceptable_lag
        self._max_warmups = max_warmups
        self._probing_interval_s = probing_interval_s
        self._clock = clock
        self.warming: list[TaskId] = []  # the forecast tasks being warmed (for describe and metrics)

    def run(self, stop: threading.Event) -> None:
        """Return when this member should join: its warm-ups are caught up, or warming cannot help."""
        planned: list[TaskId] | None = []
        next_probe = self._clock()
        started = self._clock()
        unstable_since: float | None = None
        while not stop.is_set():
            if self._clock() >= next_probe:
                try:
                    planned = self._forecast()
                except LookupError as exc:
                    unstable_since = self._clock() if unstable_since is None else unstable_since
                    if self._clock() - unstable_since >= UNSTABLE_GIVE_UP_S:
                        log.warning("%s for %.0f s: joining without warm-ups", exc, UNSTABLE_GIVE_UP_S)
                        break
                    next_probe = self._clock() + UNSTABLE_RETRY_S
                    stop.wait(UNSTABLE_RETRY_S)
                    continue
                unstable_since = None
                if not planned:
                    break
                next_probe = self._clock() + self._probing_interval_s
                with self._lock:
                    for task_id in [t for t in self._tasks.standby if t not in planned]:
                        self._tasks.close_standby(task_id)
                self.warming = list(planned)
            assert planned is not None
            lags = {t: self._tasks.standby_lag(t) for t in planned}
            self._publish(lags)
            step = next_warmups(planned, lags, self._acceptable_lag, self._max_warmups)
            if step.caught_up:
                log.info(
                    "warm-ups of %s caught up (within %d records) in %.1f s: joining the group",
                    ", ".join(str(t) for t in planned),
                    self._acceptable_lag,
                    self._clock() - started,
                )
                break
            with self._lock:
                for task_id in step.open_now:
                    self._tasks.create_standby(task_id)
                    log.info("task %s: warming up before joining", task_id)
            with self._lock:
                self._tasks.restore_step(timeout=0.02)
            time.sleep(0.001)  # let a reader waiting for the lock have it between two steps
        self.warming = []
        self._metrics.set_gauge("warmup-tasks", 0)
        self._metrics.retain_gauge("warmup-lag-records", lambda _labels: False)  # joined: no warm-ups

    def _forecast(self) -> list[TaskId] | None:
        try:
            state, members = self._group_view()
        except Exception as exc:  # no view, no forecast: joining is what kappaflow did before
            log.warning("cannot describe the group to forecast warm-ups (%s): joining now", exc)
            return None
        planned = tasks_to_warm(state, members, self._instance_id, self._tasks.task_ids_for, self._stateful)
        if planned:
            log.info("forecast tasks %s: warming them up before joining", ", ".join(map(str, planned)))
        return planned

    def _publish(self, lags: Mapping[TaskId, int | None]) -> None:
        behind = 0
        for task_id, lag in lags.items():
            if lag is not None:
                self._metrics.set_gauge("warmup-lag-records", lag, task=str(task_id))
                behind += lag > self._acceptable_lag
        self._metrics.set_gauge("warmup-tasks", behind)
