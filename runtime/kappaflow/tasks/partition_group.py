"""`PartitionGroup`: a task's input queues and their choice of the next record (Kafka Streams' class of
that name).

A task with several input partitions (a join, a merge) must interleave them by time, or one side runs
ahead of the other. What decides that - which queue's head is oldest, each partition's time, whether the
task may process at all while an input is empty (KIP-695) - lives here, apart from what the task does
with the record, so it can be read and tested without processors, stores or handlers.

Ties: Java keeps the non-empty queues in a `java.util.PriorityQueue` compared by head timestamp alone
(`nonEmptyQueuesByTime`): a queue is offered when a fetch makes it non-empty, polled to give the next
record, and offered again right after when records remain. Which of several queues with equal head
timestamps goes first is then the heap's doing (its sift rules over that history of offers and polls),
neither partition order nor arrival order, and it decides the order of equal-time records in a join or a
merge. `JavaPriorityQueue` replays those sift rules, and the offers and polls here happen where Java's
do: the queue handed out by `next_queue` is offered back before anything else touches the group (the
next `add` or `next_queue`), as Java offers it within nextRecord.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable

from kappaflow.tasks.drain import RawTuple
from kappaflow.tasks.java_heap import JavaPriorityQueue

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

LAGGING_STALL_MS = 10_000
"""How long a task waits for a lagging input that delivers nothing before it processes without it: a
guard against a partition whose fetches stall (Kafka Streams waits as long as the lag is positive)."""


class PartitionGroup:
    """The record queues of one task's input partitions and each partition's time (the largest
    timestamp processed from it). It picks the queue whose head is oldest, and decides whether the task
    is ready to process while an input is empty (`ready`); it counts the times it let the task process
    anyway (enforced processing). It never processes a record: the task drains the queue it picks."""

    def __init__(self, task: str, input_partitions: list[TopicPartition], max_task_idle_ms: int) -> None:
        self.task = task  # for the logs
        self.input_partitions = input_partitions
        self.max_task_idle_ms = max_task_idle_ms
        self.queues: dict[TopicPartition, deque[RawTuple]] = {}
        self.partition_time: dict[TopicPartition, int] = {}
        self.enforced = 0  # ready() with an input empty and records queued; the task publishes it
        self._empty_since: dict[TopicPartition, int] = {}  # input partitions with nothing buffered
        # Java's nonEmptyQueuesByTime (module docstring): the partitions in it, and the one `next_queue`
        # handed out, to be offered back while records remain
        self._by_time: JavaPriorityQueue[TopicPartition] = JavaPriorityQueue(self._head_time)
        self._in_heap: set[TopicPartition] = set()
        self._in_hand: TopicPartition | None = None
        self._unordered = False  # queues were drained past the heap (`forget_order`): rebuild it

    def _head_time(self, tp: TopicPartition) -> int:
        return int(self.queues[tp][0][1])

    def add(self, tp: TopicPartition, records: Iterable[RawTuple]) -> None:
        self._settle()
        queue = self.queues.get(tp)
        if queue is None:
            queue = self.queues[tp] = deque()
        queue.extend(records)
        if queue and tp not in self._in_heap and not self._unordered:
            self._in_heap.add(tp)
            self._by_time.offer(tp)

    def _settle(self) -> None:
        """Offer back the queue `next_queue` handed out if records remain in it (Java's nextRecord)."""
        tp = self._in_hand
        if tp is not None:
            self._in_hand = None
            if self.queues[tp] and tp not in self._in_heap:
                self._in_heap.add(tp)
                self._by_time.offer(tp)

    def forget_order(self) -> None:
        """A queue was drained by its partition, not through `next_queue` (the test driver chooses across
        its tasks with its own heap): the heap is rebuilt, in queue order, if `next_queue` is asked."""
        self._unordered = True
        self._in_hand = None

    def buffered(self) -> int:
        return sum(len(q) for q in self.queues.values())

    def has_buffered(self) -> bool:
        """Whether any input has a record queued (asked every loop: no count)."""
        return any(self.queues.values())

    def only_queue(self) -> tuple[TopicPartition, deque[RawTuple]] | None:
        """The queue of a task that reads one partition (most do): nothing to choose, drained in one
        loop; None when the task reads several."""
        if len(self.input_partitions) == 1 and len(self.queues) == 1:
            return next(iter(self.queues.items()))
        return None

    def next_queue(self) -> tuple[TopicPartition, deque[RawTuple]] | None:
        """The queue whose head record has the lowest timestamp, ties as Java's PriorityQueue breaks them
        (module docstring); None when nothing is queued. The caller takes one record from it."""
        self._settle()
        if self._unordered:
            self._unordered = False
            self._by_time.items.clear()
            self._in_heap = {tp for tp, queue in self.queues.items() if queue}
            for tp in (tp for tp, queue in self.queues.items() if queue):
                self._by_time.offer(tp)
        by_time = self._by_time
        while by_time:
            tp = by_time.poll()
            self._in_heap.discard(tp)
            queue = self.queues[tp]
            if queue:
                self._in_hand = tp
                return tp, queue
        return None

    def ready(self, now_ms: int, fetched_lag: Callable[[str, int], int | None]) -> bool:
        """Kafka Streams' rule for a task with several input partitions (KIP-695): with an input empty,
        wait while it has fetchable data not yet here (lag > 0 or unknown), else up to
        `max.task.idle.ms` for new data (0: not at all; -1: never wait); then process anyway
        ("enforced processing", counted). Without this a join could run ahead on one side."""
        queues = self.queues
        empty_since = self._empty_since
        enforced = False
        for tp in self.input_partitions:
            if queues.get(tp):
                if empty_since:
                    empty_since.pop(tp, None)
                continue
            if self.max_task_idle_ms < 0:
                enforced = True
                continue
            since = empty_since.setdefault(tp, now_ms)
            lag = fetched_lag(*tp)
            if lag is None or lag > 0:
                if now_ms - since < LAGGING_STALL_MS:
                    return False  # records are on the broker (or may be): wait for the fetch
                log.warning(
                    "task %s: %s-%s has lag %s but nothing arrived for %d ms; processing without it",
                    self.task,
                    tp[0],
                    tp[1],
                    lag,
                    now_ms - since,
                )
                empty_since[tp] = now_ms
            elif now_ms - since < self.max_task_idle_ms:
                return False
            enforced = True
        if enforced and any(queues.values()):
            self.enforced += 1
        return True
