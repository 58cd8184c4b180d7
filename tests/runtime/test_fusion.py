"""Operator fusion (kappaflow.tasks.fusion: stages compiled by the native core) against the generic
node-by-node path, the reference.

Every topology here runs twice, `kappaflow.fusion.enabled` on and off, through real StreamTasks with
RocksDB stores and a small record cache (so evictions flush mid-batch): the records sent (sinks and
changelogs, with headers, timestamps and partitions), the metrics, the cache's counters and what an
interactive query reads through the cache must be identical, and the fused run must really be fused.
Without the native core nothing is fused (there is no Python-compiled stage): those tests skip, and CI,
which builds the core, fails instead.
"""

from __future__ import annotations

import re
import tempfile
from collections import deque
from pathlib import Path
from typing import Any

import pytest
from examples.wordcount import build_topology as wordcount_topology

from kappaflow import Materialized, StreamsBuilder, Topology, serdes
from kappaflow.api.config import StreamsConfig
from kappaflow.api.errors import ProcessingError, SerializationError
from kappaflow.api.metrics import Metrics
from kappaflow.api.processor import TaskId
from kappaflow.api.record import Headers, Record
from kappaflow.tasks.drain import RawRecord
from kappaflow.tasks.native import NativeCore, installed_core, new_thread_cache
from kappaflow.tasks.task import StreamTask
from kappaflow.testing import TopologyTestDriver
from tests.native_support import require_native_core

S, L = serdes.String(), serdes.Long()


@pytest.fixture
def core() -> NativeCore:
    return require_native_core()


class Collector:
    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []

    def send(self, topic: str, key: Any, value: Any, headers: Any, timestamp: int, partition: Any) -> None:
        self.sent.append((topic, key, value, list(headers or ()), timestamp, partition))

    def send_changelog(self, topic: str, key: Any, value: Any, timestamp: int, partition: int) -> None:
        self.sent.append(("changelog", topic, key, value, timestamp, partition))

    def partition_count(self, topic: str) -> int:
        return 3


def run(
    topology: Topology,
    inputs: list[tuple[str, RawRecord]],
    fused: bool,
    store: str,
    guarantee: str = "at_least_once",
    native: bool = True,
) -> tuple[dict[str, Any], int, list[str]]:
    """All sub-topologies, batch by batch (internal topics fed on), commits every 7 records; with
    `native`, on the native core when it is installed. Returns what was observed, how many nodes were
    fused and the native core's stages among them."""
    state_dir = tempfile.mkdtemp(prefix="kappaflow-fusion-")
    config = StreamsConfig(
        {
            "application.id": "fusion",
            "state.dir": state_dir,
            "kappaflow.fusion.enabled": fused,
            "kappaflow.native.enabled": native,
            "processing.exception.handler": "log_and_continue",
            "processing.guarantee": guarantee,  # exactly_once_v2: transactional stores under the cache
        }
    )
    collector, metrics, cache = Collector(), Metrics(), new_thread_cache(4000, native)
    tasks = [
        StreamTask(TaskId(sub.id, 0), topology, config, collector, cache, metrics, Path(state_dir), lambda: 0)
        for sub in topology.sub_topologies()
    ]
    by_topic = {topic: task for task in tasks for topic in task.sources}
    for task in tasks:
        task.initialize()
        task.complete_restoration()
    offsets: dict[str, int] = {}
    pending = deque(inputs)
    queried: list[Any] = []
    while pending:
        topic, raw = pending.popleft()
        task = by_topic[topic]
        raw = raw._replace(offset=offsets.get(topic, -1) + 1)
        offsets[topic] = raw.offset
        before = len(collector.sent)
        task.add_records(topic, 0, [raw])
        task.process_buffered()
        if raw.offset % 7 == 6:
            if store in task.context.stores:  # an interactive query reads through the cache
                queried.append(sorted(task.context.stores[store].all()))
            task.prepare_commit()
            task.post_commit()
        for sent in collector.sent[before:]:
            if sent[0] in by_topic:
                pending.append((sent[0], RawRecord(0, sent[4], sent[1], sent[2], Headers(sent[3]))))
    for task in tasks:
        task.prepare_commit()
        task.post_commit()
        task.close()
    fused_nodes = sum(node.fused is not None for task in tasks for node in task.nodes)
    native_stages = sorted(
        type(node.fused).__name__
        for task in tasks
        for node in task.nodes
        if node.fused is not None and type(node.fused).__module__ == "kappaflow_native"
    )
    observed = {
        "sent": collector.sent,
        "queried": queried,
        "counters": metrics.counters(),
        "gauges": metrics.gauges(),
        "cache": (cache.hits, cache.misses, cache.evictions, cache.size_bytes),
    }
    return observed, fused_nodes, native_stages


