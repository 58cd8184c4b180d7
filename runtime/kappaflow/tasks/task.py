"""`StreamTask`: one partition of one sub-topology, bound to the runtime.

The task owns its processors, stores and record queues. It is driven from outside (by the runner, the
test driver or Spark) through a small surface: add records, process one, punctuate, prepare and finish a
commit, close. Its lifecycle is an explicit state machine so an illegal transition is a bug report, not
a silent corruption.
"""

from __future__ import annotations

import functools
import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from enum import Enum
from pathlib import Path
from typing import Any

from kappaflow.api.config import StreamsConfig
from kappaflow.api.errors import (
    ProcessingError,
    SchemaRegistryUnavailableError,
    StreamsError,
    TaskMigratedError,
)
from kappaflow.api.metrics import Metrics
from kappaflow.api.processor import TaskId
from kappaflow.api.record import Headers, Record
from kappaflow.api.serdes import Serde, is_utf8
from kappaflow.api.time import ConsumedRecord, TimestampExtractor, record_timestamp
from kappaflow.api.wrapper import configured_wrapper, wrapped_supplier
from kappaflow.state.api import RecordContext
from kappaflow.state.cache import RecordCache
from kappaflow.tasks import native
from kappaflow.tasks.async_calls import TaskAsyncCalls
from kappaflow.tasks.async_executor import AsyncExecutor, shared_executor
from kappaflow.tasks.collector import RecordCollector
from kappaflow.tasks.context import ProcessorContextImpl
from kappaflow.tasks.drain import DrainPlan, RawRecord, RawTuple, drain_python
from kappaflow.tasks.failures import RecordFailures
from kappaflow.tasks.fusion import fuse_nodes
from kappaflow.tasks.nodes import ProcessorNode, SinkNode, SourceNode
from kappaflow.tasks.partition_group import LAGGING_STALL_MS, PartitionGroup
from kappaflow.tasks.punctuation import PunctuationQueue, PunctuationSchedule
from kappaflow.tasks.state_manager import ProcessorStateManager
from kappaflow.topology.nodes import ProcessorSpec, SinkSpec, SourceSpec
from kappaflow.topology.topology import Topology
from kappaflow_contract.topics import changelog_topic

log = logging.getLogger(__name__)


class TaskState(Enum):
    CREATED = "CREATED"
    RESTORING = "RESTORING"
    RUNNING = "RUNNING"
    CLOSED = "CLOSED"


_TRANSITIONS: dict[TaskState, set[TaskState]] = {
    TaskState.CREATED: {TaskState.RESTORING, TaskState.CLOSED},
    TaskState.RESTORING: {TaskState.RUNNING, TaskState.CLOSED},
    TaskState.RUNNING: {TaskState.CLOSED},
    TaskState.CLOSED: set(),
}

__all__ = ["LAGGING_STALL_MS", "StreamTask", "TaskState"]  # LAGGING_STALL_MS: PartitionGroup's, for callers


def resolve_serde(explicit: Serde[Any] | None, config: StreamsConfig, key: str) -> Serde[Any] | None:
    if explicit is None:
        return config.serde(key)
    return explicit.with_default(config.serde(key))


