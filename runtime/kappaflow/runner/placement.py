"""Standby placement: a pure decision every instance computes identically from the group's members.

Where the group's assignor can be forecast (`range_forecast.forecasts_group`: it reproduces the current
assignment), a task's standbys go where `range` would move the task if its instance left: the first
standby on the member that would own it after that failover, the next on the member that would own it
after that one's instance left too (`failover_owners`). A failover then lands every task of a dead
instance on a caught-up copy, by construction, with the coordinator's assignment untouched. Where it
cannot be forecast, the rule below (the ring) applies.

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
from kappaflow.runner.range_forecast import (
    RangeMember,
    counts_from_assignments,
    failover_owners,
    forecasts_group,
    order_keys,
)

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


def range_members(members: list[Any]) -> list[RangeMember] | None:
    """The group's members as `range` orders them, or None when their order cannot be reproduced."""
    keys = order_keys([(m.member_id, m.instance_id) for m in members])
    if keys is None:
        return None
    return [RangeMember(m.member_id, keys[m.member_id], instance_key(m)) for m in members]


def standby_tasks_for(
    member_id: str,
    members: list[Any],
    task_ids_for: Callable[[list[tuple[str, int]]], dict[TaskId, Any]],
    k: int,
) -> set[TaskId]:
    """Tasks whose standby this member hosts: where a failover would move them (the module docstring),
    else its share of those owned by the k instances before its own, in the order of `members`."""
    if k <= 0:
        return set()
    ranged = range_members(members)
    if ranged is not None and forecasts_group(ranged, {m.member_id: m.assignment for m in members}):
        counts = counts_from_assignments(m.assignment for m in members)
        chains = failover_owners(ranged, counts, task_ids_for, k)
        return {t for t, chain in chains.items() if any(m.member_id == member_id for m in chain)}
    return ring_standby_tasks_for(member_id, members, task_ids_for, k)


def ring_standby_tasks_for(
    member_id: str,
    members: list[Any],
    task_ids_for: Callable[[list[tuple[str, int]]], dict[TaskId, Any]],
    k: int,
) -> set[TaskId]:
    """The ring: this member's share of the tasks owned by the k instances before its own, in the
    order of `members` (where the assignor cannot be forecast)."""
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
