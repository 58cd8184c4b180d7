"""Stateless KStream operations through the TopologyTestDriver, with Kafka Streams' semantics."""

from __future__ import annotations

from typing import Any

import pytest

from kappaflow import Record, StreamsBuilder, serdes
from kappaflow.api.errors import ProcessingError, TopologyError
from kappaflow.testing import EmptyTopicError, TopologyTestDriver

S = serdes.String()


def run(build: Any, inputs: list[tuple[Any, Any]], outputs: list[str], **kw: Any) -> dict[str, list[Any]]:
    builder = StreamsBuilder()
    build(builder)
    with TopologyTestDriver(builder.build(), kw.get("config")) as driver:
        topic = driver.create_input_topic("in", S, S)
        for key, value in inputs:
            topic.pipe_input(key, value, timestamp=100)
        return {name: driver.create_output_topic(name, S, S).read_records_to_list() for name in outputs}


def pairs(records: list[Any]) -> list[tuple[Any, Any]]:
    return [r.key_value() for r in records]


def test_filter_and_filter_not_keep_and_drop() -> None:
    def build(b: StreamsBuilder) -> None:
        s = b.stream("in", key_serde=S, value_serde=S)
        s.filter(lambda k, v: v.startswith("a")).to("yes")
        s.filter_not(lambda k, v: v.startswith("a")).to("no")

    out = run(build, [("1", "apple"), ("2", "banana"), ("3", "avocado")], ["yes", "no"])
    assert pairs(out["yes"]) == [("1", "apple"), ("3", "avocado")]
    assert pairs(out["no"]) == [("2", "banana")]


def test_map_map_values_select_key_keep_timestamp_and_headers() -> None:
    def build(b: StreamsBuilder) -> None:
        s = b.stream("in", key_serde=S, value_serde=S)
        s.map(lambda k, v: (v, k)).to("swapped", key_serde=S, value_serde=S)
        s.map_values(str.upper).to("upper", value_serde=S)
        s.map_values(lambda k, v: f"{k}={v}").to("with-key", value_serde=S)
        s.select_key(lambda k, v: v[0]).to("first", key_serde=S)

    builder = StreamsBuilder()
    build(builder)
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("in", S, S).pipe_input("k", "value", timestamp=42, headers=[("h", b"1")])
        swapped = driver.create_output_topic("swapped", S, S).read_record()
        assert swapped.key_value() == ("value", "k")
        assert swapped.timestamp == 42
        assert swapped.headers == [("h", b"1")]
        assert driver.create_output_topic("upper", S, S).read_value() == "VALUE"
        assert driver.create_output_topic("with-key", S, S).read_value() == "k=value"
        assert driver.create_output_topic("first", S, S).read_key_value() == ("v", "value")


def test_map_must_return_a_pair() -> None:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).map(lambda k, v: v).to("out", key_serde=S, value_serde=S)
    with TopologyTestDriver(builder.build()) as driver:
        with pytest.raises(ProcessingError, match=r"in-0@0 in node 'KSTREAM-MAP-0000000001'.*\(key, value\)"):
            driver.create_input_topic("in", S, S).pipe_input("k", "v")


def test_flat_map_and_flat_map_values() -> None:
    def build(b: StreamsBuilder) -> None:
        s = b.stream("in", key_serde=S, value_serde=S)
        s.flat_map(lambda k, v: [(w, k) for w in v.split()]).to("fm", key_serde=S, value_serde=S)
        s.flat_map_values(lambda v: v.split()).to("fmv", value_serde=S)

    out = run(build, [("k", "a b"), ("j", "")], ["fm", "fmv"])
    assert pairs(out["fm"]) == [("a", "k"), ("b", "k")]
    assert pairs(out["fmv"]) == [("k", "a"), ("k", "b")]


def test_peek_and_foreach_see_every_record() -> None:
    seen: list[tuple[str, str]] = []
    done: list[tuple[str, str]] = []

    def build(b: StreamsBuilder) -> None:
        s = b.stream("in", key_serde=S, value_serde=S)
        s.peek(lambda k, v: seen.append((k, v))).to("out")
        s.foreach(lambda k, v: done.append((k, v)))

    out = run(build, [("a", "1"), ("b", "2")], ["out"])
    assert seen == done == [("a", "1"), ("b", "2")]
    assert pairs(out["out"]) == [("a", "1"), ("b", "2")]


