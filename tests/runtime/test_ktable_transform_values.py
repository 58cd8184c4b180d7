"""`KTable.transform_values` (Java's KTableTransformValues): a ValueTransformerWithKey with init, transform
and close, optional stores, nulls transformed too, old values from the store or recomputed."""

from __future__ import annotations

from typing import Any

import pytest

from kappaflow import StreamsBuilder
from kappaflow.api.errors import StreamsError
from kappaflow.api.processor import ProcessorContext
from kappaflow.api.record import Record
from kappaflow.serdes import Long, String
from kappaflow.state.builders import Stores
from kappaflow.testing import TopologyTestDriver

CFG = {"default.key.serde": "String", "default.value.serde": "String"}
S, L = String(), Long()


class Counting:
    """Appends how many updates this key has seen (kept in the 'seen' store) to the value."""

    closed: list[str] = []

    def init(self, context: ProcessorContext) -> None:
        self.seen = context.get_state_store("seen")

    def transform(self, key: str, value: str | None) -> str | None:
        count = (self.seen.get(key) or 0) + 1
        self.seen.put(key, count)
        return None if value is None else f"{value}#{count}"

    def close(self) -> None:
        Counting.closed.append("closed")


def read(driver: TopologyTestDriver) -> list[tuple[Any, Any, int]]:
    return [(r.key, r.value, r.timestamp) for r in driver.create_output_topic("out").read_records_to_list()]


def test_stateful_transformer_sees_every_update_and_tombstone() -> None:
    builder = StreamsBuilder()
    builder.add_state_store(Stores.key_value_store_builder(Stores.in_memory_key_value_store("seen"), S, L))
    table = builder.table("in").transform_values(Counting, "seen", materialized="result")
    table.to_stream().to("out")
    Counting.closed.clear()
    with TopologyTestDriver(builder.build(), CFG) as driver:
        source = driver.create_input_topic("in")
        source.pipe_input("a", "x", 5)
        source.pipe_input("a", "y", 6)
        source.pipe_input("a", None, 7)  # the tombstone is transformed (count 3) and deletes
        source.pipe_input("a", "z", 8)
        assert read(driver) == [("a", "x#1", 5), ("a", "y#2", 6), ("a", None, 7), ("a", "z#4", 8)]
        assert driver.get_key_value_store("result").get("a") == "z#4"
    assert Counting.closed == ["closed"]


class Upper:
    def init(self, context: ProcessorContext) -> None:
        self.context = context

    def transform(self, key: str, value: str | None) -> str | None:
        return None if value is None else f"{key}:{value.upper()}"

    def close(self) -> None:
        return None


def test_unmaterialized_transform_recomputes_old_values_and_serves_lookups() -> None:
    """A re-grouping needs old values: unmaterialized, they are the parent's old value transformed; a join
    looks the transform up through the parent's store."""
    builder = StreamsBuilder()
    upper = builder.table("in").transform_values(Upper)
    upper.group_by(lambda k, v: (v[-1], v)).count().to_stream().to("out", value_serde=L)
    other = builder.table("other")
    other.join(upper, lambda o, u: f"{o}+{u}").to_stream().to("joined")
    with TopologyTestDriver(builder.build(), CFG) as driver:
        source = driver.create_input_topic("in")
        source.pipe_input("a", "x", 1)
        source.pipe_input("a", "y", 2)  # moves from group X to group Y
        counts = driver.create_output_topic("out", S, L).read_key_values_to_list()
        assert counts == [("X", 1), ("X", 0), ("Y", 1)]
        driver.create_input_topic("other").pipe_input("a", "o", 3)
        assert driver.create_output_topic("joined").read_key_values_to_list() == [("a", "o+a:Y")]


class Forwarding(Upper):
    def transform(self, key: str, value: str | None) -> str | None:
        self.context.forward(Record(key, value, 0))
        return value


def test_transformer_may_not_forward() -> None:
    builder = StreamsBuilder()
    builder.table("in").transform_values(Forwarding).to_stream().to("out")
    with (
        TopologyTestDriver(builder.build(), CFG) as driver,
        pytest.raises(StreamsError, match="may not forward"),
    ):
        driver.create_input_topic("in").pipe_input("a", "x", 1)
