"""The Processor API: building topologies by hand, stores, punctuations, metadata and headers."""

from __future__ import annotations

from typing import Any

import pytest

from kappaflow import PunctuationType, Record, Stores, StreamsBuilder, Topology, serdes
from kappaflow.api.errors import InvalidStateStoreError, ProcessingError, TopologyError
from kappaflow.testing import TopologyTestDriver

S, L = serdes.String(), serdes.Long()


class CountingProcessor:
    """Counts per key in a store and emits all counts on each stream-time punctuation."""

    def __init__(self, interval: int = 1000, punctuation: PunctuationType = PunctuationType.STREAM_TIME):
        self.interval = interval
        self.punctuation = punctuation
        self.punctuated_at: list[int] = []

    def init(self, context: Any) -> None:
        self.context = context
        self.store = context.get_state_store("counts")
        self.cancellable = context.schedule(self.interval, self.punctuation, self.emit)

    def emit(self, timestamp: int) -> None:
        self.punctuated_at.append(timestamp)
        for key, count in self.store.all():
            self.context.forward(Record(key, count, timestamp))

    def process(self, record: Record[Any, Any]) -> None:
        self.store.put(record.key, (self.store.get(record.key) or 0) + 1)
        if record.value == "cancel":
            self.cancellable.cancel()

    def close(self) -> None:
        pass


def counting_topology(processor: CountingProcessor) -> Topology:
    topology = Topology()
    topology.add_source("src", "in", key_serde=S, value_serde=S)
    topology.add_processor("count", lambda: processor, "src")
    topology.add_state_store(
        Stores.key_value_store_builder(Stores.in_memory_key_value_store("counts"), S, L), "count"
    )
    topology.add_sink("sink", "out", "count", key_serde=S, value_serde=L)
    return topology


def test_stream_time_punctuation_fires_with_records_aligned_to_interval() -> None:
    processor = CountingProcessor()
    with TopologyTestDriver(counting_topology(processor)) as driver:
        topic = driver.create_input_topic("in", S, S)
        topic.pipe_input("a", "x", timestamp=500)  # first punctuation: stream time 500
        topic.pipe_input("b", "x", timestamp=900)  # next due at 1000
        topic.pipe_input("a", "x", timestamp=2500)  # fires once at 2500, next due at 3000
        topic.pipe_input("a", "x", timestamp=100)  # out of order: stream time stays 2500
        assert processor.punctuated_at == [500, 2500]
        out = driver.create_output_topic("out", S, L).read_records_to_list()
        assert [(r.key, r.value, r.timestamp) for r in out] == [("a", 1, 500), ("a", 2, 2500), ("b", 1, 2500)]


def test_wall_clock_punctuation_follows_the_driver_clock_and_cancel_stops_it() -> None:
    processor = CountingProcessor(interval=60_000, punctuation=PunctuationType.WALL_CLOCK_TIME)
    with TopologyTestDriver(counting_topology(processor), initial_wall_clock_time=0) as driver:
        driver.create_input_topic("in", S, S).pipe_input("a", "x", timestamp=1)
        driver.advance_wall_clock_time(59_999)
        assert processor.punctuated_at == []
        driver.advance_wall_clock_time(1)
        assert processor.punctuated_at == [60_000]
        driver.create_input_topic("in", S, S).pipe_input("a", "cancel", timestamp=2)
        driver.advance_wall_clock_time(120_000)
        assert processor.punctuated_at == [60_000]


def test_record_metadata_and_headers_reach_the_processor() -> None:
    seen: list[Any] = []

    class Inspect:
        def init(self, context: Any) -> None:
            self.context = context

        def process(self, record: Record[Any, Any]) -> None:
            seen.append((self.context.record_metadata(), record.headers.last_header("trace")))
            self.context.forward(record.with_headers(record.headers.copy().add("seen", b"1")))

        def close(self) -> None:
            pass

    topology = Topology().add_source("src", "in", key_serde=S, value_serde=S)
    topology.add_processor("inspect", Inspect, "src").add_sink(
        "sink", "out", "inspect", key_serde=S, value_serde=S
    )
    with TopologyTestDriver(topology) as driver:
        topic = driver.create_input_topic("in", S, S)
        topic.pipe_input("k", "v", headers=[("trace", b"abc")])
        topic.pipe_input("k", "w")
        metadata, trace = seen[0]
        assert (metadata.topic, metadata.partition, metadata.offset, trace) == ("in", 0, 0, b"abc")
        assert seen[1][0].offset == 1
        out = driver.create_output_topic("out", S, S).read_record()
        assert out.headers == [("trace", b"abc"), ("seen", b"1")]