class StreamTask:
    """One partition of one sub-topology, bound to the runtime: Kafka Streams' StreamTask.

    It exists so that everything one input partition's processing needs is built once and driven
    through a few calls, whoever drives it (the runner, TopologyTestDriver, a Spark executor). It owns
    the sub-topology's nodes for this partition, their processor context, the stores (through its
    `ProcessorStateManager`), its input queues and their choice of the next record (`PartitionGroup`),
    its failed-record handling (`RecordFailures`), the input offsets consumed and committed, and its
    lifecycle state. It does not own the clients, the commit protocol or the thread cache: those are
    handed in (the collector, the cache) or live in the runner."""

    def __init__(
        self,
        task_id: TaskId,
        topology: Topology,
        config: StreamsConfig,
        collector: RecordCollector,
        cache: RecordCache | None,
        metrics: Metrics,
        state_root: Path,
        clock: Callable[[], int],
        global_stores: dict[str, Any] | None = None,
        transactional_state: bool | None = None,
        async_executor: Callable[[], AsyncExecutor] = shared_executor,
    ) -> None:
        """`transactional_state`: keep store writes apart until `post_commit` (default: under
        exactly_once_v2); see `kappaflow.tasks.state_manager`. `async_executor` makes (on first use) the
        executor the task's asynchronous nodes call through (kappaflow.tasks.async_calls)."""
        self.id = task_id
        self.topology = topology
        self.config = config
        self.metrics = metrics
        self.sub = topology.sub_topologies()[task_id.subtopology]
        self.application_id = config.get_str("application.id")
        self.state = TaskState.CREATED
        self.task_dir = state_root / str(task_id)
        self.state_manager = ProcessorStateManager(
            self.task_dir,
            task_id.partition,
            self.changelog_topic,
            transactional=config.exactly_once if transactional_state is None else transactional_state,
            source_changelogs=frozenset(topology.source_changelogs),
            lazy_checkpoints=True,
        )
        self.context = ProcessorContextImpl(
            task_id,
            config,
            collector,
            cache,
            metrics,
            self.task_dir,
            self.changelog_topic,
            self.state_manager.register,
            clock,
        )
        self.context.global_stores = global_stores or {}
        # the wall-clock schedules (the queue keeps this one list for its life): the runner tests it for
        # emptiness per task per iteration, a check without a call
        self.wall_clock_schedules = self.context.system_time_punctuations.schedules
        self.async_calls = TaskAsyncCalls(async_executor, self._async_call_failed)
        self.context.async_calls = self.async_calls
        self.consumed_offsets: dict[tuple[str, int], int] = {}
        self.committed_offsets: dict[tuple[str, int], int] = {}
        self.first_offsets: dict[tuple[str, int], int] = {}  # the first offset handed, per partition
        self._punctuated = False  # a wall-clock punctuation ran since the last commit
        self.sources: dict[str, SourceNode] = {}
        self.nodes: list[ProcessorNode] = []
        self._labels = {"task": str(task_id)}
        self.failures = RecordFailures(config, metrics, collector, self._labels)
        # the queue whose head is being processed (None in a punctuation or between records): the raw
        # record a node-level failure names and dead-letters
        self._draining: deque[RawTuple] | None = None
        if self.failures.handles_per_node:
            self.context.node_failed = self._node_failed
        self._processed = 0  # published to the metrics registry on commit
        self._plans: dict[tuple[str, int], DrainPlan] = {}  # per input partition, while running
        self._native = native.core(config.get_bool("kappaflow.native.enabled"))
        self._run_drain = self._native.drain if self._native is not None else drain_python
        if self._native is not None:
            self.context.log_writes = self._native.log_writes
        self._build_nodes()
        self.input_partitions = [(topic, task_id.partition) for topic in sorted(self.sources)]
        self.partitions = PartitionGroup(
            str(task_id), self.input_partitions, config.get_int("max.task.idle.ms")
        )

    @property
    def partition_time(self) -> dict[tuple[str, int], int]:
        """Per input partition, the largest timestamp processed from it (the partition group's)."""
        return self.partitions.partition_time

    # ----------------------------------------------------------------- construction
    def changelog_topic(self, store_name: str) -> str:
        """`<application.id>-<store>-changelog`, or the table's source topic when it is the store's
        changelog (`reuse.ktable.source.topics`)."""
        source = self.topology.source_changelogs.get(store_name)
        return source if source is not None else changelog_topic(self.application_id, store_name)

    def _build_nodes(self) -> None:
        config = self.config
        wrapper = configured_wrapper(config)  # KIP-1112: every processor through the configured wrapper
        by_name: dict[str, ProcessorNode] = {}
        resolve = self._resolve_topic
        for spec in self.sub.nodes:
            node: ProcessorNode
            if isinstance(spec, SourceSpec):
                key_serde = resolve_serde(spec.key_serde, config, "default.key.serde")
                value_serde = resolve_serde(spec.value_serde, config, "default.value.serde")
                if key_serde is None or value_serde is None:
                    which = "key" if key_serde is None else "value"
                    raise StreamsError(
                        f"source '{spec.name}' (topics {spec.topics}) has no {which} serde: pass "
                        f"{which}_serde= or set default.{which}.serde"
                    )
                extractor: TimestampExtractor | None = spec.timestamp_extractor or config.get(
                    "default.timestamp.extractor"
                )
                source = SourceNode(spec, key_serde, value_serde, extractor)
                source.bind(self.context)
                node = source
                for topic in spec.topics:
                    self.sources[resolve(topic)] = source
            elif isinstance(spec, SinkSpec):
                sink = SinkNode(
                    spec,
                    resolve,
                    resolve_serde(spec.key_serde, config, "default.key.serde"),
                    resolve_serde(spec.value_serde, config, "default.value.serde"),
                )
                sink.bind(self.context)
                node = sink
            else:
                assert isinstance(spec, ProcessorSpec)
                node = ProcessorNode(spec.name, wrapped_supplier(wrapper, spec.name, spec.supplier)())
            by_name[spec.name] = node
            self.nodes.append(node)
        for spec in self.sub.nodes:
            for child in spec.children:
                by_name[spec.name].add_child(by_name[child])

    def _resolve_topic(self, topic: str) -> str:
        return self.topology.resolve_topic(topic, self.application_id)

    def _transition(self, target: TaskState) -> None:
        if target not in _TRANSITIONS[self.state]:
            raise StreamsError(f"task {self.id}: illegal transition {self.state.value} -> {target.value}")
        log.debug("task %s: %s -> %s", self.id, self.state.value, target.value)
        self.state = target

    def initialize(self) -> None:
        """Open the stores (which register their changelogs); the task then restores before running."""
        for store_name in self.sub.stores:
            builder = self.topology.stores[store_name]
            self.state_manager.register_builder(builder)
            store = builder.build()
            self.context.stores[store_name] = store
            store.init(self.context, store)
        self._transition(TaskState.RESTORING)

    def complete_restoration(self) -> None:
        """Restoration is done: initialize the processors (in topology order) and start running."""
        self._plans.clear()  # they hold the nodes' handles and stages
        for node in self.nodes:
            node.unfuse()  # initialized again (new stores): compiled again, no route to an old stage
        for node in self.nodes:
            node.init(self.context)
        if self.config.get_bool("kappaflow.fusion.enabled"):
            fuse_nodes(self.nodes, self.context, self._native, self.context.node_failed)
        self._transition(TaskState.RUNNING)

    def store(self, name: str) -> Any | None:
        """The task's store `name` (the typed store processors see), or None when the task has none of
        that name: what interactive queries and the test driver read."""
        return self.context.stores.get(name)

    # ----------------------------------------------------------------- input
    def add_records(self, topic: str, partition: int, records: Iterable[RawTuple]) -> None:
        key = (topic, partition)
        if key not in self.first_offsets:
            records = list(records)
            if records:
                self.first_offsets[key] = records[0][0]
        self.partitions.add(key, records)

    def resume_offsets(self) -> dict[tuple[str, int], int]:
        """Per input partition, where input resumes if this task's work since its last commit is
        dropped: the offset it committed, else the first offset it was handed."""
        return {**self.first_offsets, **self.committed_offsets}

    def buffered(self) -> int:
        return self.partitions.buffered()

    def has_buffered(self) -> bool:
        """Whether any input has a record queued (asked every loop: no count)."""
        return self.partitions.has_buffered()

    def process(self) -> bool:
        """Process the buffered record with the lowest timestamp; False when nothing is buffered (or
        the asynchronous nodes are at `max_in_flight`: the record stays buffered)."""
        calls = self.async_calls  # `nodes` first: a task without asynchronous nodes pays no call per record
        if self.state is not TaskState.RUNNING or (calls.nodes and calls.saturated()):
            return False
        chosen = self.partitions.next_queue()
        if chosen is None:
            return False
        (topic, partition), queue = chosen
        self._drain(topic, partition, queue, 1)
        return True

    def process_partition(self, topic: str, partition: int) -> bool:
        """Process the record at the head of one input partition's queue (the test driver chooses the
        partition across its tasks, as Java's one task does); False when it has nothing queued (or its
        asynchronous nodes are at `max_in_flight`: the record stays queued)."""
        queue = self.partitions.queues.get((topic, partition))
        calls = self.async_calls
        if self.state is not TaskState.RUNNING or not queue or (calls.nodes and calls.saturated()):
            return False
        self.partitions.forget_order()  # the driver's heap orders these queues, not the task's
        self._drain(topic, partition, queue, 1)
        return True

    def process_buffered(
        self,
        limit: int = 1 << 62,
        fetched_lag: Callable[[str, int], int | None] | None = None,
        now_ms: int = 0,
    ) -> int:
        """Process up to `limit` buffered records in timestamp order; return how many were processed.

        The runner's loop: a task that reads one partition (most do) has nothing to choose between, so
        its queue is drained in one tight loop instead of one `process()` call per record. A task that
        reads several stops when it must wait for one of them (`ready_to_process`, given the runner's
        `fetched_lag`); without `fetched_lag` (test driver, Spark) every input is already buffered."""
        if self.state is not TaskState.RUNNING:
            return 0
        if self.async_calls.nodes:  # backpressure: accept no more than the asynchronous nodes can hold
            limit = min(limit, self.async_calls.free_slots())
            if limit <= 0:
                return 0
        only = self.partitions.only_queue()
        if only is not None:
            (topic, partition), queue = only
            return self._drain(topic, partition, queue, limit)
        count = 0
        if fetched_lag is None:
            while count < limit and self.process():
                count += 1
            return count
        # lags change only when the runner fetches, between calls: ask once per partition per call
        lags: dict[tuple[str, int], int | None] = {}

        def lag_this_pass(topic: str, partition: int) -> int | None:
            key = (topic, partition)
            if key not in lags:
                lags[key] = fetched_lag(topic, partition)
            return lags[key]

        while count < limit and self.ready_to_process(now_ms, lag_this_pass) and self.process():
            count += 1
        return count

    def ready_to_process(self, now_ms: int, fetched_lag: Callable[[str, int], int | None]) -> bool:
        """Whether the task may process now, with one of its inputs empty (`PartitionGroup.ready`)."""
        return self.partitions.ready(now_ms, fetched_lag)

    def _drain(self, topic: str, partition: int, queue: deque[RawTuple], limit: int) -> int:
        """Process up to `limit` records from the head of one partition's queue (`kappaflow.tasks.drain`);
        the consumed offset, partition time and processed count are written back however it ends."""
        tp = (topic, partition)
        plan = self._plans.get(tp)
        if plan is None:
            plan = self._plans[tp] = self._plan(topic, partition)
        partition_times = self.partitions.partition_time
        self._draining = queue
        try:
            count, last, partition_time, processed, error = self._run_drain(
                queue, limit, plan, partition_times.get(tp, -1), self.context.stream_time
            )
        finally:
            self._draining = None
        if count:
            self.consumed_offsets[tp] = last
        if partition_time >= 0:
            partition_times[tp] = partition_time
        self._processed += processed
        if error is not None:
            raise error
        return count

    def _plan(self, topic: str, partition: int) -> DrainPlan:
        """What the loop needs for one input partition (kept while the task runs: fusion is done by
        then, and a task is reinitialized, with new plans, when its processors are)."""
        source = self.sources[topic]
        context = self.context
        only_child = source.children[0] if len(source.children) == 1 else None
        node: ProcessorNode = source
        call: Callable[..., None] = context.forward
        record_type: type[Record[Any, Any]] | None = Record
        if only_child is not None and only_child.fused is not None:  # compiled: no Record built
            node, call, record_type = only_child, only_child.fused, None
        elif only_child is not None:  # the source's one child, called directly
            node, call = only_child, only_child.handle
        name = source.name
        failures = self.failures

        def extract_timestamp(raw: RawTuple, key: Any, value: Any, partition_time: int) -> int:
            return self._extract_timestamp(
                source, RawRecord(*raw), key, value, (topic, partition), partition_time
            )

        def deserialization_failed(exc: Exception, key_failed: bool, raw: RawTuple) -> None:
            error = source.deserialization_error(exc, key_failed, topic, partition, raw[0])
            failures.deserialization_failed(error, topic, partition, RawRecord(*raw), name)

        def processing_failed(exc: Exception, raw: RawTuple) -> None:
            if context.failed_node is None and context.current_node is not None:
                context.failed_node = context.current_node.name  # raised outside forward()
            failures.processing_failed(exc, topic, partition, RawRecord(*raw), context.failed_node or name)

        return DrainPlan(
            topic=topic,
            partition=partition,
            key_utf8=is_utf8(source.key_serde),
            value_utf8=is_utf8(source.value_serde),
            key_deserializer=source.key_deserializer,
            value_deserializer=source.value_deserializer,
            custom_extractor=source.timestamp_extractor is not record_timestamp,
            extract_timestamp=extract_timestamp,
            deserialization_failed=deserialization_failed,
            registry_unavailable=SchemaRegistryUnavailableError,
            processing_failed=processing_failed,
            # an unreachable registry is not this record's fault: no handler skips it
            passed_through=(TaskMigratedError, ProcessingError, SchemaRegistryUnavailableError),
            context=context,
            record_context=RecordContext,
            node=node,
            call=call,
            record_type=record_type,
            schedules=context.stream_time_punctuations.schedules,
            punctuate=functools.partial(self._punctuate, context.stream_time_punctuations),
        )

    def _extract_timestamp(
        self,
        source: SourceNode,
        raw: RawRecord,
        key: Any,
        value: Any,
        tp: tuple[str, int],
        partition_time: int,
    ) -> int:
        """The configured extractor's timestamp; a negative one drops the record (with a metric)."""
        consumed = ConsumedRecord(tp[0], tp[1], raw.offset, raw.timestamp, key, value, raw.headers)
        timestamp = int(source.timestamp_extractor(consumed, partition_time))
        if timestamp < 0:
            log.warning(
                "dropping record %s-%s@%s: invalid extracted timestamp %s",
                tp[0],
                tp[1],
                raw.offset,
                timestamp,
            )
            self.metrics.increment("dropped-records-total", reason="invalid-timestamp", **self._labels)
        return timestamp

    # ----------------------------------------------------------------- punctuation
    def _punctuate(self, queue: PunctuationQueue, now: int) -> bool:
        """One round of `queue` at `now` (Java's PunctuationQueue.maybePunctuate and
        StreamTask.punctuate): each punctuator runs with Java's punctuation record context (no topic,
        partition -1, offset -1), and an exception it raises goes to the processing handler."""
        context = self.context
        draining, self._draining = self._draining, None  # not the record at the queue's head

        def run(schedule: PunctuationSchedule) -> None:
            context.current = RecordContext(now, "", -1, -1, Headers())
            context.current_node = schedule.node
            try:
                schedule.callback(now)
            except (TaskMigratedError, ProcessingError):
                raise  # a node's failure the handler already answered with FAIL, or not the task's
            except Exception as exc:
                name = schedule.node.name if schedule.node is not None else "?"
                self.failures.punctuation_failed(exc, name, now)
            finally:
                context.current_node = None
                context.failed_node = None

        try:
            return queue.punctuate(now, run)
        finally:
            self._draining = draining

    def _node_failed(self, exc: Exception, node: ProcessorNode) -> None:
        """A node below the task's first one raised (see `RecordFailures.node_failed`); errors that are
        not the record's fault, or a failure already answered, go on up."""
        if isinstance(exc, (TaskMigratedError, ProcessingError, SchemaRegistryUnavailableError)):
            raise exc
        queue = self._draining
        raw = RawRecord(*queue[0]) if queue else None
        self.failures.node_failed(exc, node.name, self.context.current, raw)

    def punctuate_stream_time(self, stream_time: int) -> bool:
        """Advance the task's stream time to `stream_time` if later and run the stream-time punctuations
        due: the test driver shares one stream time across its tasks, as Java's runs one task."""
        context = self.context
        if self.state is not TaskState.RUNNING:
            return False
        if stream_time > context.stream_time:
            context.stream_time = stream_time
        if not context.stream_time_punctuations.schedules:
            return False
        return self._punctuate(context.stream_time_punctuations, context.stream_time)

    def maybe_punctuate_system_time(self, now: int) -> bool:
        if self.state is not TaskState.RUNNING or not self.wall_clock_schedules:
            return False
        fired = self._punctuate(self.context.system_time_punctuations, now)
        self._punctuated |= fired
        return fired

    # ----------------------------------------------------------------- commit and close
    def commit_needed(self) -> bool:
        """Input consumed, a commit requested, or a wall-clock punctuation ran (its writes must be
        committed too, even in a task that consumes nothing)."""
        return bool(self.consumed_offsets) or self.context.commit_requested or self._punctuated

    def prepare_commit(self) -> dict[tuple[str, int], int]:
        """Flush stores (caches forward and log their dirty entries) and return the offsets to commit."""
        if self.state in (TaskState.RUNNING, TaskState.RESTORING):
            context = self.context
            context.failed_flush_record = None  # one left by a failed eviction while processing
            try:
                self.state_manager.flush()
            except (TaskMigratedError, ProcessingError, SchemaRegistryUnavailableError):
                raise
            except Exception as exc:  # a node below a cached table raised: name it, as the drain does
                node, context.failed_node = context.failed_node, None
                record, context.failed_flush_record = context.failed_flush_record, None
                if node is None:
                    raise
                raise self.failures.flush_error(exc, node, record) from exc
        self.publish_metrics()
        return self.committable_offsets()

    def committable_offsets(self) -> dict[tuple[str, int], int]:
        """The input offsets a commit now would commit (the next to consume per partition, or the oldest
        record an asynchronous node still holds: never past a record whose outputs are not out);
        flushing the stores does not change them."""
        if not self.async_calls.nodes:
            return {tp: offset + 1 for tp, offset in self.consumed_offsets.items()}
        watermark = self.async_calls.watermark
        result = {}
        for tp, offset in self.consumed_offsets.items():
            held = watermark(tp)
            result[tp] = offset + 1 if held is None else min(offset + 1, held)
        return result

    def post_commit(self, written: Mapping[tuple[str, int], int] | None = None) -> None:
        """The commit went through: `written` holds the last acknowledged offset per changelog partition
        (the collector's), which the state manager takes as its stores' new changelog offsets."""
        committed = self.committable_offsets()
        self.committed_offsets.update(committed)
        # a partition whose records an asynchronous node still holds stays to commit again later
        self.consumed_offsets = {tp: o for tp, o in self.consumed_offsets.items() if committed[tp] <= o}
        self.context.commit_requested = False
        self._punctuated = False
        self.failures.committed()
        if written:
            self.state_manager.record_written(written)
        self.state_manager.record_consumed(self.committed_offsets)
        # always: transactional stores (exactly_once_v2) apply the committed writes here, offsets or not;
        # at_least_once writes a checkpoint only once the offsets moved far enough (`checkpoint_due`)
        self.state_manager.checkpoint_offsets(enforce=False)

    def publish_metrics(self) -> None:
        if self._processed:
            self.metrics.increment("records-processed-total", self._processed, **self._labels)
            self._processed = 0
        if self.partitions.enforced:
            self.metrics.increment("enforced-processing-total", self.partitions.enforced, **self._labels)
            self.partitions.enforced = 0

    # ----------------------------------------------------------------- asynchronous nodes
    def deliver_async(self) -> int:
        """Emit the results of the asynchronous calls completed so far (kappaflow.tasks.async_calls);
        return how many completions were handled. Called by whoever drives the task, between records."""
        if self.state is not TaskState.RUNNING:
            return 0
        return self.async_calls.deliver()

    def has_async_results(self) -> bool:
        """Whether completed asynchronous calls wait to be delivered (asked every loop: no count)."""
        return self.async_calls.has_completed()

    def async_saturated(self) -> bool:
        """Whether an asynchronous node is at `max_in_flight`: the runner pauses the task's input."""
        return self.async_calls.saturated()

    def async_pending(self) -> int:
        """Records the asynchronous nodes accepted and have not emitted yet."""
        return self.async_calls.pending()

    def await_async_results(self, timeout_s: float) -> None:
        """Block up to `timeout_s` until an asynchronous call completes (returns at once if one has)."""
        self.async_calls.wait_for_completion(timeout_s)

    def finish_async(self, timeout_s: float, before_deliver: Callable[[], object]) -> bool:
        """Wait up to `timeout_s` for the asynchronous calls to complete, delivering their results (a
        clean shutdown); True when none is left. `before_deliver` runs before each delivery."""
        if self.state is not TaskState.RUNNING:
            return True
        return self.async_calls.finish(timeout_s, before_deliver)

    def _async_call_failed(
        self, exc: Exception, record: RecordContext, key: bytes | None, value: bytes | None, node: str
    ) -> None:
        raw = RawRecord(record.offset, record.timestamp, key, value, record.headers)
        self.failures.processing_failed(exc, record.topic, record.partition, raw, node)

    def close(self, clean: bool = True) -> None:
        if self.state is TaskState.CLOSED:
            return
        self.async_calls.close()  # cancelled: a closed task never emits a late result
        if self.state is TaskState.RUNNING:
            for node in self.nodes:
                try:
                    node.close()
                except Exception:
                    if clean:
                        raise
                    log.exception("task %s: error closing node %s", self.id, node.name)
        if clean:
            self.state_manager.flush()
        self.publish_metrics()
        self.state_manager.close(clean)
        self.state = TaskState.CLOSED
