"""`TopologyTestDriver`: run a Topology with the real tasks, processors and stores, without a broker.

It mirrors Kafka Streams' driver: one partition per topic, repartition topics routed in memory, a commit
after every input record (so caches flush per record, as Java's driver does), a mock wall clock for
punctuations. Records a topology writes to its changelogs are kept, so a test can close a driver and open
a new one restored from them (`restore_from=`), exercising the same restore path as the runtime.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from kappaflow.api.config import (
    EMIT_INTERVAL_OUTER_JOIN,
    EMIT_INTERVAL_WINDOWED_AGGREGATION,
    StreamsConfig,
)
from kappaflow.api.errors import InvalidStateStoreError, TopologyError
from kappaflow.api.metrics import Metrics
from kappaflow.api.processor import TaskId, to_millis
from kappaflow.api.record import Headers, TestRecord, ensure_headers
from kappaflow.api.serdes import Serde
from kappaflow.state.builders import ReadOnlyKeyValueView
from kappaflow.state.session_store import ReadOnlySessionView
from kappaflow.state.window_store import ReadOnlyWindowView
from kappaflow.tasks.async_controlled import ControlledExecutor, PendingAsyncCall
from kappaflow.tasks.drain import RawRecord
from kappaflow.tasks.global_task import GlobalTask
from kappaflow.tasks.java_heap import JavaPriorityQueue
from kappaflow.tasks.native import new_thread_cache
from kappaflow.tasks.task import StreamTask
from kappaflow.topology.topology import Topology
from kappaflow_contract.topics import is_changelog_topic

__all__ = [
    "EmptyTopicError",
    "PendingAsyncCall",
    "TestInputTopic",
    "TestOutputTopic",
    "TestRecord",
    "TopologyTestDriver",
]


class EmptyTopicError(LookupError):
    """Reading from an output topic that has no (more) records."""


@dataclass(frozen=True)
class ProducedRecord:
    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp: int


class _DriverCollector:
    def __init__(self, driver: TopologyTestDriver) -> None:
        self._driver = driver

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
        timestamp: int,
        partition: int | None,
    ) -> None:
        self._driver._route(ProducedRecord(topic, key, value, (headers or Headers()).copy(), timestamp))

    def send_dead_letter(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        timestamp: int,
        on_written: Callable[[], None],
    ) -> None:
        self.send(topic, key, value, headers, timestamp, None)
        on_written()

    def send_changelog(
        self, topic: str, key: bytes, value: bytes | None, timestamp: int, partition: int
    ) -> None:
        self.send(topic, key, value, None, timestamp, partition)

    def partition_count(self, topic: str) -> int | None:
        return 1


def _millis(value: datetime | timedelta | int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    return to_millis(value)


class TopologyTestDriver:
    """Runs a topology without a broker, as Java's `TopologyTestDriver`: the real tasks, processors and stores
    in memory, records piped in one at a time and processed at once, outputs read back from in-memory
    topics, wall-clock time advanced by hand.

    It owns one StreamTask per sub-topology (one partition each), the global task, the in-memory topics
    the tasks write to (changelogs included), the mock wall clock and the thread cache; input and output
    topics are views over these.

    Java's driver runs the whole topology as one task, and so does this one in what can be observed: the
    next record is the oldest queued head across every input and repartition topic (Java's PartitionGroup,
    ties in its PriorityQueue's order); records written to repartition (or input) topics are queued, not
    processed at once; stream time is one for all sub-topologies (the largest timestamp processed by any),
    so a stream-time punctuation after a repartition fires on the records of the sub-topology before it,
    and `current_stream_time_ms()` answers the same in all. Unlike Java, the punctuations of one
    sub-topology run before those of the others when both are due after the same record."""

    def __init__(
        self,
        topology: Topology,
        config: dict[str, Any] | None = None,
        initial_wall_clock_time: datetime | int | None = None,
        *,
        restore_from: TopologyTestDriver | None = None,
        async_completion: str = "auto",
    ) -> None:
        """`async_completion`: "auto" completes the calls of asynchronous operations (map_values_async,
        ...) right after the record that made them, in order, so outputs show at once as for their
        synchronous twins; "manual" holds them until `complete_async_calls`, in the order the test
        gives (see `pending_async_calls`)."""
        if async_completion not in ("auto", "manual"):
            raise ValueError(f"async_completion must be 'auto' or 'manual', got {async_completion!r}")
        self._async_auto = async_completion == "auto"
        self._async = ControlledExecutor()
        values: dict[str, Any] = {"application.id": "topology-test-driver", "bootstrap.servers": "dummy:1234"}
        # like Java's driver: no wall-clock throttle of unmatched join results or window-close emits, so
        # every piped record shows its effect at once
        values[EMIT_INTERVAL_OUTER_JOIN] = 0
        values[EMIT_INTERVAL_WINDOWED_AGGREGATION] = 0
        values.update(config or {})
        self._own_state_dir = "state.dir" not in (config or {})
        if self._own_state_dir:
            values["state.dir"] = tempfile.mkdtemp(prefix="kappaflow-ttd-")
        self.config = StreamsConfig(values)
        self.topology = topology
        self.application_id = self.config.application_id
        self._metrics = Metrics()
        initial = _millis(initial_wall_clock_time)
        self._wall_clock = initial if initial is not None else int(time.time() * 1000)
        self._cache = new_thread_cache(
            self.config.get_int("statestore.cache.max.bytes"),
            self.config.get_bool("kappaflow.native.enabled"),
        )
        self._outputs: dict[str, deque[ProducedRecord]] = defaultdict(deque)
        self.produced: dict[str, list[ProducedRecord]] = defaultdict(list)
        self._pending: deque[tuple[str, ProducedRecord]] = deque()
        # the records of the input topics that are tables' changelogs (reuse.ktable.source.topics), in
        # offset order: what a driver made with `restore_from=` this one restores those tables from
        self.source_logs: dict[str, list[ProducedRecord]] = {
            t: [] for t in topology.source_changelogs.values()
        }
        # Java's driver runs the whole topology as one task, so its stream time (and the stream-time
        # punctuations) is one for all sub-topologies: the max timestamp processed by any of the tasks
        self._stream_time = -1
        self._non_empty: JavaPriorityQueue[str] = JavaPriorityQueue(self._head_time)
        self._offsets: dict[str, int] = defaultdict(int)
        self._closed = False
        state_root = Path(self.config.get_str("state.dir")) / self.application_id
        collector = _DriverCollector(self)
        self._global: GlobalTask | None = None
        if topology.global_stores:
            self._global = GlobalTask(
                topology, self.config, collector, self._metrics, state_root, self._clock
            )
        global_stores = self._global.stores if self._global else {}
        self._internal_topics = {
            topology.resolve_topic(t, self.application_id) for t in topology.internal_topics
        }
        self._tasks: dict[int, StreamTask] = {}
        self._task_by_topic: dict[str, StreamTask] = {}
        for sub in topology.sub_topologies():
            task = StreamTask(
                TaskId(sub.id, 0),
                topology,
                self.config,
                collector,
                self._cache,
                self._metrics,
                state_root,
                self._clock,
                global_stores,
                async_executor=lambda: self._async,
            )
            self._tasks[sub.id] = task
            for topic in sub.source_topics:
                self._task_by_topic[topology.resolve_topic(topic, self.application_id)] = task
        for task in self._tasks.values():
            task.initialize()
            if restore_from is not None:
                self._restore(task, restore_from)
            task.complete_restoration()

    def _clock(self) -> int:
        return self._wall_clock

    def _restore(self, task: StreamTask, previous: TopologyTestDriver) -> None:
        for meta in task.state_manager.logged_stores():
            logs = previous.source_logs if meta.source_topic else previous.produced
            log = logs.get(meta.changelog_topic, [])
            start = task.state_manager.committed_offset(meta.name) or 0
            # a table's source topic as its changelog (reuse.ktable.source.topics): the table never
            # stored its null-key records
            records = [
                (r.key or b"", r.value, r.timestamp)
                for r in log[start:]
                if r.key is not None or not meta.source_topic
            ]
            if records:
                task.state_manager.restore(meta.name, records, len(log))
            task.state_manager.checkpoint({meta.name: len(log)})

    # ----------------------------------------------------------------- routing
    def _route(self, record: ProducedRecord) -> None:
        self.produced[record.topic].append(record)
        if record.topic in self._internal_topics:
            self._pending.append((record.topic, record))
            return
        if is_changelog_topic(self.application_id, record.topic):
            return
        self._outputs[record.topic].append(record)
        if record.topic in self._task_by_topic:
            self._pending.append((record.topic, record))

    def _enqueue(self, topic: str, record: ProducedRecord) -> None:
        task = self._task_by_topic[topic]
        source_log = self.source_logs.get(topic)
        if source_log is not None:
            source_log.append(record)
        offset = self._offsets[topic]
        self._offsets[topic] = offset + 1
        queued = task.partitions.queues.get((topic, 0))
        was_empty = not queued
        task.add_records(
            topic, 0, [RawRecord(offset, record.timestamp, record.key, record.value, record.headers)]
        )
        if was_empty:
            self._non_empty.offer(topic)

    def _head_time(self, topic: str) -> int:
        return int(self._task_by_topic[topic].partitions.queues[(topic, 0)][0][1])

    def _process_all(self) -> None:
        """Java's `completeAllProcessableWork`. Java's driver runs the whole topology as one task, so its
        PartitionGroup chooses the next record across every input and repartition topic: the queue whose
        head is oldest (ties in its PriorityQueue's order, `_non_empty`). After each record: the
        asynchronous calls it started (automatic mode), the stream-time punctuations of every task at the
        one stream time, a commit, and the records written to topics the topology reads queued
        (`_capture`). A task whose asynchronous nodes are at `max_in_flight` keeps its records queued
        until calls complete (`complete_async_calls`)."""
        self._capture()
        non_empty = self._non_empty
        held: list[str] = []
        while non_empty:
            topic = non_empty.poll()
            task = self._task_by_topic[topic]
            if not task.process_partition(topic, 0):
                held.append(topic)
                continue
            if task.partitions.queues[(topic, 0)]:
                non_empty.offer(topic)
            if self._async_auto:
                self._run_async(list(self._async.pending))
            self._stream_time = max(self._stream_time, task.context.stream_time)
            for other in self._tasks.values():
                if other is not task and other.punctuate_stream_time(self._stream_time):
                    self._commit(other)
            self._commit(task)
            self._capture()
        for topic in held:
            non_empty.offer(topic)

    def _run_async(self, calls: list[PendingAsyncCall]) -> None:
        """Run `calls` in order and deliver what their results release, then (automatic mode) the calls
        those started, until none is left; commit each task that delivered."""
        while calls:
            for call in calls:
                self._async.run(call)
            for task in self._tasks.values():
                if task.deliver_async():
                    self._commit(task)
            calls = list(self._async.pending) if self._async_auto else []

    def _complete_async(self, calls: list[PendingAsyncCall]) -> None:
        """`_run_async`, then process what it released: records written downstream and records held
        back while the operations were at max_in_flight."""
        self._run_async(calls)
        self._process_all()

    def pending_async_calls(self) -> list[PendingAsyncCall]:
        """The asynchronous calls started and not completed, in the order they started (manual mode)."""
        return list(self._async.pending)

    def complete_async_calls(self, calls: Iterable[PendingAsyncCall] | None = None) -> int:
        """Complete `calls` (default: every pending one) in the given order and process what follows:
        results emitted as the operations' ordering allows, calls a key's order held back started (and,
        for those, `complete_async_calls` again), buffered records accepted. Returns how many ran."""
        chosen = list(self._async.pending if calls is None else calls)
        self._complete_async(chosen)
        return len(chosen)

    def _commit(self, task: StreamTask) -> None:
        task.prepare_commit()
        task.post_commit()

    def _capture(self) -> None:
        """Java's `captureOutputsAndReEnqueueInternalResults`: records written to a topic the topology
        reads (a repartition topic, an input) are queued for processing, in the order written."""
        pending, self._pending = self._pending, deque()
        for topic, record in pending:
            self._enqueue(topic, record)

    def pipe_raw(self, topic: str, record: ProducedRecord) -> None:
        """Process one already-serialized record as if it arrived on `topic`."""
        if self._closed:
            raise TopologyError("the driver is closed")
        if self._global is not None and topic in self._global.topics():
            offset = self._offsets[topic]
            self._offsets[topic] = offset + 1
            raw = RawRecord(offset, record.timestamp, record.key, record.value, record.headers)
            self._global.update(topic, 0, raw)
            self._global.flush()
            return
        if topic not in self._task_by_topic:
            raise TopologyError(f"unknown topic '{topic}': the topology does not read it")
        self._enqueue(topic, record)
        self._process_all()

    # ----------------------------------------------------------------- public API
    def create_input_topic(
        self,
        name: str,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        start_timestamp: datetime | int | None = None,
        auto_advance: timedelta | int | None = None,
    ) -> TestInputTopic:
        """A `TestInputTopic` that serializes with these serdes and pipes records into topic `name`."""
        return TestInputTopic(
            self,
            name,
            key_serde or self.config.serde("default.key.serde"),
            value_serde or self.config.serde("default.value.serde"),
            start if (start := _millis(start_timestamp)) is not None else self._wall_clock,
            _millis(auto_advance) or 0,
        )

    def create_output_topic(
        self, name: str, key_serde: Serde[Any] | None = None, value_serde: Serde[Any] | None = None
    ) -> TestOutputTopic:
        """A `TestOutputTopic` reading what the topology wrote to topic `name`, with these serdes."""
        return TestOutputTopic(
            self,
            name,
            key_serde or self.config.serde("default.key.serde"),
            value_serde or self.config.serde("default.value.serde"),
        )

    def advance_wall_clock_time(self, advance: timedelta | int) -> None:
        """Move the driver's wall-clock time forward (firing wall-clock punctuations that come due)."""
        self._wall_clock += to_millis(advance, "advance")
        for task in self._tasks.values():
            if task.maybe_punctuate_system_time(self._wall_clock):
                self._commit(task)
        self._process_all()

    @property
    def wall_clock_time_ms(self) -> int:
        """The driver's current wall-clock time, in milliseconds."""
        return self._wall_clock

    def _find_store(self, name: str) -> Any:
        for task in self._tasks.values():
            store = task.store(name)
            if store is not None:
                return store
        if self._global is not None and name in self._global.stores:
            return self._global.stores[name]
        return None

    def get_state_store(self, name: str) -> Any:
        """The store named `name`, of any kind; raises InvalidStateStoreError if the topology has none."""
        store = self._find_store(name)
        if store is None:
            raise InvalidStateStoreError(f"no store named '{name}' in this topology")
        return store

    def get_key_value_store(self, name: str) -> ReadOnlyKeyValueView:
        """A read-only view of the key-value store `name` with plain values (a timestamped store's values
        unwrapped), as Java's `getKeyValueStore`."""
        return ReadOnlyKeyValueView(self.get_state_store(name))

    def get_window_store(self, name: str) -> ReadOnlyWindowView:
        """A plain-value view of a window store: fetch(key, from, to), fetch_all, backward_fetch, ..."""
        return ReadOnlyWindowView(self.get_state_store(name))

    def get_session_store(self, name: str) -> ReadOnlySessionView:
        """A view of a session store: fetch(key), find_sessions(key, earliest_end, latest_start), ..."""
        return ReadOnlySessionView(self.get_state_store(name))

    def get_timestamped_key_value_store(self, name: str) -> Any:
        """The timestamped key-value store named `name` (values with their timestamps)."""
        return self.get_state_store(name)

    def metrics(self) -> Metrics:
        """The metrics the tasks and stores recorded (dropped records, store operations, ...)."""
        return self._metrics

    def producer_topics(self) -> list[str]:
        """The topics the topology has written to so far."""
        return sorted(self.produced)

    def _output_queue(self, topic: str) -> deque[ProducedRecord]:
        return self._outputs[topic]

    def close(self) -> None:
        """Close the tasks and stores (also done by leaving the `with` block)."""
        if self._closed:
            return
        self._closed = True
        for task in self._tasks.values():
            task.close(clean=True)
        self._async.close()
        if self._global is not None:
            self._global.close()
        if self._own_state_dir:
            shutil.rmtree(self.config.get_str("state.dir"), ignore_errors=True)

    def __enter__(self) -> TopologyTestDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TestInputTopic:
    __test__ = False

    def __init__(
        self,
        driver: TopologyTestDriver,
        name: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        start: int,
        auto_advance: int,
    ) -> None:
        self._driver = driver
        self.name = name
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._time = start
        self._advance = auto_advance

    def advance_time(self, advance: timedelta | int) -> None:
        self._time += to_millis(advance, "advance")

    def _next_time(self, timestamp: datetime | int | None) -> int:
        if timestamp is not None:
            return _millis(timestamp)  # type: ignore[return-value]
        current = self._time
        self._time += self._advance
        return current

    def pipe_input(
        self,
        key: Any = None,
        value: Any = None,
        timestamp: datetime | int | None = None,
        headers: Headers | Iterable[tuple[str, bytes | None]] | None = None,
    ) -> None:
        if self._key_serde is None or self._value_serde is None:
            raise TopologyError(f"input topic '{self.name}' needs key and value serdes")
        record = ProducedRecord(
            self.name,
            self._key_serde.serialize(self.name, key),
            self._value_serde.serialize(self.name, value),
            ensure_headers(headers),
            self._next_time(timestamp),
        )
        self._driver.pipe_raw(self.name, record)

    def pipe_record(self, record: TestRecord[Any, Any]) -> None:
        self.pipe_input(record.key, record.value, record.timestamp, record.headers)

    def pipe_value_list(self, values: Iterable[Any]) -> None:
        for value in values:
            self.pipe_input(None, value)

    def pipe_key_value_list(self, pairs: Iterable[tuple[Any, Any]]) -> None:
        for key, value in pairs:
            self.pipe_input(key, value)

    def pipe_records_list(self, records: Iterable[TestRecord[Any, Any]]) -> None:
        for record in records:
            self.pipe_record(record)


class TestOutputTopic:
    __test__ = False

    def __init__(
        self,
        driver: TopologyTestDriver,
        name: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
    ) -> None:
        self._driver = driver
        self.name = name
        self._key_serde = key_serde
        self._value_serde = value_serde

    def read_record(self) -> TestRecord[Any, Any]:
        queue = self._driver._output_queue(self.name)
        if not queue:
            raise EmptyTopicError(f"empty topic: {self.name}")
        if self._key_serde is None or self._value_serde is None:
            raise TopologyError(f"output topic '{self.name}' needs key and value serdes")
        raw = queue.popleft()
        return TestRecord(
            self._key_serde.deserialize(self.name, raw.key),
            self._value_serde.deserialize(self.name, raw.value),
            raw.timestamp,
            raw.headers,
        )

    def read_value(self) -> Any:
        return self.read_record().value

    def read_key_value(self) -> tuple[Any, Any]:
        return self.read_record().key_value()

    def read_records_to_list(self) -> list[TestRecord[Any, Any]]:
        result = []
        while not self.is_empty():
            result.append(self.read_record())
        return result

    def read_values_to_list(self) -> list[Any]:
        return [r.value for r in self.read_records_to_list()]

    def read_key_values_to_list(self) -> list[tuple[Any, Any]]:
        return [r.key_value() for r in self.read_records_to_list()]

    def read_key_values_to_map(self) -> dict[Any, Any]:
        """The last value per key (a tombstone maps to None), as Java's readKeyValuesToMap."""
        result: dict[Any, Any] = {}
        for key, value in self.read_key_values_to_list():
            if key is None:
                raise ValueError(f"read_key_values_to_map: topic '{self.name}' has a record with a null key")
            result[key] = value
        return result

    def is_empty(self) -> bool:
        return not self._driver._output_queue(self.name)

    def get_queue_size(self) -> int:
        return len(self._driver._output_queue(self.name))
