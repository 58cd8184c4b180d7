"""Standby placement: a pure decision every instance computes identically from the group's members.

There is no protocol to exchange standby assignments (librdkafka cannot add user data to the group), so
each member computes the same answer from the coordinator's member list. Members are grouped into
instances: the worker processes of one instance (`num.stream.threads` > 1) are members of their own but
one instance, as Kafka Streams' stream threads are one client, and a standby on a sibling worker would
die with the task's active copy. Instances are ordered by their first member (members sorted by
group.instance.id, else member id), and each instance hosts the standbys of the k instances before it,
never its own tasks; among an instance's workers those standby tasks are dealt out in turn, so no two
siblings host the same one. With one member per instance this is "the k members before it". Interactive
queries use the same rule to name standby hosts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from kappaflow.api.processor import TaskId

# A worker's consumer client.id: `<instance client.id>-StreamThread-<n>-consumer[@iq=<endpoint>]`.
_WORKER_CONSUMER = re.compile(r"^(?P<base>.*)-StreamThread-\d+-consumer(?P<endpoint>@iq=.*)?$")


def instance_key(member: Any) -> tuple[str, str]:
    """What the worker processes of one instance share: their instance's client.id (and query endpoint)
    and the host they connect from, so two pods given the same client.id are still two instances. A
    member that is not a worker is an instance by itself."""
    found = _WORKER_CONSUMER.match(member.client_id)
    if found is None:
        return (f"member:{member.sort_key}", member.host)
    return (f"{found['base']}{found['endpoint'] or ''}", member.host)


def standby_tasks_for(
    member_id: str,
    members: list[Any],
    task_ids_for: Callable[[list[tuple[str, int]]], dict[TaskId, Any]],
    k: int,
) -> set[TaskId]:
    """Tasks whose standby this member hosts: its share of those owned by the k instances before its
    own, in the order of `members`."""
    instances: dict[tuple[str, str], list[Any]] = {}
    for member in members:
        instances.setdefault(instance_key(member), []).append(member)
    groups = list(instances.values())
    n = len(groups)
    mine = next((i for i, g in enumerate(groups) if any(m.member_id == member_id for m in g)), -1)
    if mine < 0 or n < 2 or k <= 0:
        return set()
    siblings = [m.member_id for m in groups[mine]]
    share, of = siblings.index(member_id), len(siblings)
    result: set[TaskId] = set()
    for owner_index, owners in enumerate(groups):
        distance = (mine - owner_index) % n
        if 1 <= distance <= min(k, n - 1):
            owned: set[TaskId] = set()
            for owner in owners:
                owned.update(task_ids_for(list(owner.assignment)))
            ordered = sorted(owned, key=lambda t: (t.subtopology, t.partition))
            result.update(t for position, t in enumerate(ordered) if position % of == share)
    return result