def test_forward_to_a_named_child_only() -> None:
    class Router:
        def init(self, context: Any) -> None:
            self.context = context

        def process(self, record: Record[Any, Any]) -> None:
            self.context.forward(record, "left" if record.value < "m" else "right")

        def close(self) -> None:
            pass

    topology = (
        Topology().add_source("src", "in", key_serde=S, value_serde=S).add_processor("route", Router, "src")
    )
    topology.add_sink("left", "out-left", "route", key_serde=S, value_serde=S)
    topology.add_sink("right", "out-right", "route", key_serde=S, value_serde=S)
    with TopologyTestDriver(topology) as driver:
        driver.create_input_topic("in", S, S).pipe_value_list(["apple", "zebra"])
        assert driver.create_output_topic("out-left", S, S).read_values_to_list() == ["apple"]
        assert driver.create_output_topic("out-right", S, S).read_values_to_list() == ["zebra"]


def test_topology_validation_errors_name_the_culprit() -> None:
    topology = Topology().add_source("src", "in")
    with pytest.raises(TopologyError, match="'p' names unknown parent 'nope'"):
        topology.add_processor("p", lambda: None, "nope")  # type: ignore[arg-type, return-value]
    with pytest.raises(TopologyError, match="a node named 'src' already exists"):
        topology.add_source("src", "other")
    with pytest.raises(TopologyError, match="topic 'in' is already read by source 'src'"):
        topology.add_source("src2", "in")
    with pytest.raises(TopologyError, match="uses unknown store 'missing'"):
        topology.add_processor("p", lambda: None, "src").connect_processor_and_state_stores("p", "missing")  # type: ignore[arg-type, return-value]


def test_store_not_connected_is_a_clear_error() -> None:
    class Greedy:
        def init(self, context: Any) -> None:
            self.store = context.get_state_store("counts")

        def process(self, record: Record[Any, Any]) -> None:
            pass

        def close(self) -> None:
            pass

    topology = (
        Topology().add_source("src", "in", key_serde=S, value_serde=S).add_processor("p", Greedy, "src")
    )
    with pytest.raises(InvalidStateStoreError, match="processor 'p' has no access to store 'counts'"):
        TopologyTestDriver(topology)


def test_dsl_process_with_a_store_and_a_plain_function() -> None:
    builder = StreamsBuilder()
    builder.add_state_store(Stores.key_value_store_builder(Stores.persistent_key_value_store("seen"), S, L))

    class Dedup:
        def init(self, context: Any) -> None:
            self.context = context
            self.store = context.get_state_store("seen")

        def process(self, record: Record[Any, Any]) -> None:
            if self.store.put_if_absent(record.key, record.timestamp) is None:
                self.context.forward(record)

        def close(self) -> None:
            pass

    def shout(record: Record[Any, Any], context: Any) -> None:
        context.forward(record.with_value(record.value.upper()))

    builder.stream("in", key_serde=S, value_serde=S).process(Dedup, "seen").process(shout).to(
        "out", key_serde=S, value_serde=S
    )
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("in", S, S).pipe_key_value_list([("a", "x"), ("a", "y"), ("b", "z")])
        assert driver.create_output_topic("out", S, S).read_key_values_to_list() == [("a", "X"), ("b", "Z")]


def test_processing_error_names_node_and_record_position() -> None:
    topology = Topology().add_source("src", "in", key_serde=S, value_serde=S)

    class Boom:
        def init(self, context: Any) -> None:
            pass

        def process(self, record: Record[Any, Any]) -> None:
            raise ValueError("bad value")

        def close(self) -> None:
            pass

    topology.add_processor("boom", Boom, "src")
    with TopologyTestDriver(topology) as driver:
        with pytest.raises(ProcessingError, match=r"in-0@0 in node 'boom': ValueError: bad value"):
            driver.create_input_topic("in", S, S).pipe_input("k", "v")


def test_a_task_whose_wall_clock_punctuation_ran_asks_for_a_commit_with_no_input(tmp_path) -> None:
    """Under exactly_once_v2 a store's writes are applied at commit: a task that only punctuates must
    commit too, or its writes pile up uncommitted (and a transaction it opened would carry them alone)."""
    from kappaflow.api.config import StreamsConfig
    from kappaflow.api.metrics import Metrics
    from kappaflow.api.processor import TaskId
    from kappaflow.state.cache import ThreadCache
    from kappaflow.tasks.task import StreamTask
    from tests.runtime.null_collector import NullCollector

    processor = CountingProcessor(interval=1000, punctuation=PunctuationType.WALL_CLOCK_TIME)
    config = StreamsConfig({"application.id": "app", "state.dir": str(tmp_path)})
    task = StreamTask(
        TaskId(0, 0),
        counting_topology(processor),
        config,
        NullCollector(),
        ThreadCache(0),
        Metrics(),
        tmp_path,
        lambda: 0,
    )
    task.initialize()
    task.complete_restoration()
    assert not task.commit_needed()
    assert task.maybe_punctuate_system_time(5_000) and task.commit_needed()
    task.prepare_commit()
    task.post_commit()
    assert not task.commit_needed()
    task.close()
