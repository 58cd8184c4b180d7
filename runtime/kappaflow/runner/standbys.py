"""Standby tasks: which ones this instance hosts, recomputed after each rebalance once the group is stable.

The thread reads the group's members and their assignments from the coordinator (describe_consumer_groups)
and applies the pure rule in `placement.standby_tasks_for`: every instance computes the same answer from
the same membership, with no extra protocol. A member that sees a stale or unstable group view (its own
assignment not yet in it) just asks again shortly after.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from kappaflow.api.processor import TaskId
from kappaflow.clients.admin import GroupMember
from kappaflow.runner.placement import standby_tasks_for
from kappaflow.runner.tasks import TaskManager

log = logging.getLogger(__name__)

GroupView = Callable[[], tuple[str, list[GroupMember]]]


class StandbyPlacer:
    def __init__(
        self,
        tasks: TaskManager,
        group_view: GroupView,
        has_stores: Callable[[TaskId], bool],
        num_standbys: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._tasks = tasks
        self._group_view = group_view
        self._has_stores = has_stores
        self._num_standbys = num_standbys
        self._clock = clock
        self._due: float | None = None

    def schedule(self) -> None:
        """The assignment changed: place standbys again (if this application has any)."""
        self._due = self._clock() if self._num_standbys > 0 else None

    def maybe_place(
        self, member_id_of: Callable[[], str], assigned_of: Callable[[], list[tuple[str, int]]]
    ) -> None:
        """Place standbys if a placement is due. The member id and the assigned partitions are asked for
        only then: the stream thread calls this every loop, librdkafka answers `memberid()` with a round
        trip to its own thread (7% of the stream thread when it was asked every loop), and the assignment
        is a sorted copy."""
        if self._due is None or self._clock() < self._due:
            return
        self._due = None
        member_id = member_id_of()
        try:
            state, members = self._group_view()
        except Exception as exc:
            log.warning("cannot describe group for standby placement (%s); retrying", exc)
            self._due = self._clock() + 1.0
            return
        mine = next((m for m in members if m.member_id == member_id), None)
        if mine is None or sorted(mine.assignment) != sorted(assigned_of()) or state.upper() != "STABLE":
            self._due = self._clock() + 0.5
            return
        wanted = standby_tasks_for(member_id, members, self._tasks.task_ids_for, self._num_standbys)
        wanted -= set(self._tasks.active)
        for task_id in list(self._tasks.standby):
            if task_id not in wanted:
                self._tasks.close_standby(task_id)
        for task_id in sorted(wanted, key=lambda t: (t.subtopology, t.partition)):
            if self._has_stores(task_id):
                self._tasks.create_standby(task_id)
