"""The task manager: the active and standby tasks of one process and their state directories.

Tasks are (sub-topology, partition). An active task is created when the consumer is assigned its source
partitions, restored from its changelogs by the changelog reader (from the offset its stores hold to the
end of the log), then run. A standby task opens the same stores but never processes: the reader keeps it
tailing the changelogs, so that a failover only restores the small tail written since.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kappaflow.api.config import StreamsConfig
from kappaflow.api.metrics import Metrics
from kappaflow.api.processor import TaskId
from kappaflow.runner.changelog_reader import RESTORE_BATCH, ChangelogEnds, ChangelogReader
from kappaflow.runner.managed_task import ManagedTask, TaskDirLock
from kappaflow.state.cache import RecordCache
from kappaflow.state.concurrent_opens import concurrent_opens
from kappaflow.tasks.async_executor import AsyncExecutor, LoopThreadExecutor
from kappaflow.tasks.drain import RawTuple
from kappaflow.tasks.task import StreamTask, TaskState
from kappaflow.topology.topology import Topology

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class PartitionOwnership:
    """Which active task each assigned input partition feeds: the one map from partition to task,
    set by the rebalance handler on each assignment and read per consumed batch. Pure (no tasks opened
    or closed here); `task_ids_for` is how partitions group into tasks."""

    def __init__(self) -> None:
        self.partition_tasks: dict[TopicPartition, TaskId] = {}

    def task_ids_for(self, partitions: list[TopicPartition]) -> dict[TaskId, list[TopicPartition]]:
        raise NotImplementedError

    @property
    def assigned(self) -> list[TopicPartition]:
        return sorted(self.partition_tasks)

    def own(self, partitions: list[TopicPartition]) -> dict[TaskId, list[TopicPartition]]:
        """Own exactly `partitions` from now; return them grouped by task."""
        by_task = self.task_ids_for(sorted(partitions))
        self.partition_tasks = {tp: task_id for task_id, tps in by_task.items() for tp in tps}
        return by_task

    def partitions_of(self, task_id: TaskId) -> list[TopicPartition]:
        return [tp for tp, owner in self.partition_tasks.items() if owner == task_id]

    def tasks_of(self, partitions: set[TopicPartition]) -> set[TaskId]:
        return {self.partition_tasks[tp] for tp in partitions if tp in self.partition_tasks}

    def disown_tasks(self, task_ids: set[TaskId]) -> None:
        """Forget the partitions of `task_ids` (closed)."""
        self.partition_tasks = {tp: t for tp, t in self.partition_tasks.items() if t not in task_ids}

    def disown_all(self) -> None:
        self.partition_tasks = {}


@dataclass(frozen=True)
class _ByState:
    running: list[StreamTask]
    restoring: list[ManagedTask]
    with_async: list[StreamTask]


class TaskManager(PartitionOwnership):
    """The active and standby tasks of one stream thread (Kafka Streams' TaskManager).

    It exists so that the rebalance handler, the loop and the commit see tasks by id and state, not
    how they are opened: it owns the tasks (each with its directory lock, as a `ManagedTask`), which
    assigned input partition feeds which task (`PartitionOwnership`), and their registration with the
    changelog reader; it opens a task (restoring or running), closes it (clean or dirty) and routes
    consumed records to it. It does not commit (runner/commit.py) or decide assignments (the group)."""

    def __init__(
        self,
        topology: Topology,
        config: StreamsConfig,
        collector: Any,
        cache: RecordCache | None,
        metrics: Metrics,
        reader: ChangelogReader,
        clock: Callable[[], int],
        global_stores: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.topology = topology
        self.config = config
        self.collector = collector
        self.cache = cache
        self.metrics = metrics
        self.reader = reader
        self.clock = clock
        self.global_stores = global_stores or {}
        self.app_id = config.application_id
        self.state_root = Path(config.get_str("state.dir")) / self.app_id
        # sibling workers of one instance share state.dir: wait for a task's previous owner to close it
        self._lock_wait_s = 30.0 if config.get_int("num.stream.threads") > 1 else 0.0
        # the thread's asynchronous calls (map_values_async, ...) run here; its loop starts on first use
        self.async_executor = LoopThreadExecutor()
        self.active: dict[TaskId, ManagedTask] = {}
        self.standby: dict[TaskId, ManagedTask] = {}
        # The active tasks by state, worked out again only after a task opened, closed or finished
        # restoring (the only changes of state: each happens in a call of this class, `_by_state_changed`):
        # the loop asks several times an iteration, and with 64 tasks each ask was a pass over all of them.
        self._by_state: _ByState | None = None
        self._published_counts: tuple[int, int, int] | None = None  # running, restoring, standby
        self._resolved = {
            topology.resolve_topic(t, self.app_id): t
            for s in topology.sub_topologies()
            for t in s.source_topics
        }

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

    def _open(self, task_id: TaskId, standby: bool) -> ManagedTask:
        task, lock = self._initialized(task_id)
        return self._registered(task, lock, standby)

    def _initialized(self, task_id: TaskId) -> tuple[StreamTask, TaskDirLock]:
        """The task with its directory locked and its stores initialized (inside `concurrent_opens()`
        their databases may still be opening)."""
        task_dir = self.state_root / str(task_id)
        lock = TaskDirLock(task_dir, self._lock_wait_s)
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
                async_executor=self._executor,
            )
            task.initialize()
        except BaseException:
            lock.release()
            raise
        return task, lock

    def _registered(
        self, task: StreamTask, lock: TaskDirLock, standby: bool, known: ChangelogEnds | None = None
    ) -> ManagedTask:
        """The opened task registered with the changelog reader (its restoration starts); `known`: its
        changelogs' ends, looked up with other tasks' (`ChangelogReader.look_up`)."""
        try:
            managed = ManagedTask(task, lock, standby)
            self.reader.register(managed, known)
        except BaseException:
            lock.release()
            raise
        return managed

    def _executor(self) -> AsyncExecutor:
        return self.async_executor

    def async_pending(self) -> bool:
        """Whether a running task holds asynchronous calls not emitted yet (asked by the stream thread
        whenever a poll finds nothing: only tasks that have asynchronous nodes are asked)."""
        for managed in self.active.values():
            task = managed.task
            if task.async_calls.nodes and task.state is TaskState.RUNNING and task.async_pending():
                return True
        return False

    def create_active(self, task_id: TaskId) -> ManagedTask:
        return self.create_actives([task_id])[0]

    def create_actives(self, task_ids: list[TaskId]) -> list[ManagedTask]:
        """Open active tasks, in order: every task's stores first, their RocksDB databases opening on
        threads meanwhile (state/concurrent_opens.py), then each task registered with the changelog
        reader, which reads their stores, their changelogs' ends looked up once for all of them. A
        failure closes the tasks of the call not registered yet (dirty: nothing of theirs ran) and
        releases their directories before it is raised."""
        try:
            return self._create_actives(task_ids)
        finally:
            self._by_state_changed()

    def _create_actives(self, task_ids: list[TaskId]) -> list[ManagedTask]:
        opened: list[tuple[StreamTask, TaskDirLock]] = []
        try:
            with concurrent_opens():
                for task_id in task_ids:
                    previous = self.standby.pop(task_id, None)
                    if previous is not None:
                        self._close(previous, clean=True)
                    opened.append(self._initialized(task_id))
        except BaseException:
            self._abandon(opened)
            raise
        try:
            # the ends of every task's changelogs in one lookup, not one per task
            known = self.reader.look_up([task.state_manager for task, _lock in opened])
        except BaseException:
            self._abandon(opened)
            raise
        created: list[ManagedTask] = []
        for index, (task, lock) in enumerate(opened):
            try:
                managed = self._registered(task, lock, standby=False, known=known)
            except BaseException:
                task.close(clean=False)
                self._abandon(opened[index + 1 :])
                raise
            self.active[task.id] = managed
            if not managed.pending:
                task.complete_restoration()
            else:
                log.info("task %s: restoring %s", task.id, self.reader.remaining_text(managed))
            created.append(managed)
        return created

    @staticmethod
    def _abandon(opened: list[tuple[StreamTask, TaskDirLock]]) -> None:
        for task, lock in opened:
            try:
                task.close(clean=False)
            except Exception:  # the other tasks' directories must be released all the same
                log.exception("task %s: error closing a task that failed to open", task.id)
            finally:
                lock.release()

    def create_standby(self, task_id: TaskId) -> None:
        if task_id in self.standby or task_id in self.active:
            return
        self.standby[task_id] = self._open(task_id, standby=True)
        log.info("task %s: standby created", task_id)

    def _close(self, managed: ManagedTask, clean: bool) -> None:
        self.reader.unregister(managed)
        task = managed.task
        try:
            if clean and managed.standby:
                managed.state_manager.checkpoint_offsets()
            task.close(clean=clean)
        finally:
            managed.lock.release()

    def close_active(self, task_id: TaskId, clean: bool) -> None:
        """Close an active task; unclean (under exactly_once_v2) discards its uncommitted writes."""
        managed = self.active.pop(task_id, None)
        if managed is None:
            return
        self._by_state_changed()
        self._close(managed, clean)

    def close_standby(self, task_id: TaskId) -> None:
        managed = self.standby.pop(task_id, None)
        if managed is not None:
            self._close(managed, clean=True)

    def add_records(self, tp: tuple[str, int], records: list[RawTuple]) -> None:
        """Queue consumed records for the active task of `tp` (dropped if it is not open: the partition
        is being handed over, and its new owner reads from the committed offset)."""
        task_id = self.partition_tasks.get(tp)
        managed = self.active.get(task_id) if task_id is not None else None
        if managed is not None:
            managed.task.add_records(tp[0], tp[1], records)

    def close(self, clean: bool) -> None:
        """Close every task and stop reading changelogs: the thread is shutting down."""
        self.close_all(clean)
        self.reader.close()
        self.async_executor.close()

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
    def _tasks_by_state(self) -> _ByState:
        by_state = self._by_state
        if by_state is None:
            running = [m.task for m in self.active.values() if m.task.state is TaskState.RUNNING]
            by_state = self._by_state = _ByState(
                running=running,
                restoring=[m for m in self.active.values() if m.task.state is TaskState.RESTORING],
                with_async=[t for t in running if t.async_calls.nodes],
            )
        return by_state

    def _by_state_changed(self) -> None:
        self._by_state = None

    def restoring(self) -> list[ManagedTask]:
        """The active tasks restoring (the list is shared until the next change: read it, do not alter it)."""
        return self._tasks_by_state().restoring

    def running_with_async(self) -> list[StreamTask]:
        """The running tasks that have asynchronous nodes (a task's nodes register as it starts running):
        most topologies have none (shared like `running`)."""
        return self._tasks_by_state().with_async

    def publish_task_counts(self) -> int:
        """Set the task gauges (asked every iteration: set only when a count changed); return how many
        active tasks are restoring."""
        restoring = len(self.restoring())
        counts = (len(self.active) - restoring, restoring, len(self.standby))
        if counts != self._published_counts:
            self._published_counts = counts
            self.metrics.set_gauge("active-tasks", counts[0], state="RUNNING")
            self.metrics.set_gauge("active-tasks", restoring, state="RESTORING")
            self.metrics.set_gauge("standby-tasks", counts[2])
        return restoring

    def running(self) -> list[StreamTask]:
        """The active tasks running (the list is shared until the next change: read it, do not alter it)."""
        return self._tasks_by_state().running

    def restore_step(self, max_records: int = RESTORE_BATCH, timeout: float = 0.0) -> list[ManagedTask]:
        """Apply a batch of changelog records; return active tasks that finished restoring now."""
        finished = self.reader.step(max_records, timeout)
        if finished:
            self._by_state_changed()
        return finished

    def has_changelog_work(self) -> bool:
        return self.reader.has_work()

    def checkpoint_standbys(self) -> None:
        for managed in self.standby.values():
            managed.state_manager.flush()
            managed.state_manager.checkpoint_offsets(enforce=False)

    def task_roles(self) -> dict[str, tuple[str, int]]:
        """task id -> (role, changelog records it lags) of every task held here: `active` (running,
        caught up by definition), `restoring` (records left to restore), `standby` (records not yet
        applied; warm-ups before joining are standbys too, runner/warmup.py names them)."""
        roles: dict[str, tuple[str, int]] = {}
        for task_id, managed in self.active.items():
            restoring = managed.task.state is TaskState.RESTORING
            lag = self.reader.remaining(managed) if restoring else 0
            roles[str(task_id)] = ("restoring" if restoring else "active", lag)
        for task_id in self.standby:
            roles[str(task_id)] = ("standby", self.standby_lag(task_id) or 0)
        return roles

    def publish_task_lags(self) -> dict[str, tuple[str, int]]:
        """Set `task-lag-records{task, role}` for every task held here (dropping tasks that moved
        away); return the roles (`task_roles`)."""
        roles = self.task_roles()
        for task, (role, lag) in roles.items():
            self.metrics.set_gauge("task-lag-records", lag, task=task, role=role)
        self.metrics.retain_gauge(
            "task-lag-records", lambda labels: roles.get(labels["task"], ("",))[0] == labels["role"]
        )
        return roles

    def standby_lag(self, task_id: TaskId) -> int | None:
        """Changelog records the standby (or warm-up) copy of `task_id` has not applied yet, against the
        changelogs' ends as last fetched; None when no such copy is open here."""
        managed = self.standby.get(task_id)
        if managed is None:
            return None
        manager = managed.state_manager
        lag = 0
        for tp, store in manager.changelog_partitions().items():
            position = manager.offset(store) or 0
            end = managed.end_offsets.get(tp, position)
            lag += max(0, max(end, self.reader.cached_end(tp, end)) - position)
        return lag

    def task_dirs(self) -> list[tuple[str, Path]]:
        """(task id, state directory) of every task held here, active and standby."""
        return [(str(t), self.state_root / str(t)) for t in [*self.active, *self.standby]]

    def store_lags(self) -> list[tuple[str, int, int, int]]:
        """(store, partition, position, end) of every local copy, active and standby.

        An active task that is running is caught up by definition (it writes its changelog); a restoring
        task or a standby lags by the changelog records it has not applied yet."""
        result = []
        for managed in [*self.active.values(), *self.standby.values()]:
            manager = managed.state_manager
            running = not managed.standby and managed.task.state is TaskState.RUNNING
            for tp, store in manager.changelog_partitions().items():
                position = manager.offset(store) or 0
                end = managed.end_offsets.get(tp, position)
                if managed.standby:
                    end = max(end, self.reader.cached_end(tp, end))
                if running:
                    position = end = max(position, end)
                result.append((store, tp[1], position, end))
        return result
