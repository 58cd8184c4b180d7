"""The native core (`kappaflow_native`) against the Python references: `drain_python` and the generic
processors (there is no other Python implementation of a stage). The same records in, the same outputs, dead
letters, metrics, cache state, progress and errors out. `make test` also runs the in-process tiers with
`--python-drain` (no native core), so every other test passes with both; these compare them directly, on the
edges."""

from __future__ import annotations

import gc
import random
import re
import tempfile
import weakref
from pathlib import Path
from typing import Any, NamedTuple

import confluent_kafka
import pytest
from confluent_kafka import KafkaError

from kappaflow import HandlerResponse, Materialized, StreamsBuilder, serdes
from kappaflow.api.config import StreamsConfig
from kappaflow.api.errors import ProcessingError
from kappaflow.api.metrics import Metrics
from kappaflow.api.processor import BaseProcessor, ProcessorContext, PunctuationType, TaskId
from kappaflow.api.record import Headers, Record
from kappaflow.state.cache import ThreadCache
from kappaflow.tasks.drain import RawRecord
from kappaflow.tasks.native import NativeCore
from kappaflow.tasks.task import StreamTask
from kappaflow.testing import TopologyTestDriver
from kappaflow.topology.topology import Topology
from tests.native_support import require_native_core
from tests.runtime.test_fusion import run

S, L = serdes.String(), serdes.Long()


@pytest.fixture
def core() -> NativeCore:
    return require_native_core()


class EveryTenthTicks(BaseProcessor):
    """Forwards the value doubled; a stream-time punctuation every 10 ms forwards a tick."""

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        context.schedule(10, PunctuationType.STREAM_TIME, self.tick)

    def tick(self, timestamp: int) -> None:
        self.context.forward(Record("tick", timestamp, timestamp))

    def process(self, record: Record[str, int]) -> None:
        if record.value == 13:
            raise ValueError("thirteen")
        self.context.forward(record.with_value(record.value * 2))


def odd_stamps(record: Any, partition_time: int) -> int:
    return -1 if record.value == 7 else int(record.timestamp)


