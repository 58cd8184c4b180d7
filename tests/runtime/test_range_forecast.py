"""The forecast of the group's `range` assignor and the failover-aware standby placement built on it.

Pure functions, checked exhaustively over small groups: every member count, partition count, standby
count and worker layout up to the sizes below."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from kappaflow.api.processor import TaskId
from kappaflow.clients.admin import GroupMember
from kappaflow.runner.placement import range_members, standby_tasks_for
from kappaflow.runner.range_forecast import (
    RangeMember,
    counts_from_assignments,
    failover_owners,
    forecast,
    forecasts_group,
    order_keys,
    range_assignment,
    task_owners,
)
from kappaflow.runner.warmup import WarmupStep, next_warmups, tasks_to_warm


def task_ids_for(partitions: list[tuple[str, int]]) -> dict[TaskId, list[tuple[str, int]]]:
    """Two co-partitioned source topics feed sub-topology 0; a repartition topic feeds sub-topology 1."""
    result: dict[TaskId, list[tuple[str, int]]] = {}
    for topic, partition in partitions:
        sub = 1 if topic == "rep" else 0
        result.setdefault(TaskId(sub, partition), []).append((topic, partition))
    return result


def group(instances: int, workers: int, counts: dict[str, int]) -> list[GroupMember]:
    """Static members `pod-i-w` (instances of `workers` worker processes each, as the client ids of
    worker consumers say), assigned what `range` assigns them."""
    keys = [f"pod-{i}-{w}" for i in range(instances) for w in range(workers)]
    assigned = range_assignment(keys, counts)
    return [
        GroupMember(
            f"{key}-uuid",
            f"app-{key[:5]}-StreamThread-{key[-1]}-consumer",
            key,
            tuple(sorted(assigned[key])),
            "10.0.0.1",
        )
        for key in keys
    ]


@pytest.mark.parametrize("members", range(1, 7))
def test_range_deals_every_partition_once_in_contiguous_balanced_co_partitioned_ranges(members):
    for count, other in itertools.product(range(0, 14), range(0, 5)):
        counts = {"a": count, "b": count, "c": other}
        keys = [f"m{i}" for i in reversed(range(members))]  # input order does not matter
        assigned = range_assignment(keys, counts)
        for topic, n in counts.items():
            owned = [sorted(p for t, p in assigned[k] if t == topic) for k in sorted(keys)]
            assert sorted(p for ps in owned for p in ps) == list(range(n))  # each partition exactly once
            sizes = [len(ps) for ps in owned]
            assert sizes == sorted(sizes, reverse=True) and max(sizes) - min(sizes) <= 1
            flat = [p for ps in owned for p in ps]
            assert flat == sorted(flat)  # the first members take the first partitions
        for key in keys:  # co-partitioned topics: partition i of a and b on one member
            assert {p for t, p in assigned[key] if t == "a"} == {p for t, p in assigned[key] if t == "b"}


def test_range_refuses_a_negative_partition_count_naming_the_topic():
    with pytest.raises(ValueError, match="'a'"):
        range_assignment(["m0"], {"a": -1})


def test_order_keys_follow_librdkafka_static_by_instance_dynamic_by_member_mixed_unforecastable():
    assert order_keys([("z-1", "pod-a"), ("a-1", "pod-b")]) == {"z-1": "pod-a", "a-1": "pod-b"}
    assert order_keys([("z-1", ""), ("a-1", "")]) == {"z-1": "z-1", "a-1": "a-1"}
    assert order_keys([("z-1", "pod-a"), ("a-1", "")]) is None


def test_the_forecast_is_trusted_only_when_it_reproduces_the_group():
    counts = {"a": 6, "rep": 6}
    members = group(3, 1, counts)
    ranged = range_members(members)
    assert ranged is not None
    actual = {m.member_id: m.assignment for m in members}
    assert forecasts_group(ranged, actual)
    assert counts_from_assignments(actual.values()) == counts
    swapped = dict(actual)
    swapped[members[0].member_id], swapped[members[1].member_id] = (
        actual[members[1].member_id],
        actual[members[0].member_id],
    )
    assert not forecasts_group(ranged, swapped)  # another assignor (or the KIP-848 protocol)
    assert not forecasts_group([], {})
    mixed = [members[0], GroupMember("dyn-1", "c", "", members[1].assignment), members[2]]
    assert range_members(mixed) is None


@pytest.mark.parametrize("workers", [1, 2])
def test_failover_chains_name_where_range_moves_each_task_when_instances_leave(workers):
    for instances, count, depth in itertools.product(range(1, 6), range(1, 13), range(1, 4)):
        counts = {"a": count, "b": count, "rep": (count + 1) // 2}
        members = range_members(group(instances, workers, counts))
        assert members is not None
        owners = task_owners(members, counts, task_ids_for)
        chains = failover_owners(members, counts, task_ids_for, depth)
        assert set(chains) == set(owners)
        for task_id, chain in chains.items():
            instances_seen = [owners[task_id].instance, *(m.instance for m in chain)]
            assert len(set(instances_seen)) == len(instances_seen)  # never two copies on one instance
            assert len(chain) == min(depth, instances - 1)
            gone = {owners[task_id].instance}
            for successor in chain:  # each step is exactly what range answers without those instances
                survivors = [m for m in members if m.instance not in gone]
                assert task_owners(survivors, counts, task_ids_for)[task_id] == successor
                gone.add(successor.instance)


@pytest.mark.parametrize("workers", [1, 2])
def test_standbys_sit_where_a_failover_moves_their_task(workers):
    for instances, count, k in itertools.product(range(1, 6), range(1, 13), range(0, 4)):
        counts = {"a": count, "rep": count}
        members = group(instances, workers, counts)
        placed = {m.member_id: standby_tasks_for(m.member_id, members, task_ids_for, k) for m in members}
        ranged = range_members(members)
        assert ranged is not None
        owners = task_owners(ranged, counts, task_ids_for)
        for task_id, owner in owners.items():
            hosts = [m for m in ranged if task_id in placed[m.member_id]]
            assert len(hosts) == min(k, instances - 1)  # k standbys, capped by the other instances
            assert owner.instance not in {h.instance for h in hosts}
            assert len({h.instance for h in hosts}) == len(hosts)
        if k >= 1 and instances >= 2:
            for dead in {m.instance for m in ranged}:  # whichever instance dies ...
                survivors = [m for m in ranged if m.instance != dead]
                after = task_owners(survivors, counts, task_ids_for)
                for task_id, owner in owners.items():
                    if owner.instance == dead:  # ... its tasks land on their standby's member
                        assert task_id in placed[after[task_id].member_id]


def test_a_joiner_forecasts_the_tasks_range_will_give_it():
    counts = {"a": 12}
    members = range_members(group(3, 1, counts))
    assert members is not None
    joiner = RangeMember("", "pod-3-0", ("app-pod-3", "10.0.0.2"))
    mine = forecast(members, joiner, counts, task_ids_for)
    assert mine == {TaskId(0, p) for p in (9, 10, 11)}
    # a static member restarted within its session keeps its place (and its tasks)
    again = forecast(members, RangeMember("", "pod-1-0", members[1].instance), counts, task_ids_for)
    assert again == {TaskId(0, p) for p in range(4, 8)}
    assert forecast([], joiner, counts, task_ids_for) == {TaskId(0, p) for p in range(12)}


def test_warm_ups_open_in_order_at_most_max_behind_and_finish_when_all_are_within_the_lag():
    tasks = [TaskId(1, p) for p in range(4)]
    assert next_warmups(tasks, {}, 10, 2) == WarmupStep((TaskId(1, 0), TaskId(1, 1)), False)
    # one behind, one caught up: one more may open
    lags: dict[TaskId, int | None] = {TaskId(1, 0): 50, TaskId(1, 1): 10}
    assert next_warmups(tasks, lags, 10, 2) == WarmupStep((TaskId(1, 2),), False)
    assert next_warmups(tasks, {**lags, TaskId(1, 2): 11}, 10, 2) == WarmupStep((), False)
    caught = {t: 0 for t in tasks}
    assert next_warmups(tasks, caught, 0, 1) == WarmupStep((), True)
    assert next_warmups(tasks, {**caught, TaskId(1, 3): 1}, 0, 1) == WarmupStep((), False)
    assert next_warmups([], {}, 0, 1) == WarmupStep((), True)
    for max_warmups in range(1, 6):  # never more than max behind at once, whatever the lags
        for behind_lags in itertools.product([None, 0, 99], repeat=4):
            lags = dict(zip(tasks, behind_lags, strict=True))
            step = next_warmups(tasks, lags, 10, max_warmups)
            behind = sum(1 for lag in behind_lags if lag == 99)
            assert len(step.open_now) <= max(0, max_warmups - behind)
            assert step.caught_up == all(lag == 0 for lag in behind_lags)


def test_a_static_joiner_warms_its_forecast_stateful_tasks_and_otherwise_joins_at_once():
    counts = {"a": 6, "rep": 6}
    members = group(2, 1, counts)  # pod-0-0 and pod-1-0
    stateful = lambda t: t.subtopology == 1  # noqa: E731
    assert tasks_to_warm("Stable", members, "pod-2-0", task_ids_for, stateful) == [TaskId(1, 4), TaskId(1, 5)]
    # restarted within its session: its own place, its own tasks
    assert tasks_to_warm("Stable", members, "pod-1-0", task_ids_for, stateful) == [
        TaskId(1, 3),
        TaskId(1, 4),
        TaskId(1, 5),
    ]
    assert tasks_to_warm("Stable", members, "", task_ids_for, stateful) is None  # dynamic member
    assert tasks_to_warm("Stable", members[:1], "pod-0-0", task_ids_for, stateful) is None  # alone
    assert tasks_to_warm("Empty", [], "pod-0-0", task_ids_for, stateful) is None
    with pytest.raises(LookupError):
        tasks_to_warm("PreparingRebalance", members, "pod-2-0", task_ids_for, stateful)
    swapped = [
        dataclasses.replace(members[0], assignment=members[1].assignment),
        dataclasses.replace(members[1], assignment=members[0].assignment),
    ]
    assert tasks_to_warm("Stable", swapped, "pod-2-0", task_ids_for, stateful) is None  # not range
