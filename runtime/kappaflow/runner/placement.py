"""Standby placement: a pure decision every instance computes identically from the group's members.

There is no protocol to exchange standby assignments (librdkafka cannot add user data to the group), so
each instance sorts the members (by group.instance.id, else member id) and hosts the standbys of the k
members before it, never its own tasks. Interactive queries use the same rule to name standby hosts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kappaflow.api.processor import TaskId


def standby_tasks_for(
    member_id: str,
    members: list[Any],
    task_ids_for: Callable[[list[tuple[str, int]]], dict[TaskId, Any]],
    k: int,
) -> set[TaskId]:
    """Tasks whose standby this member hosts: those owned by the k members before it in sorted order."""
    n = len(members)
    index = next((i for i, m in enumerate(members) if m.member_id == member_id), -1)
    if index < 0 or n < 2 or k <= 0:
        return set()
    result: set[TaskId] = set()
    for owner_index, member in enumerate(members):
        distance = (index - owner_index) % n
        if 1 <= distance <= min(k, n - 1):
            result.update(task_ids_for(list(member.assignment)))
    return result