def edge_topology() -> Topology:
    """Each way a record can go: inline UTF-8 keys, a Long value serde that fails on bad bytes, a
    processing error (100 // 0), a custom extractor that drops records, a Processor API node with a
    stream-time punctuation, a cached count and plain sinks."""
    builder = StreamsBuilder()
    numbers = builder.stream("numbers", key_serde=S, value_serde=L)
    numbers.map_values(lambda v: 100 // v).to("quotients", value_serde=L)
    numbers.group_by_key().count().to_stream().to("counts", value_serde=L)
    stamped = builder.stream("stamped", key_serde=S, value_serde=L, timestamp_extractor=odd_stamps)
    stamped.process(EveryTenthTicks).to("doubled", key_serde=S, value_serde=L)
    return builder.build()


def edge_inputs(seed: int) -> list[tuple[str, bytes | None, bytes, int, list[tuple[str, bytes]]]]:
    rng = random.Random(seed)
    inputs = []
    for i in range(300):
        topic = rng.choice(["numbers", "stamped"])
        key = rng.choice([b"a", b"b", "é".encode(), b"\xff\xfe", None])  # \xff\xfe is not UTF-8
        value = rng.choice([L.serialize(topic, rng.randrange(-3, 20)), b"\x01\x02"])  # 2 bytes: not a Long
        # negative timestamps only where the custom extractor drops them (the default one fails the task)
        timestamp = rng.choice([i * 3, i * 3 - 50, -1]) if topic == "stamped" else i * 3 - rng.choice([0, 40])
        timestamp = max(timestamp, 0) if topic == "numbers" else timestamp
        headers = [("n", str(i).encode())] if rng.random() < 0.3 else []
        inputs.append((topic, key, value, timestamp, headers))
    return inputs


def run_edges(native: bool, seed: int, fused: bool) -> dict[str, Any]:
    config = {
        "default.deserialization.exception.handler": "log_and_continue",
        "processing.exception.handler": "log_and_continue",
        "errors.dead.letter.queue.topic.name": "dlq",
        "kappaflow.native.enabled": native,
        "kappaflow.fusion.enabled": fused,
        "statestore.cache.max.bytes": 2000,  # evicts now and then: cache flushes forward mid-batch
    }
    with TopologyTestDriver(edge_topology(), config) as driver:
        raw = {
            t: driver.create_input_topic(t, serdes.Bytes(), serdes.Bytes()) for t in ("numbers", "stamped")
        }
        for topic, key, value, timestamp, headers in edge_inputs(seed):
            raw[topic].pipe_input(key, value, timestamp=timestamp, headers=headers)
        out = {
            name: [
                (r.key, r.value, r.timestamp, r.headers.to_list())
                for r in driver.create_output_topic(
                    name, serdes.Bytes(), serdes.Bytes()
                ).read_records_to_list()
            ]
            for name in ("quotients", "counts", "doubled", "dlq")
        }
        metrics = driver.metrics()
        out["dropped"] = metrics.counter("dropped-records-total")
        out["processed"] = metrics.counter("records-processed-total")
        return out


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "generic"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_native_drain_matches_python_record_for_record(core: NativeCore, seed: int, fused: bool) -> None:
    python, native = run_edges(False, seed, fused), run_edges(True, seed, fused)
    assert python["dlq"] and python["doubled"] and python["dropped"]  # the edges were reached
    assert any(key == b"tick" for key, *_ in python["doubled"])  # the punctuation fired
    assert native == python


def failing_task(native: bool, state_dir: str, handler: Any) -> StreamTask:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=L).map_values(lambda v: 100 // v).to("out", value_serde=L)
    topology = builder.build()
    config = StreamsConfig(
        {
            "application.id": "loops",
            "state.dir": state_dir,
            "processing.exception.handler": handler,
            "kappaflow.native.enabled": native,
        }
    )

    class Collector:
        def __init__(self) -> None:
            self.sent: list[tuple[Any, ...]] = []

        def send(self, *args: Any) -> None:
            self.sent.append(args[:3])

        def partition_count(self, topic: str) -> int:
            return 1

    task = StreamTask(
        TaskId(0, 0), topology, config, Collector(), ThreadCache(0), Metrics(), Path(state_dir), lambda: 0
    )  # type: ignore[arg-type]
    task.initialize()
    task.complete_restoration()
    return task


def records(values: list[int]) -> list[RawRecord]:
    return [RawRecord(10 + i, 1000 + i, b"k", L.serialize("in", v), Headers()) for i, v in enumerate(values)]


def stop_state(native: bool, handler: Any) -> tuple[str, Any, Any, int, list[Any], int]:
    with tempfile.TemporaryDirectory() as state_dir:
        task = failing_task(native, state_dir, handler)
        task.add_records("in", 0, records([5, 4, 0, 2]))
        with pytest.raises(ProcessingError) as raised:
            task.process_buffered()
        remaining = task.buffered()
        sent = list(task.context.collector.sent)  # type: ignore[attr-defined]
        task.close(clean=False)
        return (
            str(raised.value),
            task.consumed_offsets,
            task.partition_time,
            remaining,
            sent,
            raised.value.offset,
        )


def test_a_failing_record_stops_both_loops_in_the_same_place(core: NativeCore) -> None:
    """log_and_fail: the records before are consumed and sent, the failing one stays queued."""
    python, native = stop_state(False, "log_and_fail"), stop_state(True, "log_and_fail")
    assert python[3] == 2 and python[5] == 12 and python[1] == {("in", 0): 11}
    assert native == python


def test_a_handler_that_raises_is_what_the_task_raises(core: NativeCore) -> None:
    def give_up(error: BaseException, record: Any) -> HandlerResponse:
        raise ProcessingError(
            f"handler gave up at {record.offset}", node="x", topic="in", partition=0, offset=1
        )

    python, native = stop_state(False, give_up), stop_state(True, give_up)
    assert python[0] == "handler gave up at 12" and python[3] == 2
    assert native == python


def aggregation_topology() -> Topology:
    """The aggregations the native stage compiles, on their edges: Long keys (serialized by the serde, not
    inline), a Long sum that returns None (a tombstone) and one out of a Long's range (the serde's error,
    to the handler), a JSON list (not kept decoded: through the caching layer's put), a String reduce."""
    builder = StreamsBuilder()
    stream = builder.stream("in", key_serde=S, value_serde=S)

    def add(key: int, value: str, total: int) -> int | None:
        if value == "reset":
            return None
        return 2**64 if value == "huge" else total + len(value)

    by_length = stream.group_by(lambda k, v: len(v), key_serde=L, value_serde=S)
    by_length.aggregate(lambda: 0, add, Materialized.as_("sums").with_value_serde(L))
    by_length.count(Materialized.as_("counts"))
    stream.group_by_key().aggregate(
        list, lambda k, v, seen: [*seen, v][-3:], Materialized.as_("lists").with_value_serde(serdes.Json())
    ).to_stream().to("lists-out", value_serde=serdes.Json())
    stream.group_by_key().reduce(lambda a, b: min(a, b), Materialized.as_("mins"))
    return builder.build()


def aggregation_inputs(seed: int) -> list[tuple[str, RawRecord]]:
    rng = random.Random(seed)
    words = ["a", "bb", "ccc", "dddd", "reset", "fives", "huge", "e" * 30, "ff"]  # "reset": length 5
    return [
        (
            "in",
            RawRecord(
                0,
                1000 + 5 * i - rng.choice([0, 0, 60]),  # out of order now and then: max timestamp kept
                None if rng.random() < 0.05 else f"k{rng.randrange(9)}".encode(),
                rng.choice(words).encode(),
                Headers(),
            ),
        )
        for i in range(400)
    ]


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_native_aggregation_stage_matches_python_and_generic(
    core: NativeCore, seed: int, guarantee: str
) -> None:
    """The native stage, the Python stage and the unfused processors: the same records sent (outputs and
    changelogs, in order: evictions flush mid-batch), interactive queries through the cache, metrics and
    the cache's hits, misses, evictions and size."""
    inputs = aggregation_inputs(seed)
    native, _, stages = run(aggregation_topology(), inputs, True, "sums", guarantee)
    python, _, python_stages = run(aggregation_topology(), inputs, True, "sums", guarantee, native=False)
    generic, _, _ = run(aggregation_topology(), inputs, False, "sums", guarantee)
    assert stages.count("AggregateStage") == 4 and python_stages == []
    assert native == python == generic
    assert native["cache"][2] > 0, "the cache must have evicted: the flush order is part of the comparison"
    assert native["cache"][1] > 30, "misses read the store below the cache"
    dropped = native["counters"]["dropped-records-total"]
    assert any("ProcessingError" in str(labels) for labels in dropped), "the out-of-range sum is handled"
    tombstones = [sent for sent in native["sent"] if sent[0] == "changelog" and sent[3] is None]
    assert tombstones, "a None aggregate writes a tombstone"


def test_native_stage_names_itself_as_the_failed_node(core: NativeCore) -> None:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).group_by_key().aggregate(
        lambda: 0, lambda k, v, agg: agg + int(v), Materialized.as_("agg").with_value_serde(L)
    )
    with TopologyTestDriver(builder.build(), {}) as driver:
        stages = [n.fused for task in driver._tasks.values() for n in task.nodes if n.fused is not None]
        assert [type(stage).__name__ for stage in stages] == ["AggregateStage"]
        with pytest.raises(ProcessingError, match=r"in node 'KSTREAM-AGGREGATE-\d+': ") as error:
            driver.create_input_topic("in", S, S).pipe_input("k", "not-a-number")
        assert isinstance(error.value.__cause__, ValueError)


