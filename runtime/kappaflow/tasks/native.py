"""kappaflow's native core: `kappaflow_native` (Rust, `runtime/native/`), a task's drain loop and its cached
aggregations compiled.

The core is optional. `make setup` builds it with maturin when Rust is on the machine (CI and the images
always do); without it kappaflow runs the Python references (`kappaflow.tasks.drain.drain_python` and every
processor's generic `process`), with the same results, slower. `kappaflow.native.enabled=false` keeps a
process on the Python code with the core installed: the tests run the in-process tiers with both that way.
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from kappaflow.api.processor import ProcessorContext
from kappaflow.api.record import Headers
from kappaflow.state.api import ChangelogSend, FlushedWrites, RecordContext
from kappaflow.state.cache import _ENTRY_OVERHEAD, NOT_DECODED, RecordCache, ThreadCache
from kappaflow.state.kv_layers import CachedStoreBinding
from kappaflow.state.timestamped import ValueAndTimestamp
from kappaflow.tasks.drain import Drained, DrainPlan, RawTuple

log = logging.getLogger(__name__)

PROTOCOL = 19
"""The version of the calls below; a core built from other sources says another and is not used."""

TOUCHES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "kappaflow.tasks.drain.DrainPlan",
        (
            "topic",
            "partition",
            "key_utf8",
            "value_utf8",
            "key_deserializer",
            "value_deserializer",
            "custom_extractor",
            "extract_timestamp",
            "deserialization_failed",
            "registry_unavailable",
            "processing_failed",
            "passed_through",
            "context",
            "record_context",
            "node",
            "call",
            "record_type",
            "schedules",
            "punctuate",
        ),
    ),
    (
        "kappaflow.tasks.native.StatelessPlan",
        ("kind", "callback", "flag", "node", "context", "downstream", "pair"),
    ),
    (
        "kappaflow.tasks.native.SinkPlan",
        (
            "topic",
            "node",
            "send",
            "key_utf8",
            "value_utf8",
            "key_serializer",
            "value_serializer",
            "context",
            "serialization_error",
            "streams_error",
        ),
    ),
    (
        "kappaflow.tasks.native.AggregatePlan",
        (
            "node",
            "context",
            "skip_null",
            "counting",
            "initializer",
            "aggregator",
            "reducer",
            "store",
            "value_and_timestamp",
            "record_context",
        ),
    ),
    (
        "kappaflow.tasks.context.ProcessorContextImpl",
        ("current", "current_node", "failed_node", "stream_time"),
    ),
    ("kappaflow.state.api.RecordContext", ("timestamp", "topic", "partition", "offset", "headers")),
    ("kappaflow.state.timestamped.ValueAndTimestamp", ("value", "timestamp")),
    (
        "kappaflow.state.kv_layers.CachedStoreBinding",
        (
            "context",
            "cache",
            "namespace",
            "topic",
            "utf8_keys",
            "serialize_key",
            "deserialize",
            "inner_get",
            "serialize",
            "decodes_to_itself",
            "packs_longs",
            "caching_put",
        ),
    ),
    (
        "kappaflow.state.flushed_batch.FlushedBatch",
        (
            "writes",
            "olds",
            "decodeds",
            "topic",
            "utf8_keys",
            "deserialize_key",
            "deserialize_value",
            "set_record_context",
            "not_decoded",
        ),
    ),
    (
        "kappaflow.dsl.table_processors.TableFlushPlan",
        ("context", "node", "child", "child_name", "stamp", "send_old", "change"),
    ),
    ("kappaflow.dsl.change.Change", ("new_value", "old_value", "is_latest")),
)
"""Every Python class the native core reads or writes, with the attributes it touches: the table the core
exports as `TOUCHES` (runtime/native/src/touches.rs), compared at import as `PROTOCOL` is. A rename here
without the core's is caught when the core is loaded, not per record; every class listed is slotted (the
core reads fields through their member descriptors), and tests/runtime/test_native_core.py checks both
and that the Rust sources name no attribute this table lacks."""


@dataclass(frozen=True, slots=True)
class AggregatePlan:
    """What the native core compiles a `KStreamAggregateProcessor` stage from (read once, when fused;
    the processor's `fuse_native` builds it)."""

    node: str  # named as the failed node when the update raises
    context: ProcessorContext  # whose record context a write carries
    skip_null: Callable[[], None]  # a record with a null key or value: logged and counted as dropped
    counting: bool  # count(): 1, then aggregate + 1, without calling the initializer and adder
    initializer: Callable[[], Any] | None
    aggregator: Callable[[Any, Any, Any], Any] | None
    reducer: Callable[[Any, Any], Any] | None  # reduce(): the first value is the aggregate
    store: CachedStoreBinding
    value_and_timestamp: type[ValueAndTimestamp[Any]] = ValueAndTimestamp
    record_context: type[RecordContext] = RecordContext


@dataclass(frozen=True, slots=True)
class StatelessPlan:
    """What the native core compiles a built-in stateless processor's stage from (its `fuse_native`)."""

    # filter, map, map_values, flat_map, flat_map_values, select_key, peek, null_key_filter
    kind: str
    callback: Callable[..., Any]  # the predicate, mapper, selector or action; the null-key filter's drop
    flag: bool  # filter: negate; map_values, flat_map_values: with the key; peek: forwards
    node: str  # named as the failed node when the callback raises
    context: ProcessorContext
    downstream: Callable[[Any, Any, int, Headers], None]  # the next stage (a native one called directly)
    pair: Callable[[Any, str], tuple[Any, Any]]  # map, flat_map: a result that is not a pair raises here


@dataclass(frozen=True, slots=True)
class SinkPlan:
    """What the native core compiles a sink to a fixed topic without a partitioner from."""

    topic: str
    node: str
    send: Callable[[str, bytes | None, bytes | None, Headers, int, int | None], None]  # the collector's
    key_utf8: bool  # String serde: `str.encode()` inline
    value_utf8: bool
    key_serializer: Callable[[str, Any], bytes | None]
    value_serializer: Callable[[str, Any], bytes | None]
    context: ProcessorContext
    serialization_error: type[BaseException]  # re-raised naming the sink
    streams_error: type[BaseException]  # a negative timestamp


class NativeStage(Protocol):
    """A stage compiled by the native core (a `kappaflow.tasks.fusion.Stage`)."""

    def __call__(self, key: Any, value: Any, timestamp: int, headers: Headers, /) -> None: ...


class StatelessStage(NativeStage, Protocol):
    def __init__(self, plan: StatelessPlan, /) -> None: ...


class SinkStage(NativeStage, Protocol):
    def __init__(self, plan: SinkPlan, /) -> None: ...


class AggregateStage(Protocol):
    """A compiled `KStreamAggregateProcessor` stage (a `kappaflow.tasks.fusion.Stage`)."""

    def __init__(self, plan: AggregatePlan, /) -> None: ...

    def __call__(self, key: Any, value: Any, timestamp: int, headers: Headers, /) -> None: ...


class MessageRuns(Protocol):
    """The native twin of `kappaflow.runner.routing.raw_records_by_partition` (messages.rs)."""

    def __init__(
        self,
        message_type: type,
        version: str,
        headers_type: type[Headers],
        on_error: Callable[[Any], None],
        /,
    ) -> None: ...

    def __call__(
        self, messages: list[Any], /
    ) -> tuple[list[tuple[tuple[str, int], list[RawTuple]]], BaseException | None]:
        """The runs `raw_records_by_partition` yields and the error it then raises, or None."""
        ...


class ChangelogMessages(Protocol):
    """The native twin of the restore path's per-record loops (restore.rs): the changelog reader's
    `_by_partition` and the RocksDB store's `restore_messages`."""

    def __init__(self, message_type: type, version: str, /) -> None: ...

    def split(self, messages: list[Any], /) -> tuple[dict[tuple[str, int], list[Any]], list[Any]]:
        """The records by partition, in order, and the messages carrying an error (left to the caller)."""
        ...

    def write(self, batch: Any, messages: list[Any], timestamped: bool, /) -> None:
        """One partition's records into a rocksdict `WriteBatch`, as `restore_messages` puts them."""
        ...


class ChangelogRun(Protocol):
    """One changelog partition's records from one `RestoreQueues.consume`, copied out of librdkafka."""

    next_offset: int | None  # the offset after its last record (None: no record)

    def __len__(self) -> int: ...

    def limited(self, limit: int, /) -> ChangelogRun:
        """Without the records at or past `limit` nor those without a key (a source-topic changelog)."""
        ...

    def records(self) -> list[tuple[bytes, bytes | None, int]]:
        """(key or b"", value, timestamp) per record: what a store's `restore` callback takes."""
        ...


class RestoreQueues(Protocol):
    """The restore consumer's fetches taken from librdkafka's partition queues (restore_queue.rs)."""

    def __init__(self, consumer: Any, consumer_type: type, version: str, library: str, /) -> None: ...

    def open(self, topic: str, partition: int, /) -> bool:
        """Route the partition's fetches to the core; call before each assignment of it."""
        ...

    def consume(
        self, max_records: int, timeout: float, /
    ) -> tuple[
        list[tuple[tuple[str, int], ChangelogRun]],
        dict[tuple[str, int], int],
        list[tuple[str, int, int, str]],
    ]:
        """(runs by partition, end offsets reached, (topic, partition, code, reason) of fetch errors)."""
        ...

    def write(self, batch: Any, run: ChangelogRun, timestamped: bool, /) -> None:
        """A run into a rocksdict `WriteBatch`, as `ChangelogMessages.write` puts consumed messages."""
        ...

    def close(self) -> None: ...


class InputQueues(Protocol):
    """The group consumer's fetches taken from librdkafka's partition queues (input_queue.rs)."""

    def __init__(
        self, consumer: Any, consumer_type: type, version: str, library: str, headers_type: type, /
    ) -> None: ...

    def open(self, topic: str, partition: int, /) -> bool:
        """Route the partition's fetches to the core; call before each assignment of it."""
        ...

    def consume(
        self, max_records: int, timeout: float, /
    ) -> tuple[list[tuple[tuple[str, int], list[RawTuple]]], list[tuple[int, str]]]:
        """(runs of one partition's record tuples in fetch order, (code, reason) of each error)."""
        ...

    def close(self) -> None: ...


class ProduceSend(Protocol):
    """The native twin of `KafkaRecordCollector.send` (produce.rs)."""

    sent: int  # records produced natively

    def __init__(
        self, clients: Any, fallback: Callable[..., None], on_delivery: Any, producer_type: type,
        version: str, library: str, attribute: str = "producer",
    ) -> None: ...  # fmt: skip

    def __call__(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Headers | None, timestamp: int,
        partition: int | None, /,
    ) -> None: ...  # fmt: skip

    def changelog(
        self, topic: str, key: bytes, value: bytes | None, timestamp: int, partition: int, /
    ) -> None:
        """The native twin of `KafkaRecordCollector.send_changelog` (`attribute="changelog_producer"`)."""
        ...

    def inspect(self, producer: Any, /) -> tuple[str, Any, bool]:
        """(rd_kafka_name, default delivery callback, delivery.report.only.error) from the struct."""
        ...


class ShuffleSend(Protocol):
    """A Spark reprocessing task's collector `send` (shuffle.rs): repartitioned records into byte
    buffers per target slot, anything else to `fallback` (kappaflow.spark.executor.SparkCollector)."""

    def __init__(
        self, targets: list[tuple[str, int, int]], task_partition: int, fallback: Callable[..., None], /
    ) -> None: ...

    def __call__(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Headers | None, timestamp: int,
        partition: int | None, /,
    ) -> None: ...  # fmt: skip

    def take(self) -> list[tuple[str, int, int, bytes]]:
        """(topic, slot, records, payload) per slot sent to, in first-sent order; the buffers emptied."""
        ...


class ShuffledCursor(Protocol):
    """A reprocessing task's shuffled input, merged by timestamp and read a batch at a time
    (shuffled_cursor.rs; `kappaflow.spark.batches.shuffled_batches`' native path)."""

    def __init__(self, runs: list[list[bytes]], headers_type: type, /) -> None: ...

    def take(self, limit: int, /) -> list[RawTuple]:
        """The next `limit` records at most, numbered on from the last; empty once every run is read."""
        ...


# (topic, partition, key, value, offset, librdkafka error code, (timestamp type, timestamp)) of a failed
# delivery
NativeFailure = tuple[str, int, bytes | None, bytes | None, int, int, tuple[int, int]]


class DeliveryFailures(Protocol):
    """The failed deliveries of records the native send produced with no delivery state, taken by the
    core's librdkafka plugin (delivery_failures.rs)."""

    path: str  # the core's shared library, for a producer's `plugin.library.paths`

    def __init__(self, producer_type: type, version: str, library: str, /) -> None: ...

    def take(self, producer: Any, /) -> list[NativeFailure] | None:
        """The failures reported since the last call (None: `producer` was created without the plugin)."""
        ...


class NativeCore(Protocol):
    PROTOCOL: int
    TOUCHES: list[tuple[str, list[str]]]
    MESSAGE_LAYOUTS: list[str]  # the confluent-kafka versions whose Message struct the core reads
    MessageRuns: type[MessageRuns]
    ChangelogMessages: type[ChangelogMessages]
    PRODUCER_LAYOUTS: list[str]  # the confluent-kafka versions whose Producer struct the core uses
    ProduceSend: type[ProduceSend]
    DeliveryFailures: type[DeliveryFailures]
    RestoreQueues: type[RestoreQueues]
    InputQueues: type[InputQueues]
    AggregateStage: type[AggregateStage]
    ThreadCache: Callable[[int, object, int], RecordCache]  # kappaflow.state.cache.ThreadCache's twin
    StatelessStage: type[StatelessStage]
    SinkStage: type[SinkStage]
    ShuffleSend: type[ShuffleSend]
    ShuffledCursor: type[ShuffledCursor]

    def shuffled_records(self, runs: list[list[Any]], headers_type: type, /) -> list[RawTuple]:
        """`kappaflow.spark.batches.shuffled_input`'s reference path, from payloads (shuffle.rs)."""
        ...

    def drain(
        self, queue: deque[RawTuple], limit: int, plan: DrainPlan, partition_time: int, stream_time: int, /
    ) -> Drained:
        """`kappaflow.tasks.drain.drain_python`."""
        ...

    def log_writes(
        self, send: ChangelogSend, topic: str, partition: int, writes: FlushedWrites, timestamped: bool, /
    ) -> None:
        """`kappaflow.state.kv_wrapped.log_writes` (table_flush.rs)."""
        ...


@functools.cache
def installed_core() -> NativeCore | None:
    """The native core, or None when it is not installed (or built for another protocol)."""
    try:
        module = importlib.import_module("kappaflow_native")
    except ImportError:
        return None
    mismatch = incompatibility(module)
    if mismatch is not None:
        log.warning("kappaflow_native %s: using the Python loop", mismatch)
        return None
    return cast(NativeCore, module)


def incompatibility(module: object) -> str | None:
    """Why this kappaflow cannot drive `module` (another protocol, or other classes and attributes
    touched than `TOUCHES` says), or None when it can."""
    found = getattr(module, "PROTOCOL", None)
    if found != PROTOCOL:
        return f"speaks protocol {found}, this kappaflow {PROTOCOL}"
    if core_touches(module) != TOUCHES:
        return "touches other Python classes or attributes than kappaflow.tasks.native.TOUCHES"
    return None


def core_touches(module: object) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The core's `TOUCHES` table in the shape of this module's (the core exports lists)."""
    exported: Any = getattr(module, "TOUCHES", ())
    return tuple((str(cls), tuple(str(a) for a in attributes)) for cls, attributes in exported)


def new_thread_cache(max_bytes: int, enabled: bool = True) -> RecordCache:
    """A stream thread's record cache: the native core's (`kappaflow_native.ThreadCache`) when it is
    installed and `enabled` (the process's `kappaflow.native.enabled`), else the Python `ThreadCache`.
    The native one keeps the hot path's entries and counters out of Python objects, and the native
    aggregation requires it; both behave the same (tests/runtime/test_record_cache.py)."""
    found = core(enabled)
    if found is None:
        return ThreadCache(max_bytes)
    return found.ThreadCache(max_bytes, NOT_DECODED, _ENTRY_OVERHEAD)


def core(enabled: bool) -> NativeCore | None:
    """The core to run the drain loop with: the installed one, unless `kappaflow.native.enabled` is false."""
    return installed_core() if enabled else None


def describe(enabled: bool) -> str:
    """Which drain loop a process runs, for its start-up log."""
    if not enabled:
        return "Python (kappaflow.native.enabled=false)"
    return (
        "native (kappaflow_native)"
        if installed_core() is not None
        else "Python (kappaflow_native not installed)"
    )
