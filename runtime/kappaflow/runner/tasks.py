"""The task manager: active and standby tasks of one process, their state directories and restoration.

Tasks are (sub-topology, partition). An active task is created when the consumer is assigned its source
partitions, restored from its changelogs (from the offset its stores checkpointed to the end of the log),
then run. A standby task opens the same stores but never processes: it tails the changelogs so that a
failover only restores the small tail written since. Both kinds read changelogs through one assign()-only
restore consumer, incrementally, so the poll loop keeps serving the group while state is restored.

Each task directory is locked (flock on `.lock`) while a task uses it, so two processes sharing a state
volume by mistake fail loudly instead of corrupting RocksDB. Where each changelog's restoration starts is
the task's state manager's decision (`restore_offsets`): under exactly_once_v2 its stores are
transactional, so even after a kill -9 only the changelog tail past the last applied commit is restored.

An active task is restored to its changelog's high watermark, read_uncommitted, as Kafka Streams does
since KAFKA-10167, and not merely to the first end-of-partition: under exactly_once_v2 the restore
consumer reads read_committed, and a transaction a crashed predecessor left open pins the last stable
offset below changelog transactions the task's next owners committed later. Stopping at that LSO would
give the task the state of before them while its input resumes at their committed offsets (issue 11:
updates silently lost, aggregates going backwards). So restoration waits until the consumer's position
passes the high watermark taken when the task opened, i.e. until every transaction below it has ended
(committed, or aborted by fencing or by `transaction.timeout.ms`).
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from kappaflow.api.config import StreamsConfig
from kappaflow.api.errors import StreamsError
from kappaflow.api.metrics import Metrics
from kappaflow.api.processor import TaskId
from kappaflow.state.cache import ThreadCache
from kappaflow.tasks.task import StreamTask, TaskState
from kappaflow.topology.topology import Topology

log = logging.getLogger(__name__)

RESTORE_LOG_INTERVAL_S = 5.0


class TaskDirLock:
    def __init__(self, task_dir: Path) -> None:
        task_dir.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(task_dir / ".lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(self._fd)
            raise StreamsError(f"state directory {task_dir} is locked by another process") from exc

    def release(self) -> None:
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1


class ManagedTask:
    """A StreamTask plus what the manager tracks: lock, changelog positions, restore status."""

    def __init__(self, task: StreamTask, lock: TaskDirLock, standby: bool) -> None:
        self.task = task
        self.lock = lock
        self.standby = standby
        # changelog (topic, partition) -> store name, and the next offset to read
        self.changelogs: dict[tuple[str, int], str] = {}
        self.positions: dict[tuple[str, int], int] = {}
        self.end_offsets: dict[tuple[str, int], int] = {}
        self.pending: set[tuple[str, int]] = set()


class TaskManager:
    def __init__(
        self,
        topology: Topology,
        config: StreamsConfig,
        collector: Any,
        cache: ThreadCache | None,
        metrics: Metrics,
        restore_consumer: Consumer,
        clock: Callable[[], int],
        global_stores: dict[str, Any] | None = None,
        high_watermarks: Callable[[list[tuple[str, int]]], dict[tuple[str, int], int]] | None = None,
    ) -> None:
        self.topology = topology
        self.config = config
        self.collector = collector
        self.cache = cache
        self.metrics = metrics
        self.restore_consumer = restore_consumer
        self.clock = clock
        self.global_stores = global_stores or {}
        self.app_id = config.application_id
        self.state_root = Path(config.get_str("state.dir")) / self.app_id
        self.active: dict[TaskId, ManagedTask] = {}
        self.standby: dict[TaskId, ManagedTask] = {}
        self._changelog_index: dict[tuple[str, int], ManagedTask] = {}
        self._resolved = {
            topology.resolve_topic(t, self.app_id): t
            for s in topology.sub_topologies()
            for t in s.source_topics
        }
        self._last_log = 0.0
        self._high_watermarks = high_watermarks
        self._last_wait_log = 0.0

    # ----------------------------------------------------------------- assignment -> tasks
    def task_ids_for(self, partitions: list[tuple[str, int]]) -> dict[TaskId, list[tuple[str, int]]]:
        result: dict[TaskId, list[tuple[str, int]]] = {}
        for topic, partition in partitions:
            name = self._resolved.get(topic)
            if name is None:
                continue
            sub = self.topology.subtopology_for_topic(name)
            result.setdefault(TaskId(sub.id, partition), []).append((topic, partition))
        return result

    def all_task_ids(self, counts: dict[str, int]) -> list[TaskId]:
        ids: set[TaskId] = set()
        for topic, count in counts.items():
            if topic in self._resolved:
                sub = self.topology.subtopology_for_topic(self._resolved[topic])
                ids.update(TaskId(sub.id, p) for p in range(count))
        return sorted(ids, key=lambda t: (t.subtopology, t.partition))

    def _open(self, task_id: TaskId, standby: bool) -> ManagedTask:
        task_dir = self.state_root / str(task_id)
        lock = TaskDirLock(task_dir)
        try:
            task = StreamTask(
                task_id,
                self.topology,
                self.config,
                self.collector,
                self.cache,
                self.metrics,
                self.state_root,
                self.clock,
                self.global_stores,
            )
            task.initialize()
            starts = task.state_manager.restore_offsets()
        except BaseException:
            lock.release()
            raise
        managed = ManagedTask(task, lock, standby)
        assignments = []
        logged = task.state_manager.logged_stores()
        tps = [(meta.changelog_topic, task_id.partition) for meta in logged]
        ends = self._high_watermarks(tps) if self._high_watermarks is not None and not standby else {}
        for meta, tp in zip(logged, tps, strict=True):
            start = starts[meta.name]
            managed.changelogs[tp] = meta.name
            managed.positions[tp] = start if start is not None else 0
            low, high = self.restore_consumer.get_watermark_offsets(TopicPartition(*tp), timeout=10)
            high = max(high, ends.get(tp, high))  # the consumer reports the LSO under read_committed
            managed.end_offsets[tp] = high
            if start is not None and start < low:
                start = None  # the log was truncated or recreated below our checkpoint: read it all
            if standby or start is None or start < high:
                managed.pending.add(tp)
                assignments.append(
                    TopicPartition(tp[0], tp[1], start if start is not None else OFFSET_BEGINNING)
                )
                self._changelog_index[tp] = managed
        if assignments:
            self.restore_consumer.incremental_assign(assignments)
        return managed

    def create_active(self, task_id: TaskId) -> ManagedTask:
        previous = self.standby.pop(task_id, None)
        if previous is not None:
            self._close(previous, clean=True)
        managed = self._open(task_id, standby=False)
        self.active[task_id] = managed
        if not managed.pending:
            managed.task.complete_restoration()
        else:
            log.info("task %s: restoring %s", task_id, self._remaining_text(managed))
        return managed

    def create_standby(self, task_id: TaskId) -> None:
        if task_id in self.standby or task_id in self.active:
            return
        self.standby[task_id] = self._open(task_id, standby=True)
        log.info("task %s: standby created", task_id)

    def _unassign(self, managed: ManagedTask, tps: list[tuple[str, int]]) -> None:
        live = [tp for tp in tps if self._changelog_index.get(tp) is managed]
        for tp in live:
            del self._changelog_index[tp]
        if live:
            self.restore_consumer.incremental_unassign([TopicPartition(t, p) for t, p in live])

    def _close(self, managed: ManagedTask, clean: bool) -> None:
        self._unassign(managed, list(managed.changelogs))
        task = managed.task
        try:
            if clean and managed.standby:
                task.state_manager.checkpoint(
                    {store: managed.positions[tp] for tp, store in managed.changelogs.items()}
                )
            task.close(clean=clean)
        finally:
            managed.lock.release()

    def close_active(self, task_id: TaskId, clean: bool) -> None:
        """Close an active task; unclean (under exactly_once_v2) discards its uncommitted writes."""
        managed = self.active.pop(task_id, None)
        if managed is None:
            return
        self._close(managed, clean)

    def close_standby(self, task_id: TaskId) -> None:
        managed = self.standby.pop(task_id, None)
        if managed is not None:
            self._close(managed, clean=True)

    def close_all(self, clean: bool) -> None:
        for task_id in list(self.active):
            try:
                self.close_active(task_id, clean)
            except Exception:
                log.exception("task %s: error while closing", task_id)
        for task_id in list(self.standby):
            try:
                self.close_standby(task_id)
            except Exception:
                log.exception("standby task %s: error while closing", task_id)

    # ----------------------------------------------------------------- restoration
    def restoring(self) -> list[ManagedTask]:
        return [m for m in self.active.values() if m.task.state is TaskState.RESTORING]

    def has_changelog_work(self) -> bool:
        return bool(self._changelog_index)

    def restore_step(self, max_records: int = 2000, timeout: float = 0.0) -> list[ManagedTask]:
        """Apply a batch of changelog records; return active tasks that finished restoring now."""
        if not self._changelog_index:
            return []
        messages: list[Any] = self.restore_consumer.consume(max_records, timeout)
        batches: dict[tuple[str, int], list[tuple[bytes, bytes | None, int]]] = {}
        finished: list[ManagedTask] = []
        reached_end: list[tuple[str, int]] = []
        for msg in messages:
            tp = (msg.topic(), msg.partition())
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    reached_end.append(tp)
                    managed = self._changelog_index.get(tp)
                    if managed is not None:
                        managed.positions[tp] = max(managed.positions[tp], msg.offset())
                    continue
                raise StreamsError(f"restoring from {tp[0]}-{tp[1]} failed: {err}")
            batches.setdefault(tp, []).append((msg.key() or b"", msg.value(), msg.timestamp()[1]))
            managed = self._changelog_index.get(tp)
            if managed is not None:
                managed.positions[tp] = msg.offset() + 1
        for tp, records in batches.items():
            managed = self._changelog_index.get(tp)
            if managed is None:
                continue
            store = managed.changelogs[tp]
            managed.task.state_manager.restore(store, records)
            labels = {"task": str(managed.task.id), "store": store}
            if managed.standby:
                self.metrics.increment("standby-updated-records-total", len(records), **labels)
            else:
                self.metrics.increment("restored-records-total", len(records), **labels)
        for tp in {*reached_end, *batches}:
            managed = self._changelog_index.get(tp)
            if managed is None or managed.standby or tp not in managed.pending:
                continue
            if managed.positions[tp] < managed.end_offsets[tp]:
                if tp in reached_end:
                    self._log_open_transaction(managed, tp)
                continue
            managed.pending.discard(tp)
            if not managed.pending:
                self._finish(managed)
                finished.append(managed)
        self._report()
        return finished

    def _log_open_transaction(self, managed: ManagedTask, tp: tuple[str, int]) -> None:
        """End of partition below the high watermark: a transaction is open there; wait for it to end."""
        now = time.monotonic()
        if now - self._last_wait_log >= RESTORE_LOG_INTERVAL_S:
            self._last_wait_log = now
            log.info(
                "task %s: %s-%d is stable up to %d only: waiting for the transactions open below %d to end",
                managed.task.id,
                tp[0],
                tp[1],
                managed.positions[tp],
                managed.end_offsets[tp],
            )

    def _finish(self, managed: ManagedTask) -> None:
        self._unassign(managed, list(managed.changelogs))
        managed.task.state_manager.checkpoint(
            {store: managed.positions[tp] for tp, store in managed.changelogs.items()}
        )
        managed.task.complete_restoration()
        self.metrics.set_gauge("restore-remaining-records", 0, task=str(managed.task.id))
        restored = sum(m.restored_records for m in managed.task.state_manager.stores.values())
        log.info("task %s: restored %d records, running", managed.task.id, restored)

    def checkpoint_standbys(self) -> None:
        for managed in self.standby.values():
            managed.task.state_manager.flush()
            managed.task.state_manager.checkpoint(
                {store: managed.positions[tp] for tp, store in managed.changelogs.items()}
            )

    def _remaining_text(self, managed: ManagedTask) -> str:
        parts = [
            f"{t}-{p}: {managed.positions[(t, p)]}..{managed.end_offsets[(t, p)]}" for t, p in managed.pending
        ]
        return ", ".join(parts)

    def _report(self) -> None:
        remaining_total = 0
        for managed in self.restoring():
            remaining = sum(max(0, managed.end_offsets[tp] - managed.positions[tp]) for tp in managed.pending)
            remaining_total += remaining
            self.metrics.set_gauge("restore-remaining-records", remaining, task=str(managed.task.id))
        now = time.monotonic()
        if remaining_total and now - self._last_log >= RESTORE_LOG_INTERVAL_S:
            self._last_log = now
            log.info("restoring: %d changelog records remaining", remaining_total)
