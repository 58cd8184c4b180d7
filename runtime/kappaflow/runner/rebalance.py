"""Rebalance handling: what this member owns, and the tasks opened and closed as that changes.

librdkafka calls back on assignment, revocation and loss from inside `consume()`, on the stream thread.
An assignment opens the new partitions' tasks (pausing the input of those still restoring); a revocation
commits and closes the tasks of the revoked partitions; a loss (session expired, fenced) closes them
dirty, since this member may no longer commit for them. classic `range` rebalances are eager (everything
revoked, then everything assigned); the KIP-848 protocol hands out and takes back partitions
incrementally.

An exception must not vanish inside librdkafka's callback: it is kept as `error`, which the stream thread
raises after `consume()` returns.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from kappaflow.api.errors import StreamsError, TaskMigratedError, TransactionAbortedError
from kappaflow.api.offset_reset import AutoOffsetReset
from kappaflow.api.processor import TaskId
from kappaflow.clients.kafka import ProductionError
from kappaflow.runner.offset_reset import resolve_start_offsets
from kappaflow.runner.producer import StreamsProducer
from kappaflow.runner.retry import retry_unreachable
from kappaflow.runner.tasks import TaskManager
from kappaflow.tasks.native import InputQueues
from kappaflow.tasks.task import TaskState

log = logging.getLogger(__name__)


class RebalanceHandler:
    def __init__(
        self,
        tasks: TaskManager,
        producer: StreamsProducer,
        commit: Callable[[], None],
        on_change: Callable[[bool], None],
        state_lock: threading.RLock,
        incremental: bool,
        reset_policies: Mapping[str, AutoOffsetReset] | None = None,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        """`commit()` commits every running task; `on_change(assigned)` is told after each change,
        with True once an assignment (possibly empty) is in force."""
        self._tasks = tasks
        self._reset_policies = dict(reset_policies or {})  # KIP-1106, by resolved input topic
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._producer = producer
        self._commit = commit
        self._on_change = on_change
        self._lock = state_lock
        self._incremental = incremental
        self.in_group = False
        self.error: BaseException | None = None
        # Set when this member must not commit any more (a failure is being handled, or the consumer
        # failed fatally): revocations then close tasks dirty.
        self.dirty = False
        # the native reader of the group consumer's fetches (runner/native_input.py), set with each new
        # consumer: a partition is opened into it before every assignment of it, inside this callback,
        # so its first fetch already goes there. Revocation and loss need nothing: librdkafka's fetch
        # stop undoes the opening (rdkafka_queue.rs).
        self.inputs: InputQueues | None = None

    @property
    def assigned(self) -> list[tuple[str, int]]:
        """The input partitions this member owns (the task manager's map)."""
        return self._tasks.assigned

    def partitions_of(self, task_id: TaskId) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in self._tasks.partitions_of(task_id)]

    def raise_error(self) -> None:
        error, self.error = self.error, None
        if error is not None:
            raise error

    # ----------------------------------------------------------------- librdkafka's callbacks
    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        with self._lock:
            try:
                self._assign(consumer, partitions)
            except BaseException as exc:
                self.error = exc

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        with self._lock:
            self._revoke(consumer, partitions)

    def on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.warning("partitions lost (session expired or fenced): closing tasks without committing")
        with self._lock:
            self.in_group = False
            self._abort()
            self._close({(tp.topic, tp.partition) for tp in partitions}, clean=False)
            if self._incremental and partitions:
                consumer.incremental_unassign(partitions)
            self._on_change(False)

    # ----------------------------------------------------------------- the work
    def _assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.in_group = True
        added = [(tp.topic, tp.partition) for tp in partitions]
        owned = set(self._tasks.assigned) | set(added) if self._incremental else set(added)
        by_task = self._tasks.own(sorted(owned))
        restoring: list[TopicPartition] = []
        new = [
            t
            for t in sorted(by_task, key=lambda t: (t.subtopology, t.partition))
            if t not in self._tasks.active
        ]
        for managed in self._tasks.create_actives(new):  # their stores open concurrently
            if managed.task.state is TaskState.RESTORING:
                restoring.extend(self.partitions_of(managed.task.id))
        if self._reset_policies:  # partitions never committed start where their source's policy says
            resolve_start_offsets(consumer, partitions, self._reset_policies, self._clock_ms(), 30.0)
        self._open_and_assign(consumer, partitions)
        if restoring:
            consumer.pause(restoring)
        log.info("assigned %d partitions: tasks %s", len(owned), sorted(str(t) for t in by_task))
        self._on_change(True)

    def _open_and_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Open `partitions` into the native reader, then assign them: added to the assignment under
        KIP-848, the whole assignment under the classic protocol."""
        if self.inputs is not None:
            for tp in partitions:
                self.inputs.open(tp.topic, tp.partition)
        if self._incremental:
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)

    def _revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = {(tp.topic, tp.partition) for tp in partitions}
        if not self._incremental:
            self.in_group = False
        clean = not self.dirty and self.error is None
        try:
            if clean and revoked:
                self._commit()
        except (TaskMigratedError, TransactionAbortedError, ProductionError, KafkaException) as exc:
            # The tasks are handed over uncommitted: their new owner redoes the work (and, under
            # exactly_once_v2, the open transaction is aborted), so this is no failure of the thread.
            log.warning("commit on revocation failed, closing the tasks dirty: %s", exc)
            clean = False
            self._abort()
        except BaseException as exc:
            log.exception("commit on revocation failed")
            clean = False
            self.error = exc
        self._close(revoked, clean)
        if self._incremental and partitions:
            consumer.incremental_unassign(partitions)
        self._on_change(False)

    def _abort(self) -> None:
        try:
            self._producer.abort()
        except (StreamsError, KafkaException) as exc:
            # no producer could replace the failed one (broker unreachable): the transaction stays marked
            # failed, so the stream thread's reset tries the replacement again
            log.warning("aborting the transaction: %s", exc)

    def _close(self, partitions: set[tuple[str, int]], clean: bool) -> None:
        """Close the tasks owning `partitions` and forget those partitions."""
        doomed = self._tasks.tasks_of(partitions)
        for task_id in doomed:
            self._close_task(task_id, clean)
        self._tasks.disown_tasks(doomed)
        if not self._incremental:
            self._tasks.disown_all()

    def close_all_dirty(self) -> dict[tuple[str, int], int]:
        """Close every active task without committing (their partitions stay assigned); return where
        each task's input resumes (its last commit, or the first offset it was handed)."""
        resume: dict[tuple[str, int], int] = {}
        for task_id, managed in list(self._tasks.active.items()):
            resume.update(managed.task.resume_offsets())
            self._close_task(task_id, clean=False)
        return resume

    def _close_task(self, task_id: TaskId, clean: bool) -> None:
        """Close one task; an error closing it must not keep the others open."""
        try:
            self._tasks.close_active(task_id, clean)
        except Exception:
            log.exception("task %s: error closing", task_id)

    def reopen_tasks(
        self, consumer: Consumer, resume: dict[tuple[str, int], int], api_timeout_s: float
    ) -> None:
        """After `close_all_dirty`: reopen the owned partitions' tasks (restoring what their stores lack)
        and seek their input to the group's committed offsets, read back from the broker.

        The broker, not this thread, owns what was committed: a commit whose reply was lost (timed out
        after the broker took it) may have committed, and the replaced producer's init_transactions
        finishes it. Resuming from the thread's own last commit would then redo committed work and count
        it twice. Under read_committed the fetch waits for pending transactional offsets to settle.
        `resume` (the thread's own record) is used only for partitions the group has never committed."""
        assigned = [TopicPartition(t, p) for t, p in self.assigned]
        if assigned:
            committed = retry_unreachable(
                "reading the committed offsets",
                lambda: committed_or_raise(consumer, assigned),
                api_timeout_s,
            )
            broker = {(tp.topic, tp.partition): tp.offset for tp in committed if tp.offset >= 0}
            resume = {**resume, **broker}
        owned = set(self._tasks.assigned)
        for (topic, partition), offset in resume.items():
            if (topic, partition) in owned:
                start = offset if offset >= 0 else OFFSET_BEGINNING
                consumer.seek(TopicPartition(topic, partition, start))
        for task_id in self._tasks.tasks_of(owned):
            if self._tasks.create_active(task_id).task.state is TaskState.RESTORING:
                consumer.pause(self.partitions_of(task_id))

    def refetch_offsets(self, consumer: Consumer) -> None:
        """Assign again the owned partitions that have delivered nothing since they were assigned, so
        librdkafka fetches their committed offsets anew: its fetch of them failed as a whole because the
        group coordinator moved, and it would never ask again (`routing.offsets_not_fetched`).

        What a partition delivered is its position; one without a position has handed no record to the
        tasks since its assignment, so assigning it again without an offset (the committed one, as at
        any assignment) skips and repeats nothing. Under KIP-848 only those partitions are assigned
        again (incrementally); a classic (eager) assignment is replaced whole, so the partitions that do
        deliver keep their positions. Partitions of restoring tasks are paused again."""
        if not self.in_group or not self._tasks.assigned:
            return
        owned = [TopicPartition(t, p) for t, p in self._tasks.assigned]
        positions = consumer.position(owned)
        stalled = [TopicPartition(tp.topic, tp.partition) for tp in positions if tp.offset < 0]
        if not stalled:
            return
        log.warning(
            "the committed offsets of %d assigned partition(s) were not fetched (the group coordinator "
            "moved): assigning them again",
            len(stalled),
        )
        if self._reset_policies:
            resolve_start_offsets(consumer, stalled, self._reset_policies, self._clock_ms(), 30.0)
        again = stalled if self._incremental else [*stalled, *(tp for tp in positions if tp.offset >= 0)]
        # unassigned first, then opened into the native reader (a fetch stop undoes the opening), then
        # assigned: the order of any assignment (`_assign`)
        if self._incremental:
            consumer.incremental_unassign(stalled)
        else:
            consumer.unassign()
        self._open_and_assign(consumer, again)
        assigned_again = {(tp.topic, tp.partition) for tp in again}
        for managed in self._tasks.restoring():
            partitions = self.partitions_of(managed.task.id)
            if any((tp.topic, tp.partition) in assigned_again for tp in partitions):
                consumer.pause(partitions)

    def forget(self) -> None:
        """The consumer is gone: nothing is assigned any more."""
        self._tasks.disown_all()
        self.in_group = False


def committed_or_raise(consumer: Consumer, partitions: list[TopicPartition]) -> list[TopicPartition]:
    """The group's committed offsets of `partitions`; a partition whose offset came back with an error
    raises it (for the caller's retry): taken for "never committed", it would resume that partition from
    the thread's own record, which may be older than what the broker holds (a twice-counted input)."""
    committed: list[TopicPartition] = consumer.committed(partitions, timeout=10)
    for tp in committed:
        if tp.error is not None:
            raise KafkaException(tp.error)
    return committed
