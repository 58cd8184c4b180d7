"""The processor context a task hands to its processors and stores.

One object per task plays both roles, ProcessorContext for user code and StoreContext for stores, because
both need the same facts: the record being processed, the task's identity, its collector and cache.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kappaflow.api.config import StreamsConfig
from kappaflow.api.errors import InvalidStateStoreError, TopologyError
from kappaflow.api.metrics import Metrics
from kappaflow.api.processor import PunctuationType, TaskId, to_millis
from kappaflow.api.record import Headers, Record, RecordMetadata
from kappaflow.state.api import (
    ChangelogSend,
    FlushedWrites,
    MessagesRestoreCallback,
    RecordContext,
    RestoreCallback,
    StateStore,
)
from kappaflow.state.cache import RecordCache
from kappaflow.state.kv_wrapped import log_writes
from kappaflow.tasks.async_calls import TaskAsyncCalls
from kappaflow.tasks.collector import RecordCollector
from kappaflow.tasks.punctuation import PunctuationQueue, PunctuationSchedule

if TYPE_CHECKING:
    from kappaflow.tasks.nodes import ProcessorNode

NO_CONTEXT = RecordContext(-1, "", -1, -1, Headers())
LogWrites = Callable[[ChangelogSend, str, int, FlushedWrites, bool], None]
"""`kappaflow.state.kv_wrapped.log_writes` or its native twin."""


class ProcessorContextImpl:
    """A task's ProcessorContext and StoreContext. Slotted: the drain loop (`kappaflow.tasks.drain`, and
    the native core's, through the slots' descriptors) sets the record's context and current node on it
    for every record."""

    async_calls: TaskAsyncCalls  # the task's asynchronous nodes (set by StreamTask; a global task has none)

    __slots__ = (
        "__weakref__",  # a stream-stream join's sides share a time tracker, weakly keyed by the context
        "_application_id",
        "_cache",
        "_changelog_topic",
        "_changelog_topics",
        "_clock",
        "_config",
        "_metrics",
        "_register",
        "_state_dir",
        "_task_id",
        "async_calls",
        "changelog_partition",
        "collector",
        "commit_requested",
        "current",
        "current_node",
        "failed_flush_record",
        "failed_node",
        "global_stores",
        "log_writes",
        "node_failed",
        "stores",
        "stream_time",
        "stream_time_punctuations",
        "system_time_punctuations",
    )

    def __init__(
        self,
        task_id: TaskId,
        config: StreamsConfig,
        collector: RecordCollector,
        cache: RecordCache | None,
        metrics: Metrics,
        state_dir: Path,
        changelog_topic: Callable[[str], str],
        register: Callable[[StateStore, RestoreCallback, MessagesRestoreCallback | None], None],
        clock: Callable[[], int],
    ) -> None:
        self._task_id = task_id
        self._config = config
        self._application_id = config.get_str("application.id")
        self.collector = collector
        self._cache = cache
        self._metrics = metrics
        self._state_dir = state_dir
        self._changelog_topic = changelog_topic
        self._changelog_topics: dict[str, str] = {}
        self._register = register
        self._clock = clock
        self.stores: dict[str, Any] = {}
        self.global_stores: dict[str, Any] = {}
        self.current_node: ProcessorNode | None = None
        self.current: RecordContext = NO_CONTEXT
        self.stream_time = -1
        self.stream_time_punctuations = PunctuationQueue()
        self.system_time_punctuations = PunctuationQueue()
        self.commit_requested = False
        self.failed_node: str | None = None  # the deepest node a processing error came from
        # the record context of the deepest cached update whose flush raised (`flush_failed`): the flush
        # restores the context it found before the error reaches the commit, which names this record
        self.failed_flush_record: RecordContext | None = None
        # the processing handler's turn at the node that raised (task-set when the handler may CONTINUE:
        # Java's ProcessorNode catches per node); None: a failure goes up to the drain loop
        self.node_failed: Callable[[Exception, ProcessorNode], None] | None = None
        self.changelog_partition = task_id.partition
        # how `log_flushed` sends a flush's changelog records: the Python reference, or the native
        # core's twin (set by the task when it runs with the core)
        self.log_writes: LogWrites = log_writes

    # ----------------------------------------------------------------- ProcessorContext
    @property
    def application_id(self) -> str:
        return self._application_id

    @property
    def task_id(self) -> TaskId:
        return self._task_id

    @property
    def app_config(self) -> StreamsConfig:
        return self._config

    @property
    def metrics(self) -> Metrics:
        return self._metrics

    @property
    def cache(self) -> RecordCache | None:
        return self._cache

    def forward(self, record: Record[Any, Any], child: str | None = None) -> None:
        previous = self.current_node
        if previous is None:
            raise TopologyError("forward() called outside of process() or a punctuation")
        if child is None:
            targets = previous.children
        else:
            target = previous.children_by_name.get(child)
            if target is None:
                raise TopologyError(f"'{previous.name}' has no child named '{child}'")
            targets = [target]
        # no `finally`: the normal path restores the current node with one store, the error path in
        # `except` (this runs once per hop of every record)
        node_failed = self.node_failed
        try:
            for node in targets:
                self.current_node = node
                if node_failed is None:
                    node.handle(record)
                    continue
                try:
                    node.handle(record)
                except Exception as exc:  # the failing node's output is lost; its siblings still run
                    node_failed(exc, node)  # raises when the handler fails the task
                    self.failed_node = None
        except BaseException:
            if self.failed_node is None and self.current_node is not None:
                self.failed_node = self.current_node.name
            self.current_node = previous
            raise
        self.current_node = previous

    def schedule(
        self, interval: timedelta | int, punctuation_type: PunctuationType, callback: Callable[[int], None]
    ) -> PunctuationSchedule:
        millis = to_millis(interval, "punctuation interval")
        if millis < 1:
            raise ValueError(f"punctuation interval must be at least 1 ms, got {millis}")
        if punctuation_type is PunctuationType.STREAM_TIME:
            return self.stream_time_punctuations.add(
                PunctuationSchedule(self.current_node, millis, callback, 0)
            )
        return self.system_time_punctuations.add(
            PunctuationSchedule(self.current_node, millis, callback, self._clock() + millis)
        )

    def get_state_store(self, name: str) -> Any:
        store = self.stores.get(name) or self.global_stores.get(name)
        if store is None:
            node = self.current_node.name if self.current_node else "?"
            raise InvalidStateStoreError(
                f"processor '{node}' has no access to store '{name}': connect it with "
                f"add_state_store/connect_processor_and_state_stores or process(supplier, '{name}')"
            )
        return store

    def record_metadata(self) -> RecordMetadata | None:
        """Where the current record came from; in a punctuation (Java's punctuation record context) topic
        None, partition -1, offset -1; None outside processing."""
        current = self.current
        if current is NO_CONTEXT:
            return None
        return RecordMetadata(current.topic or None, current.partition, current.offset)

    def current_stream_time_ms(self) -> int:
        return self.stream_time

    def current_system_time_ms(self) -> int:
        return self._clock()

    def commit(self) -> None:
        self.commit_requested = True

    # ----------------------------------------------------------------- StoreContext
    def state_dir(self) -> Path:
        return self._state_dir

    def changelog_topic(self, store_name: str) -> str:
        return self._changelog_topic(store_name)

    def log_change(
        self, store_name: str, key: bytes, value: bytes | None, timestamp: int, headers: Headers | None = None
    ) -> None:
        topic = self._changelog_topics.get(store_name)
        if topic is None:  # named once per store, not formatted per changelog record
            topic = self._changelog_topics[store_name] = self._changelog_topic(store_name)
        self.collector.send_changelog(topic, key, value, timestamp, self.changelog_partition)

    def log_flushed(self, store_name: str, writes: FlushedWrites, timestamped: bool) -> None:
        topic = self._changelog_topics.get(store_name)
        if topic is None:
            topic = self._changelog_topics[store_name] = self._changelog_topic(store_name)
        self.log_writes(self.collector.send_changelog, topic, self.changelog_partition, writes, timestamped)

    def record_context(self) -> RecordContext:
        return self.current

    def set_record_context(self, context: RecordContext) -> None:
        self.current = context

    def flush_failed(self, record: RecordContext) -> None:
        """A cached update from `record` raised while flushed; the deepest one (the first to report) is
        kept for the commit's error."""
        if self.failed_flush_record is None:
            self.failed_flush_record = record

    def register_store(
        self,
        store: StateStore,
        restore: RestoreCallback,
        restore_messages: MessagesRestoreCallback | None = None,
    ) -> None:
        self._register(store, restore, restore_messages)
