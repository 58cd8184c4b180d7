"""The local copies of one store, as interactive queries read them (Java's StateStoreProvider).

A key is routed to the one local task that can hold it: its partition is murmur2 of the key serialized
with the store's key serde, exactly where the producer put it. Range and `all` queries visit every local
task. Reads run under the stream thread's state lock, so a query never sees a store half-way through a
commit, a record-cache flush or a close by a rebalance, and every result is materialized (a list) before
the lock is released: an iterator escaping the lock could outlive the RocksDB handle it reads.

A partition that is restoring (or not hosted here: migrated away, or the instance is rebalancing) raises
InvalidStateStorePartitionError, the retryable error, unless stale stores are allowed: then restoring
active tasks and standbys are read too, and the caller accepts that the answer may lag.

A global store has a full copy on every instance (loaded before the instance joins its group), so any
instance answers any key from its own copy, without routing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from kappaflow.api.errors import InvalidStateStoreError, InvalidStateStorePartitionError
from kappaflow.api.processor import TaskId
from kappaflow.api.serdes import Serde
from kappaflow.clients.murmur2 import partition_for_key
from kappaflow.tasks.task import TaskState

if TYPE_CHECKING:
    from kappaflow.runner.managed_task import ManagedTask
    from kappaflow.runner.streams import KafkaStreams
    from kappaflow.runner.tasks import TaskManager

T = TypeVar("T")


class LocalStoreProvider:
    """Reads one named store across this instance's tasks; query-layer views are built on top."""

    def __init__(self, streams: KafkaStreams, name: str, enable_stale_stores: bool) -> None:
        self.streams = streams
        self.name = name
        self.enable_stale_stores = enable_stale_stores
        self.is_global = name in streams.topology.global_stores
        sub = -1 if self.is_global else streams.topology_index.subtopology_of_store(name)
        if sub is None:
            raise InvalidStateStoreError(f"no store named '{name}' in this topology")
        self.subtopology = sub
        self.kind = str(getattr(streams.topology.stores[name], "store_kind", "key_value"))

    # ----------------------------------------------------------------- keys
    def key_serde(self) -> Serde[Any]:
        return self.streams.store_key_serde(self.name)

    def key_bytes(self, key: Any) -> bytes:
        raw = self.key_serde().serialize(self.streams.changelog_topic(self.name), key)
        if raw is None:
            raise InvalidStateStoreError(f"store '{self.name}': a null key cannot be queried")
        return raw

    def partition_of(self, key: Any) -> int:
        count = self.streams.store_partition_count(self.name)
        if count is None:
            raise InvalidStateStorePartitionError(
                f"store '{self.name}': partition count not known yet (the instance is starting)"
            )
        return partition_for_key(self.key_bytes(key), count)

    # ----------------------------------------------------------------- reads
    def _task_manager(self) -> TaskManager:
        thread = self.streams.stream_thread
        tm = thread.tm if thread is not None else None
        if tm is None or not self.streams.state.is_running_or_rebalancing():
            raise InvalidStateStorePartitionError(
                f"store '{self.name}' is not available: the instance is {self.streams.state.value}"
            )
        return tm

    def _store(self, managed: ManagedTask) -> Any:
        return managed.task.store(self.name)

    def _global_store(self) -> Any:
        thread = self.streams.stream_thread
        updater = thread.global_state if thread is not None else None
        if updater is None or self.name not in updater.stores:
            raise InvalidStateStorePartitionError(
                f"global store '{self.name}' is not loaded yet: the instance is {self.streams.state.value}"
            )
        return updater.stores[self.name]

    def read_key(self, key: Any, read: Callable[[Any], T]) -> T:
        """`read(store)` on the local copy of the partition `key` belongs to."""
        if self.is_global:
            with self.streams.state_lock:
                return read(self._global_store())
        partition = self.partition_of(key)
        task_id = TaskId(self.subtopology, partition)
        with self.streams.state_lock:
            tm = self._task_manager()
            managed = tm.active.get(task_id)
            if managed is not None:
                if managed.task.state is TaskState.RUNNING or (
                    self.enable_stale_stores and managed.task.state is TaskState.RESTORING
                ):
                    return read(self._store(managed))
                raise InvalidStateStorePartitionError(
                    f"store '{self.name}' partition {partition} is {managed.task.state.value.lower()}: "
                    "retry shortly"
                )
            standby = tm.standby.get(task_id) if self.enable_stale_stores else None
            if standby is not None:
                return read(self._store(standby))
            raise InvalidStateStorePartitionError(
                f"store '{self.name}' partition {partition} is not hosted by this instance (it migrated or "
                "belongs to another instance: see query_metadata_for_key)"
            )

    def read_all(self, read: Callable[[Any], list[T]], partitions: list[int] | None = None) -> list[T]:
        """`read(store)` on every local copy, concatenated in task order; the partitions read are
        appended to `partitions` (the HTTP server checks that a scatter-gather covered each once)."""
        results: list[T] = []
        if self.is_global:
            with self.streams.state_lock:
                return list(read(self._global_store()))
        with self.streams.state_lock:
            tm = self._task_manager()
            seen: set[TaskId] = set()
            for task_id in sorted(tm.active, key=lambda t: t.partition):
                if task_id.subtopology != self.subtopology:
                    continue
                managed = tm.active[task_id]
                if managed.task.state is not TaskState.RUNNING and not (
                    self.enable_stale_stores and managed.task.state is TaskState.RESTORING
                ):
                    raise InvalidStateStorePartitionError(
                        f"store '{self.name}' partition {task_id.partition} is "
                        f"{managed.task.state.value.lower()}: retry shortly"
                    )
                seen.add(task_id)
                results.extend(read(self._store(managed)))
                if partitions is not None:
                    partitions.append(task_id.partition)
            if self.enable_stale_stores:
                for task_id in sorted(tm.standby, key=lambda t: t.partition):
                    if task_id.subtopology == self.subtopology and task_id not in seen:
                        results.extend(read(self._store(tm.standby[task_id])))
                        if partitions is not None:
                            partitions.append(task_id.partition)
        return results