def test_split_branches_first_match_wins_and_default() -> None:
    builder = StreamsBuilder()
    branches = (
        builder.stream("in", key_serde=S, value_serde=S)
        .split(prefix="p-")
        .branch(lambda k, v: v.startswith("a"), name="a")
        .branch(lambda k, v: v.startswith("ab"), name="ab")
        .default_branch(name="z")
    )
    assert set(branches) == {"p-a", "p-ab", "p-z"}
    for name, stream in branches.items():
        stream.to(name)
    with TopologyTestDriver(builder.build()) as driver:
        topic = driver.create_input_topic("in", S, S)
        topic.pipe_key_value_list([("1", "abc"), ("2", "xyz"), ("3", "a")])
        assert driver.create_output_topic("p-a", S, S).read_values_to_list() == ["abc", "a"]
        assert driver.create_output_topic("p-ab", S, S).is_empty()
        assert driver.create_output_topic("p-z", S, S).read_values_to_list() == ["xyz"]


def test_split_without_default_drops_unmatched() -> None:
    builder = StreamsBuilder()
    branches = (
        builder.stream("in", key_serde=S, value_serde=S)
        .split()
        .branch(lambda k, v: v == "x")
        .no_default_branch()
    )
    (stream,) = branches.values()
    stream.to("out")
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("in", S, S).pipe_value_list(["x", "y", "x"])
        assert driver.create_output_topic("out", S, S).get_queue_size() == 2


def test_merge_interleaves_in_processing_order() -> None:
    builder = StreamsBuilder()
    a = builder.stream("a", key_serde=S, value_serde=S)
    b = builder.stream("b", key_serde=S, value_serde=S)
    a.merge(b).to("out")
    with TopologyTestDriver(builder.build()) as driver:
        ta, tb = driver.create_input_topic("a", S, S), driver.create_input_topic("b", S, S)
        ta.pipe_input("k", "a1")
        tb.pipe_input("k", "b1")
        ta.pipe_input("k", "a2")
        assert driver.create_output_topic("out", S, S).read_values_to_list() == ["a1", "b1", "a2"]


def test_to_with_topic_extractor_routes_dynamically() -> None:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).to(lambda k, v, topic: f"out-{k}")
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("in", S, S).pipe_key_value_list([("x", "1"), ("y", "2")])
        assert driver.create_output_topic("out-x", S, S).read_value() == "1"
        assert driver.create_output_topic("out-y", S, S).read_value() == "2"


def test_explicit_repartition_routes_through_internal_topic() -> None:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).select_key(lambda k, v: v).repartition(
        name="byval", key_serde=S
    ).to("out")
    topology = builder.build()
    assert "byval-repartition" in topology.internal_topics
    assert len(topology.sub_topologies()) == 2
    with TopologyTestDriver(topology, {"application.id": "app"}) as driver:
        driver.create_input_topic("in", S, S).pipe_input("k", "v")
        assert driver.create_output_topic("out", S, S).read_key_value() == ("v", "v")
        assert "app-byval-repartition" in driver.producer_topics()


def test_process_values_cannot_change_the_key() -> None:
    class Rekey:
        def init(self, context: Any) -> None:
            self.context = context

        def process(self, record: Record[Any, Any]) -> None:
            self.context.forward(record.with_key("other").with_value(record.value * 2))

        def close(self) -> None:
            pass

    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).process_values(Rekey).to("out", value_serde=S)
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("in", S, S).pipe_input("k", "ab")
        assert driver.create_output_topic("out", S, S).read_key_value() == ("k", "abab")


def test_output_topic_reads_and_empty_errors() -> None:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).to("out")
    with TopologyTestDriver(builder.build()) as driver:
        out = driver.create_output_topic("out", S, S)
        with pytest.raises(EmptyTopicError, match="empty topic: out"):
            out.read_record()
        driver.create_input_topic("in", S, S).pipe_key_value_list([("a", "1"), ("a", "2"), ("b", None)])
        assert out.get_queue_size() == 3
        assert out.read_key_values_to_map() == {"a": "2", "b": None}
        assert out.is_empty()


def test_unknown_input_topic_is_a_clear_error() -> None:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).to("out")
    with (
        TopologyTestDriver(builder.build()) as driver,
        pytest.raises(TopologyError, match="unknown topic 'nope'"),
    ):
        driver.create_input_topic("nope", S, S).pipe_input("a", "b")


def test_auto_advancing_input_timestamps() -> None:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).to("out")
    with TopologyTestDriver(builder.build()) as driver:
        topic = driver.create_input_topic("in", S, S, start_timestamp=1000, auto_advance=10)
        topic.pipe_value_list(["a", "b", "c"])
        assert [r.timestamp for r in driver.create_output_topic("out", S, S).read_records_to_list()] == [
            1000,
            1010,
            1020,
        ]
