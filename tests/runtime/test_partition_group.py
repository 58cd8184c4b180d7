"""`PartitionGroup` on its own: which queue goes next, and when a task with an empty input may process."""

from __future__ import annotations

from kappaflow.api.record import Headers
from kappaflow.tasks.drain import RawRecord
from kappaflow.tasks.partition_group import LAGGING_STALL_MS, PartitionGroup

A, B = ("a", 0), ("b", 0)


def raw(offset: int, timestamp: int) -> RawRecord:
    return RawRecord(offset, timestamp, b"k", b"v", Headers())


def test_the_queue_with_the_oldest_head_goes_next() -> None:
    group = PartitionGroup("0_0", [A, B], max_task_idle_ms=0)
    assert group.next_queue() is None and not group.has_buffered()
    group.add(A, [raw(0, 30), raw(1, 5)])
    group.add(B, [raw(0, 20)])
    assert group.buffered() == 3 and group.only_queue() is None  # two inputs: a choice to make
    chosen = group.next_queue()
    assert chosen is not None and chosen[0] == B  # head 20 before head 30, whatever follows
    chosen[1].popleft()
    chosen = group.next_queue()
    assert chosen is not None and chosen[0] == A


def test_a_task_with_one_input_drains_its_queue_without_choosing() -> None:
    group = PartitionGroup("0_0", [A], max_task_idle_ms=0)
    group.add(A, [raw(0, 1)])
    only = group.only_queue()
    assert only is not None and only[0] == A and len(only[1]) == 1


def test_an_empty_input_with_lag_holds_the_task_then_is_enforced_past_the_stall_bound() -> None:
    group = PartitionGroup("0_0", [A, B], max_task_idle_ms=0)
    group.add(A, [raw(0, 1)])
    lagging = lambda topic, partition: 5 if topic == "b" else 0  # noqa: E731
    assert not group.ready(0, lagging)
    assert not group.ready(LAGGING_STALL_MS - 1, lagging)
    assert group.ready(LAGGING_STALL_MS, lagging) and group.enforced == 1
    caught_up = lambda topic, partition: 0  # noqa: E731
    assert group.ready(LAGGING_STALL_MS + 1, caught_up)  # nothing fetchable, no idling: process now


def _order(group: PartitionGroup, count: int) -> list[str]:
    taken = []
    for _ in range(count):
        chosen = group.next_queue()
        assert chosen is not None
        chosen[1].popleft()  # the task takes one record from the queue handed out
        taken.append(chosen[0][0])
    return taken


def test_equal_head_timestamps_go_in_the_order_of_javas_priority_queue() -> None:
    """Java's nonEmptyQueuesByTime, worked by hand from java.util.PriorityQueue's sift rules: with heap
    [a, b, c] (all heads at 5), polling a moves the last element, c, to the root (a tie does not sift
    down), and a is offered back below it; so c comes second, not b. Partition or arrival order would
    give a, a, b, b, c, c."""
    C = ("c", 0)
    group = PartitionGroup("0_0", [A, B, C], max_task_idle_ms=0)
    for tp in (A, B, C):
        group.add(tp, [raw(0, 5), raw(1, 5)])
    assert _order(group, 6) == ["a", "c", "a", "c", "b", "b"]
    assert group.next_queue() is None


def test_the_queue_handed_out_is_offered_back_before_a_later_fetch() -> None:
    """Java offers the polled queue back inside nextRecord, before the next fetch adds a queue: heap
    [b, a] then c gives b, c, a (offering c first would give b, a, c)."""
    C = ("c", 0)
    group = PartitionGroup("0_0", [A, B, C], max_task_idle_ms=0)
    group.add(A, [raw(0, 5), raw(1, 5)])
    group.add(B, [raw(0, 5)])
    assert _order(group, 1) == ["a"]
    group.add(C, [raw(0, 5)])
    assert _order(group, 3) == ["b", "c", "a"]


def test_queues_drained_by_partition_are_ordered_again_when_asked() -> None:
    group = PartitionGroup("0_0", [A, B], max_task_idle_ms=0)
    group.add(A, [raw(0, 7)])
    group.add(B, [raw(0, 3)])
    group.forget_order()  # the test driver took records by partition
    group.queues[B].popleft()
    group.add(B, [raw(1, 9)])
    assert _order(group, 2) == ["a", "b"]
