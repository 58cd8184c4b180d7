"""Forecasting the group's own assignor: where `range` will put each task when the group changes.

Why forecast instead of assign: librdkafka cannot run a custom assignor, and under exactly_once_v2 the
only thing that keeps two members from processing one partition in one generation is the coordinator's
assignment (a TxnOffsetCommit is fenced by member and generation, not by partition ownership). So the
active owner of every task stays, always, what the group's `range` assignor said for that generation;
kappaflow makes the assignment state-aware by moving *state* to where `range` will put a task before it
gets there, never by moving a task to where its state is (docs/concepts.md, "Task placement").

`range` is a pure function of the sorted members and the partition counts of the subscribed topics
(librdkafka's rdkafka_range_assignor.c, as Java's RangeAssignor): per topic, members in order, the first
`count % n` members take one partition more. librdkafka orders static members by group.instance.id and
dynamic ones by member id. So every member can compute what `range` would answer for any member list:
  - `failover_owners`: the survivors' new owner of each task if its instance left (where its standby
    must live for a failover to find one; the next standby where the task goes if that one left too);
  - `forecast`: a joining instance's tasks before it joins (what it warms up first).
A forecast is trusted only when `forecasts_group` reproduces the group's current assignment exactly
(another assignor, the KIP-848 protocol, mixed static and dynamic members or a subscription changing
in an upgrade all fail that check, and callers fall back to the placement that does not forecast).

Everything here is pure: members in, assignments out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from kappaflow.api.processor import TaskId

TopicPartition = tuple[str, int]
TaskIdsFor = Callable[[list[TopicPartition]], Mapping[TaskId, object]]


@dataclass(frozen=True)
class RangeMember:
    """What `range` sees of a member: its order key and the instance it belongs to (an instance's
    worker processes leave together when it dies)."""

    member_id: str
    order_key: str
    instance: tuple[str, str]


def order_keys(members: Sequence[tuple[str, str]]) -> dict[str, str] | None:
    """member id -> the key librdkafka's range assignor sorts it by, for (member id, instance id)
    pairs: the group.instance.id when every member is static, the member id when none is. None when
    static and dynamic members are mixed: librdkafka's comparator is then no total order that can be
    reproduced, so nothing is forecast."""
    static = [instance for _member, instance in members if instance]
    if static and len(static) != len(members):
        return None
    return {member: (instance or member) for member, instance in members}


def range_assignment(keys: Iterable[str], counts: Mapping[str, int]) -> dict[str, set[TopicPartition]]:
    """What librdkafka's `range` assigns each member (by order key) when every member subscribes to
    every topic of `counts` (topic -> partition count)."""
    ordered = sorted(set(keys))
    result: dict[str, set[TopicPartition]] = {key: set() for key in ordered}
    if not ordered:
        return result
    n = len(ordered)
    for topic, count in sorted(counts.items()):
        if count < 0:
            raise ValueError(f"partition count of topic {topic!r} must not be negative, got {count}")
        per_member, extra = divmod(count, n)
        for position, key in enumerate(ordered):
            start = per_member * position + min(position, extra)
            length = per_member + (1 if position < extra else 0)
            result[key].update((topic, p) for p in range(start, start + length))
    return result


def counts_from_assignments(assignments: Iterable[Iterable[TopicPartition]]) -> dict[str, int]:
    """Partition counts as a complete assignment shows them (range assigns every partition)."""
    counts: dict[str, int] = {}
    for assignment in assignments:
        for topic, partition in assignment:
            counts[topic] = max(counts.get(topic, 0), partition + 1)
    return counts


def forecasts_group(members: Sequence[RangeMember], actual: Mapping[str, Iterable[TopicPartition]]) -> bool:
    """True when `range` over `members` reproduces `actual` (member id -> assigned partitions) exactly:
    the group runs the assignor this module forecasts, so its answers for other member lists hold too."""
    if not members or len({m.order_key for m in members}) != len(members):
        return False
    counts = counts_from_assignments(actual.values())
    expected = range_assignment((m.order_key for m in members), counts)
    return all(expected[m.order_key] == set(actual.get(m.member_id, ())) for m in members)


def task_owners(
    members: Sequence[RangeMember], counts: Mapping[str, int], task_ids_for: TaskIdsFor
) -> dict[TaskId, RangeMember]:
    """Task -> the member `range` gives it, over `members` (co-partitioned topics of a task have the
    same partition count, so all its partitions land on one member)."""
    by_key = {m.order_key: m for m in members}
    owners: dict[TaskId, RangeMember] = {}
    for key, partitions in range_assignment(by_key, counts).items():
        for task_id in task_ids_for(sorted(partitions)):
            owners.setdefault(task_id, by_key[key])
    return owners


def failover_owners(
    members: Sequence[RangeMember],
    counts: Mapping[str, int],
    task_ids_for: TaskIdsFor,
    depth: int,
) -> dict[TaskId, list[RangeMember]]:
    """Task -> the members that would own it after its owner's instance left, then after that one's
    instance left too, ... up to `depth` (the standbys a failover finds, nearest first). Never a member
    of an instance that held the task before in the chain, so no instance holds two copies."""
    owners_without: dict[frozenset[tuple[str, str]], dict[TaskId, RangeMember]] = {}

    def owners_after(gone: frozenset[tuple[str, str]]) -> dict[TaskId, RangeMember]:
        if gone not in owners_without:
            survivors = [m for m in members if m.instance not in gone]
            owners_without[gone] = task_owners(survivors, counts, task_ids_for)
        return owners_without[gone]

    result: dict[TaskId, list[RangeMember]] = {}
    for task_id, owner in owners_after(frozenset()).items():
        gone = {owner.instance}
        chain: list[RangeMember] = []
        while len(chain) < depth:
            successor = owners_after(frozenset(gone)).get(task_id)
            if successor is None:
                break
            chain.append(successor)
            gone.add(successor.instance)
        result[task_id] = chain
    return result


def forecast(
    members: Sequence[RangeMember], joiner: RangeMember, counts: Mapping[str, int], task_ids_for: TaskIdsFor
) -> set[TaskId]:
    """The tasks `range` gives `joiner` once it is in the group (a static member already in it, e.g.
    restarted within its session, keeps its place)."""
    others = [m for m in members if m.order_key != joiner.order_key]
    owners = task_owners([*others, joiner], counts, task_ids_for)
    return {task_id for task_id, owner in owners.items() if owner.order_key == joiner.order_key}