def lines(values: list[str | None]) -> list[tuple[str, RawRecord]]:
    return [
        (
            "wordcount-input",
            RawRecord(0, 1000 + 10 * i - 25 * (i % 3), None, None if v is None else v.encode(), Headers()),
        )
        for i, v in enumerate(values)
    ]


WORDS = [f"w{i % 23} w{i % 5} w{(i * 7) % 31}" for i in range(120)]


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_wordcount_is_identical_fused_and_not(core: NativeCore, guarantee: str) -> None:
    values = [*WORDS[:50], "", None, *WORDS[50:]]
    fused, fused_nodes, native_stages = run(wordcount_topology(), lines(values), True, "counts", guarantee)
    unfused, unfused_nodes, _ = run(wordcount_topology(), lines(values), True, "counts", guarantee, False)
    generic, generic_nodes, _ = run(wordcount_topology(), lines(values), False, "counts", guarantee)
    assert generic_nodes == 0 and unfused_nodes == 0  # no core, no compiled stage
    # flat_map_values, select_key, the repartition filter and sink; the count, to_stream (reached from
    # the cache's flush through its handle, a map_values of the change's new value) and the output sink
    assert fused_nodes == 7
    assert native_stages == ["AggregateStage", *["SinkStage"] * 2, *["StatelessStage"] * 4]
    assert fused == generic
    assert unfused == generic
    assert fused["cache"][2] > 0, "the cache must have evicted: the flush order is part of the comparison"
    assert any(t == "wordcount-output" for t, *_ in fused["sent"])


def rich_topology(seen: list[Any]) -> Topology:
    """Every fused processor, a branch and a user processor (generic) in between, null keys dropped."""
    builder = StreamsBuilder()
    stream = builder.stream("in", key_serde=S, value_serde=S)
    kept = (
        stream.peek(lambda k, v: seen.append((k, v)))
        .filter(lambda k, v: not v.startswith("x"))
        .filter_not(lambda k, v: v == "drop")
        .map(lambda k, v: (v[:1] or None, v))
        .flat_map(lambda k, v: [(k, v), (k, v.upper())])
        .map_values(lambda k, v: f"{k}:{v}")
        .select_key(lambda k, v: k)
    )

    def tag(record: Record[Any, Any], context: Any) -> None:
        context.forward(record.with_headers(Headers(record.headers).add("tag", record.value[-1:].encode())))

    branches = kept.split("b-").branch(lambda k, v: v.endswith("A"), name="upper").default_branch(name="rest")
    branches["b-rest"].process(tag).to(
        "tagged", key_serde=S, value_serde=S, partitioner=lambda t, k, v, n: len(v) % n
    )
    branches["b-upper"].map_values(len).to("lengths", key_serde=S, value_serde=L)
    kept.group_by_key(key_serde=S, value_serde=S).reduce(
        lambda a, b: max(a, b), Materialized.as_("maxes")
    ).to_stream().to("maxes-out", key_serde=S, value_serde=S)
    kept.flat_map_values(lambda v: v.split(":")).group_by(
        lambda k, v: v, key_serde=S, value_serde=S
    ).aggregate(lambda: 0, lambda k, v, agg: agg + len(v), Materialized.as_("sums").with_value_serde(L))
    return builder.build()


def rich_inputs() -> list[tuple[str, RawRecord]]:
    values = ["apple", "xenon", "drop", "", "avocado", "banana", "b", "cherry", "apricot", "blue"] * 6
    return [
        (
            "in",
            RawRecord(
                0,
                500 + 3 * i - 40 * (i % 4),
                None if i % 5 == 0 else f"k{i}".encode(),
                v.encode(),
                Headers([("h", str(i).encode())]),
            ),
        )
        for i, v in enumerate(values)
    ]


def test_every_fused_processor_is_identical_with_generic_nodes_between(core: NativeCore) -> None:
    seen_fused: list[Any] = []
    seen_generic: list[Any] = []
    fused, fused_nodes, _ = run(rich_topology(seen_fused), rich_inputs(), True, "sums")
    generic, generic_nodes, _ = run(rich_topology(seen_generic), rich_inputs(), False, "sums")
    assert generic_nodes == 0 and fused_nodes > 10
    assert seen_fused == seen_generic and len(seen_fused) == 60
    assert fused == generic
    topics = {sent[0] for sent in fused["sent"]}
    assert {"tagged", "lengths", "maxes-out", "changelog"} <= topics
    dropped = {labels: n for labels, n in fused["counters"]["dropped-records-total"].items()}
    assert any(("reason", "null-key") in labels for labels in dropped), dropped