class Pair(NamedTuple):
    key: Any
    value: Any


class Backdated(BaseProcessor):
    """Forwards "neg" with a negative timestamp: the fused sink below it must refuse it, naming itself."""

    def process(self, record: Record[Any, Any]) -> None:
        self.context.forward(record.with_timestamp(-1) if record.value == "neg" else record)


def stateless_topology() -> Topology:
    """The native stateless stages and sinks on their edges: a mapper returning a tuple subclass or no
    pair at all, a predicate raising, a flat-mapper returning None or a generator failing half-way, a
    key the sink serializes with its serde, a value its serde refuses, a negative timestamp."""
    builder = StreamsBuilder()
    stream = builder.stream("in", key_serde=S, value_serde=S)

    def pairs(key: str, value: str) -> Any:
        return Pair(key, value) if value == "nt" else value if value == "bad" else (key, value)

    def chars(value: str) -> Any:
        if value == "none":
            return None
        if value == "gen":
            return (c if c != "n" else 1 // 0 for c in value)
        return list(value)[:2]

    (
        stream.map(pairs, name="pairs")
        .filter(lambda k, v: 1 // len(v) >= 0, name="nonempty")
        .flat_map_values(chars, name="chars")
        .to("chars", key_serde=S, value_serde=S)
    )
    stream.process(Backdated).to("backdated", key_serde=S, value_serde=S)
    stream.select_key(lambda k, v: len(v), name="length").to("by-length", key_serde=L, value_serde=S)
    stream.map_values(lambda v: 5 if v == "int" else v, name="ints").to("ints", key_serde=S, value_serde=S)
    stream.peek(lambda k, v: None, name="look").filter_not(lambda k, v: v == "x").to("kept", value_serde=S)
    return builder.build()


def run_stateless(native: bool) -> dict[str, Any]:
    config = {"processing.exception.handler": "log_and_continue", "kappaflow.native.enabled": native}
    with TopologyTestDriver(stateless_topology(), config) as driver:
        stages = sorted(
            type(n.fused).__name__ for t in driver._tasks.values() for n in t.nodes if n.fused is not None
        )
        source = driver.create_input_topic("in", S, S)
        for i, value in enumerate(["ab", "nt", "bad", "", "none", "gen", "neg", "int", "x", "xyz", "é"]):
            source.pipe_input(None if i == 4 else f"k{i}", value, timestamp=10 * i)
        out: dict[str, Any] = {
            topic: [
                (r.key, r.value, r.timestamp)
                for r in driver.create_output_topic(
                    topic, serdes.Bytes(), serdes.Bytes()
                ).read_records_to_list()
            ]
            for topic in ("chars", "backdated", "by-length", "ints", "kept")
        }
        out["dropped"] = driver.metrics().counter("dropped-records-total")
        out["native"] = [stage for stage in stages if stage in ("StatelessStage", "SinkStage")]
        return out


def test_native_stateless_stages_and_sinks_match_python(core: NativeCore, caplog: Any) -> None:
    """Outputs, dropped records and the handler's log line per failure (the node and the error's message)
    are the same with the native stages as with the Python ones."""

    def failures() -> list[str]:
        return [r.getMessage() for r in caplog.records if "skipping record" in r.getMessage()]

    native = run_stateless(True)
    native_failures = failures()
    caplog.clear()
    python = run_stateless(False)
    assert len(native.pop("native")) == 12 and python.pop("native") == []
    assert native == python
    assert native_failures == failures()
    expected = [
        "in node 'pairs': StreamsError: map: the mapper must return a (key, value) tuple, got 'bad'",
        "in node 'nonempty': ZeroDivisionError",
        "in node 'chars': ZeroDivisionError",
        "record has negative timestamp -1",
        "SerializationError: sink 'KSTREAM-SINK-",
    ]
    for fragment in expected:
        assert any(fragment in line for line in native_failures), (fragment, native_failures)


def closed_driver_contexts(native: bool) -> list[weakref.ref[Any]]:
    """Weak references to the task contexts of a driver run and closed."""
    from examples.wordcount import build_topology as wordcount

    with TopologyTestDriver(wordcount(), {"kappaflow.native.enabled": native}) as driver:
        driver.create_input_topic("wordcount-input", S, S).pipe_input("k", "a b a")
        return [weakref.ref(task.context) for task in driver._tasks.values()]


def test_a_closed_task_with_native_stages_is_freed(core: NativeCore) -> None:
    """Native stages hold their task's context and a node holds its stage: a cycle the garbage
    collector can free only if the stages report what they hold (their __traverse__)."""
    refs = closed_driver_contexts(native=True)
    gc.collect()
    assert len(refs) == 2 and [ref() for ref in refs] == [None, None]


# --- the one table of what the core touches (kappaflow.tasks.native.TOUCHES, native/src/touches.rs) ---

NATIVE_SOURCES = Path(__file__).resolve().parents[2] / "runtime" / "native" / "src"
# names the Rust sources intern that are not attributes of a kappaflow class: builtins' methods and
# attributes (deque, OrderedDict, bytes, type, object) and the operation names `pair` is told
NOT_KAPPAFLOW_ATTRIBUTES = {"popleft", "move_to_end", "decode", "__slots__", "__dict__", "map", "flat_map"}
# confluent-kafka Message's accessors (messages.rs and restore.rs call them for a subclass or
# librdkafka-held headers) and rocksdict WriteBatch's methods (restore.rs)
NOT_KAPPAFLOW_ATTRIBUTES |= {"error", "headers", "offset", "timestamp", "key", "value", "topic", "partition"}
NOT_KAPPAFLOW_ATTRIBUTES |= {"put", "delete"}
# the collector's producer clients (the ProducerClients protocol, not a slotted record): produce.rs reads
# the current producer per record, as the collector does, and serves reports every 1024 records
NOT_KAPPAFLOW_ATTRIBUTES |= {"producer", "serve_reports"}
# a bound method's owner and name: table_flush.rs calls a ProduceSend's bound `changelog` in Rust
NOT_KAPPAFLOW_ATTRIBUTES |= {"__self__", "__name__"}


def touched_classes() -> list[tuple[type, tuple[str, ...]]]:
    import importlib

    from kappaflow.tasks.native import TOUCHES

    found = []
    for qualified, attributes in TOUCHES:
        module, _, name = qualified.rpartition(".")
        found.append((getattr(importlib.import_module(module), name), attributes))
    return found


def test_the_core_exports_the_table_kappaflow_declares(core: NativeCore) -> None:
    from kappaflow.tasks.native import TOUCHES, core_touches

    assert core_touches(core) == TOUCHES
    assert len(TOUCHES) >= 8


def test_a_core_touching_other_attributes_is_not_used() -> None:
    from kappaflow.tasks.native import PROTOCOL, TOUCHES, incompatibility

    class Module:
        pass

    module: Any = Module()
    module.PROTOCOL = PROTOCOL
    module.TOUCHES = [(cls, list(attributes)) for cls, attributes in TOUCHES]
    assert incompatibility(module) is None
    module.TOUCHES[0] = (TOUCHES[0][0], list(TOUCHES[0][1][:-1]))  # the core lost an attribute
    assert incompatibility(module) is not None
    module.TOUCHES = [(cls, list(attributes)) for cls, attributes in TOUCHES]
    module.PROTOCOL = PROTOCOL - 1
    assert incompatibility(module) is not None


def test_every_class_the_core_touches_is_slotted_and_has_those_attributes() -> None:
    for cls, attributes in touched_classes():
        assert cls.__dictoffset__ == 0, f"{cls.__qualname__} instances have a __dict__: not slotted"
        for attribute in attributes:
            assert hasattr(cls, attribute), f"{cls.__qualname__} declares no {attribute}"


def test_the_rust_sources_touch_no_attribute_outside_the_table() -> None:
    import re

    declared = {attribute for _, attributes in touched_classes() for attribute in attributes}
    named: set[str] = set()
    for source in NATIVE_SOURCES.glob("*.rs"):
        text = source.read_text()
        named |= set(re.findall(r'intern!\(py, "(\w+)"\)', text))
        named |= set(re.findall(r'Slot::of\([^,]+, "(\w+)"\)', text))
        named |= set(re.findall(r'context_slot\("(\w+)"\)', text))
    assert {"failed_node", "namespace", "popleft"} <= named  # the patterns still find the names
    assert named - NOT_KAPPAFLOW_ATTRIBUTES - declared == set()


# --- consumed messages read from confluent-kafka's struct (MessageRuns) vs through their accessors ---


class SubMessage(confluent_kafka.Message):
    """A subclass may override an accessor: it is read through the accessors, never the struct."""

    def value(self) -> bytes:
        return b"overridden"


def message(
    topic: str | None = "in", partition: int = 0, offset: int = 0, key: bytes | None = b"k", **fields: Any
) -> confluent_kafka.Message:
    return confluent_kafka.Message(topic=topic, partition=partition, offset=offset, key=key, **fields)


def edge_messages() -> list[confluent_kafka.Message]:
    """Runs of partitions and topics (one topic coming back), None keys, values and topics, headers
    (empty, set after construction), each timestamp type, offsets up to 2**63 - 1 and none (-1), no
    partition, values set to None, a subclass, and a message carrying a non-fatal error mid-run."""
    late_headers, cleared = message(offset=9, value=b"v"), message(offset=10, value=b"v")
    late_headers.set_headers([("h", b"late")])
    cleared.set_value(None)
    return [
        message(value=b"a", timestamp=(confluent_kafka.TIMESTAMP_CREATE_TIME, 1_700_000_000_000)),
        message(offset=1, key=None, value=None, headers=[("h", b"1"), ("h", None), ("g", b"2")]),
        message(offset=2, value=b"c", headers=[], timestamp=(confluent_kafka.TIMESTAMP_LOG_APPEND_TIME, 5)),
        message(error=KafkaError(KafkaError._TRANSPORT)),
        message(offset=3, value=b"d", timestamp=(confluent_kafka.TIMESTAMP_NOT_AVAILABLE, -1)),
        message(partition=1, offset=2**63 - 1, value=b"e"),
        message(topic="other", partition=1, offset=2**40, value=b"f"),
        message(topic="in", partition=1, offset=7),
        message(topic=None, partition=-1, offset=-1, value=b"g"),
        SubMessage(topic="in", partition=0, offset=8, key=b"k", value=b"h"),
        late_headers,
        cleared,
    ]


def both_ways(core: NativeCore, messages: list[Any]) -> tuple[Any, Any]:
    """(Python runs or error, native runs or error), each run's records as plain lists."""
    from kappaflow.runner.routing import raw_records_by_partition, router

    def collect(route: Any) -> Any:
        runs: list[Any] = []
        try:
            for tp, records in route(messages):
                runs.append((tp, [(*r[:4], type(r[4]), list(r[4])) for r in records]))
        except Exception as exc:  # the error is part of what both must agree on
            return runs, type(exc), str(exc)
        return runs

    native = router(core)
    assert native is not raw_records_by_partition
    return collect(raw_records_by_partition), collect(native)


def test_native_message_read_matches_the_accessors(
    core: NativeCore, caplog: pytest.LogCaptureFixture
) -> None:
    messages = edge_messages()
    python, native = both_ways(core, messages)
    assert native == python
    assert [(tp, len(records)) for tp, records in python] == [
        (("in", 0), 4),
        (("in", 1), 1),
        (("other", 1), 1),
        (("in", 1), 1),
        ((None, None), 1),
        (("in", 0), 3),
    ]
    records = [record for _, run in python for record in run]
    assert records[0][:4] == (0, 1_700_000_000_000, b"k", b"a") and records[0][4] is Headers
    assert records[1][2:4] == (None, None) and records[1][5] == [("h", b"1"), ("h", None), ("g", b"2")]
    assert records[3][1] == -1 and records[4][0] == 2**63 - 1 and records[7][0] is None
    assert [r[3] for r in records[-3:]] == [b"overridden", b"v", None] and records[-2][5] == [("h", b"late")]
    assert sum("consumer error" in r.message for r in caplog.records) == 2  # once each way


def test_native_message_read_stops_where_python_does_on_a_fatal_error(core: NativeCore) -> None:
    fatal = message(error=KafkaError(KafkaError._FATAL, fatal=True))
    messages = [message(value=b"a"), message(partition=1, offset=1), fatal, message(partition=1, offset=2)]
    python, native = both_ways(core, messages)
    assert native == python
    runs, error, _ = python
    assert [tp for tp, _ in runs] == [("in", 0)] and error.__name__ == "ConsumerFailedError"


def test_a_confluent_kafka_whose_layout_the_core_does_not_know_is_read_through_the_accessors(
    core: NativeCore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from kappaflow.runner import routing

    assert confluent_kafka.version() in core.MESSAGE_LAYOUTS  # the pinned version is known
    with pytest.raises(ValueError, match="knows the Message layout of"):
        core.MessageRuns(confluent_kafka.Message, "9.9.9", Headers, routing.consumer_error)
    with pytest.raises(ValueError, match="is not the confluent-kafka"):  # the version alone is not trusted
        core.MessageRuns(SubMessage, confluent_kafka.version(), Headers, routing.consumer_error)
    monkeypatch.setattr(confluent_kafka, "version", lambda: "9.9.9")
    assert routing.router(core) is routing.raw_records_by_partition
    assert routing.router(core, print).func is routing.raw_records_by_partition  # type: ignore[attr-defined]
    assert "read through their accessors: confluent-kafka 9.9.9" in caplog.text


def test_headers_of_a_type_with_its_own_init_are_made_by_calling_it(core: NativeCore) -> None:
    """The empty headers of most records are allocated without a call only while the headers type's
    `__new__` and `__init__` are list's; one with an `__init__` of its own is called for each record."""
    from kappaflow.runner.routing import consumer_error

    made: list[object] = []

    class Traced(Headers):
        __slots__ = ()

        def __init__(self, pairs: Any = ()) -> None:
            super().__init__(pairs)
            made.append(pairs)

    runs = core.MessageRuns(confluent_kafka.Message, confluent_kafka.version(), Traced, consumer_error)
    found, error = runs([message(value=b"a"), message(offset=1, headers=[("h", b"1")])])
    assert error is None and [type(r[4]) for r in found[0][1]] == [Traced, Traced]
    assert made == [(), [("h", b"1")]] and found[0][1][1][4] == [("h", b"1")]


class CountOver(serdes.Long):
    """A Long serializer that refuses counts above `limit`: a failure in the sink of a cache flush."""

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def serialize(self, topic: str, value: Any) -> bytes | None:
        if value is not None and value > self.limit:
            raise ValueError(f"count {value} over {self.limit}")
        return super().serialize(topic, value)


def run_flushed_counts(native: bool, limit: int, handler: str) -> tuple[list[Any], str]:
    """A cached count flushed into `to_stream().to()` (one fused stage under the native core), the cache
    a few entries big so that updates are evicted between commits: the output, and the error that ended
    the run ("" if none)."""
    builder = StreamsBuilder()
    counts = builder.stream("in", key_serde=S, value_serde=S).group_by_key().count(Materialized.as_("counts"))
    counts.to_stream().to("out", key_serde=S, value_serde=CountOver(limit))
    config = {
        "kappaflow.native.enabled": native,
        "statestore.cache.max.bytes": 3000,
        "processing.exception.handler": handler,
    }
    error = ""
    with TopologyTestDriver(builder.build(), config) as driver:
        source = driver.create_input_topic("in", S, S)
        try:
            source.pipe_key_value_list([(f"k{i % 40}", "v") for i in range(200)])
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        out = driver.create_output_topic("out", S, L).read_key_values_to_list()
    return out, error


@pytest.mark.parametrize("handler", ["log_and_fail", "log_and_continue"])
@pytest.mark.parametrize("limit", [10, 4])
def test_a_flushed_table_reaches_its_fused_child_as_through_forward(
    core: NativeCore,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    limit: int,
    handler: str,
) -> None:
    """With the default handler a batched flush calls the table's one fused child (`to_stream()` and the
    sink) without `forward()`: the same records, and a failure in it (the sink's serializer refusing a
    count) ends the run with the same error as the generic path's `forward()`, naming the sink (the commit
    that flushed the cache fails). A handler that may CONTINUE keeps `forward()` (it runs around each
    child) and skips the same records, naming the sink."""
    from kappaflow.dsl import table_processors

    direct = []  # the child each batched flush went to without `forward()`: natively, or in Python
    plan = table_processors.TableFlushPlan
    to_stage = table_processors.TupleForwarder._flush_batch_to_stage

    def native_plan(*fields: Any) -> Any:
        direct.append(("native", fields[3]))
        return plan(*fields)

    def python_loop(self: Any, entries: Any, child: Any) -> None:
        direct.append(("python", child.name))
        to_stage(self, entries, child)

    monkeypatch.setattr(table_processors, "TableFlushPlan", native_plan)
    monkeypatch.setattr(table_processors.TupleForwarder, "_flush_batch_to_stage", python_loop)
    native = run_flushed_counts(True, limit, handler)
    native_logged = [record.getMessage() for record in caplog.records if "in node" in record.getMessage()]
    caplog.clear()
    # the fused child is the native to_stream stage, which takes the whole batch
    assert set(direct) == ({("native", "KTABLE-TOSTREAM-0000000002")} if handler == "log_and_fail" else set())
    direct.clear()
    assert native == run_flushed_counts(False, limit, handler)
    assert native_logged == [
        record.getMessage() for record in caplog.records if "in node" in record.getMessage()
    ]
    out, error = native
    assert len(out) > 40  # evictions between commits, not one update per key
    if limit == 10:
        assert error == ""
        assert sorted(set(out))[-1] == ("k9", 5)
        return
    assert all(count <= 4 for _key, count in out)
    if handler == "log_and_fail":  # the commit's flush fails the application, naming sink and record
        named = re.match(
            r"ProcessingError: error in node 'KSTREAM-SINK-0000000003' while a commit flushed the record "
            r"cache \(the cached update from record in-0@(\d+)\): ValueError: count 5 over 4 "
            r"\[processing.exception.handler",
            error,
        )
        assert named, error
        assert int(named.group(1)) // 40 == 4  # a key's fifth record (keys k0..k39 in turn)
    else:  # the refused counts are skipped, each under its own record, naming the sink
        assert error == "" and {count for _key, count in out} == {1, 2, 3, 4}
        assert native_logged and all("in node 'KSTREAM-SINK-0000000003'" in line for line in native_logged)
