"""Stream-table, stream-GlobalKTable and table-table joins against Kafka Streams' documented tables."""

from __future__ import annotations

import pytest

from kappaflow import Materialized, StreamsBuilder
from kappaflow.testing import TopologyTestDriver

CFG = {"default.key.serde": "String", "default.value.serde": "String"}
SEQUENCE = [
    (1, "left", None), (2, "right", None), (3, "left", "A"), (4, "right", "a"), (5, "left", "B"),
    (6, "right", "b"), (7, "left", None), (8, "right", None), (9, "left", "C"), (10, "right", "c"),
    (11, "left", None), (12, "right", None), (13, "left", None), (14, "right", "d"), (15, "left", "D"),
]  # fmt: skip


def joiner(lv, rv):
    return f"{lv}+{rv}"


def run(topology, sequence=SEQUENCE, config=CFG):
    with TopologyTestDriver(topology, config) as driver:
        topics = {"left": driver.create_input_topic("left"), "right": driver.create_input_topic("right")}
        for ts, side, value in sequence:
            topics[side].pipe_input("k", value, ts)
        return [(r.value, r.timestamp) for r in driver.create_output_topic("out").read_records_to_list()]


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("inner", [("B+a", 5), ("D+d", 15)]),
        ("left", [("A+None", 3), ("B+a", 5), ("C+None", 9), ("D+d", 15)]),
    ],
)
def test_stream_table_join_documented(kind: str, expected) -> None:
    builder = StreamsBuilder()
    stream, table = builder.stream("left"), builder.table("right")
    (stream.join if kind == "inner" else stream.left_join)(table, joiner).to("out")
    topology = builder.build()
    assert {"left", "right"} in topology.copartition_groups
    assert run(topology) == expected  # the stream record's timestamp, table updates never emit


def test_stream_table_join_drops_null_keys_with_metric() -> None:
    builder = StreamsBuilder()
    builder.stream("left").join(builder.table("right"), joiner).to("out")
    with TopologyTestDriver(builder.build(), CFG) as driver:
        driver.create_input_topic("left").pipe_input(None, "x", 1)
        assert driver.create_output_topic("out").is_empty()
        assert driver.metrics().counter(
            "dropped-records-total", reason="null-key-or-value", task="0_0", node="KSTREAM-JOIN-0000000004"
        ) == 1  # fmt: skip


@pytest.mark.parametrize("kind", ["inner", "left"])
def test_stream_global_table_join_with_key_mapper(kind: str) -> None:
    builder = StreamsBuilder()
    users = builder.global_table("users")
    stream = builder.stream("clicks")
    method = stream.join if kind == "inner" else stream.left_join
    method(users, lambda key, value: value.split(":")[0], lambda click, user: f"{click}@{user}").to("out")
    with TopologyTestDriver(builder.build(), CFG) as driver:
        driver.create_input_topic("users").pipe_input("u1", "alice", 1)
        clicks = driver.create_input_topic("clicks")
        clicks.pipe_input("c1", "u1:home", 10)
        clicks.pipe_input("c2", "u2:cart", 11)
        result = [
            (r.key, r.value, r.timestamp) for r in driver.create_output_topic("out").read_records_to_list()
        ]
        expected = [("c1", "u1:home@alice", 10)]
        if kind == "left":
            expected.append(("c2", "u2:cart@None", 11))
        assert result == expected


TABLE_EXPECTED = {
    "inner": [("A+a", 4), ("B+a", 5), ("B+b", 6), (None, 7), ("C+c", 10), (None, 11), ("D+d", 15)],
    "left": [
        ("A+None", 3), ("A+a", 4), ("B+a", 5), ("B+b", 6), (None, 7), ("C+None", 9), ("C+c", 10),
        (None, 11), ("D+d", 15),
    ],
    "outer": [
        ("A+None", 3), ("A+a", 4), ("B+a", 5), ("B+b", 6), ("None+b", 7), (None, 8), ("C+None", 9),
        ("C+c", 10), ("None+c", 11), (None, 12), ("None+d", 14), ("D+d", 15),
    ],
}  # fmt: skip


@pytest.mark.parametrize("kind", ["inner", "left", "outer"])
@pytest.mark.parametrize("materialized", [False, True])
def test_table_table_join_documented(kind: str, materialized: bool) -> None:
    builder = StreamsBuilder()
    left, right = builder.table("left"), builder.table("right")
    method = {"inner": left.join, "left": left.left_join, "outer": left.outer_join}[kind]
    mat = Materialized.as_("joined") if materialized else None
    joined = method(right, joiner, mat)
    joined.to_stream().to("out")
    assert run(builder.build()) == TABLE_EXPECTED[kind]


def test_table_table_join_timestamp_is_max() -> None:
    builder = StreamsBuilder()
    builder.table("left").join(builder.table("right"), joiner).to_stream().to("out")
    assert run(builder.build(), [(50, "right", "r"), (10, "left", "L")]) == [("L+r", 50)]


def test_joined_table_value_getter_feeds_a_stream_join() -> None:
    builder = StreamsBuilder()
    joined = builder.table("left").join(builder.table("right"), joiner)
    builder.stream("events").join(joined, lambda e, j: f"{e}/{j}").to("out")
    with TopologyTestDriver(builder.build(), CFG) as driver:
        driver.create_input_topic("left").pipe_input("k", "L", 1)
        driver.create_input_topic("right").pipe_input("k", "R", 2)
        driver.create_input_topic("events").pipe_input("k", "e", 3)
        assert driver.create_output_topic("out").read_key_values_to_list() == [("k", "e/L+R")]


def test_stream_table_left_join_emits_null_key_records() -> None:
    builder = StreamsBuilder()
    builder.stream("left").left_join(builder.table("right"), joiner).to("out")
    with TopologyTestDriver(builder.build(), CFG) as driver:
        driver.create_input_topic("left").pipe_input(None, "x", 1)
        assert driver.create_output_topic("out").read_key_values_to_list() == [(None, "x+None")]