def failing_topology() -> Topology:
    def boom(value: str) -> str:
        if value == "bad":
            raise ValueError("bad value")
        return value

    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=S)
        .flat_map_values(lambda v: [v], name="split")
        .map_values(boom, name="boom")
        .group_by(lambda k, v: v, key_serde=S, value_serde=S)
        .aggregate(lambda: 0, lambda k, v, agg: agg + int(v), Materialized.as_("agg").with_value_serde(L))
    )
    builder.stream("in2", key_serde=S, value_serde=S).map_values(int, name="to-int").to("out", value_serde=S)

    def words(value: str) -> Any:  # a generator failing after its first value, while its child ran
        yield value
        raise ValueError("no second word")

    builder.stream("in3", key_serde=S, value_serde=S).flat_map_values(words, name="gen").map_values(
        str.upper, name="after"
    ).to("out3", key_serde=S, value_serde=S)
    return builder.build()


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize(
    ("topic", "value", "node"),
    [
        ("in", "bad", "boom"),  # a user mapper inside a chain
        ("in", "not-a-number", r"KSTREAM-AGGREGATE-\d+"),  # the aggregator, after a repartition
        ("in2", "12", r"KSTREAM-SINK-\d+"),  # a sink's serializer (an int for a String serde)
        ("in3", "one", "gen"),  # a flat_map_values iterable failing between its children's calls
    ],
)
def test_errors_name_the_node_they_came_from(fused: bool, topic: str, value: str, node: str) -> None:
    with TopologyTestDriver(failing_topology(), {"kappaflow.fusion.enabled": fused}) as driver:
        fused_nodes = [n.name for task in driver._tasks.values() for n in task.nodes if n.fused is not None]
        assert bool(fused_nodes) == (fused and installed_core() is not None)
        with pytest.raises(ProcessingError, match=f"in node '{node}': ") as error:
            driver.create_input_topic(topic, S, S).pipe_input("k", value)
        assert re.fullmatch(node, error.value.node)
        if topic == "in2":
            assert isinstance(error.value.__cause__, SerializationError)


def test_only_builtin_processors_compiling_their_own_process_are_fused() -> None:
    from kappaflow.dsl.stream_processors import FilterProcessor
    from kappaflow.tasks.fusion import fusable

    class Audited(FilterProcessor):  # a user subclass changing process(): its parent's stage would be wrong
        def process(self, record: Record[Any, Any]) -> None:
            super().process(record)

    class OwnFuse:  # a user processor that happens to have a method named fuse_native
        def process(self, record: Record[Any, Any]) -> None: ...

        def fuse_native(self, downstream: Any, node: str, core: Any) -> Any:
            raise AssertionError("a user processor's fuse_native() must never be called")

    assert fusable(FilterProcessor(bool, False))
    assert not fusable(Audited(bool, False))
    assert not fusable(OwnFuse())


@pytest.mark.parametrize("fused", [True, False])
def test_a_generic_node_between_stages_names_the_node_that_failed(fused: bool) -> None:
    """A fused map_values hands over to a user subclass of a built-in processor (generic) whose child
    fails: the child is named, as forward() names it."""
    from kappaflow.dsl.stream_processors import FilterProcessor

    class Audited(FilterProcessor):
        def process(self, record: Record[Any, Any]) -> None:
            super().process(record)

    def raiser(record: Record[Any, Any], context: Any) -> None:
        if record.value == "BAD":
            raise RuntimeError("refused")
        context.forward(record)

    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=S)
        .map_values(str.upper, name="upper")
        .process(lambda: Audited(lambda k, v: True, False), name="audited")
        .process(raiser, name="raiser")
        .to("out", key_serde=S, value_serde=S)
    )
    with TopologyTestDriver(builder.build(), {"kappaflow.fusion.enabled": fused}) as driver:
        fused_nodes = {n.name for task in driver._tasks.values() for n in task.nodes if n.fused is not None}
        compiled = fused and installed_core() is not None
        # named nodes use up name numbers, as in Java: the sink is the fifth operation
        assert fused_nodes == ({"upper", "KSTREAM-SINK-0000000004"} if compiled else set())
        source = driver.create_input_topic("in", S, S)
        source.pipe_input("k", "ok")
        assert driver.create_output_topic("out", S, S).read_key_values_to_list() == [("k", "OK")]
        with pytest.raises(ProcessingError, match="in node 'raiser': RuntimeError: refused") as error:
            source.pipe_input("k", "bad")
        assert error.value.node == "raiser"
