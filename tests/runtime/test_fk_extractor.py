"""KIP-1104: the foreign key of a foreign-key join taken from the left row's key and value
(`ForeignKeyExtractor.from_key_and_value`), from its value (`from_value`, or a plain callable), and the
refusals that keep the two from being confused. The record-for-record comparison with Kafka Streams is
the fkkv-* block of tests/conformance."""

from __future__ import annotations

import pytest

from kappaflow import ForeignKeyExtractor, StreamsBuilder, TopologyError
from kappaflow.dsl.fk_join import (
    DELETE_AND_PROPAGATE,
    DELETE_NO_PROPAGATE,
    PROPAGATE_NULL_IF_NO_FK_VALUE,
    PROPAGATE_ONLY_IF_FK_VALUE,
    subscription_instructions,
)
from kappaflow.testing import TopologyTestDriver

CFG = {"default.key.serde": "String", "default.value.serde": "String"}


def region_of(key: str, value: str) -> str:
    """An order keyed `<region>/<id>` belongs to its region unless its value names another."""
    return value.split("@")[1] if "@" in value else key.split("/")[0]


def test_constructors_call_the_function_with_what_they_promise() -> None:
    seen: list[tuple[object, ...]] = []
    by_value = ForeignKeyExtractor.from_value(lambda v: seen.append((v,)) or v.upper())
    by_both = ForeignKeyExtractor.from_key_and_value(lambda k, v: seen.append((k, v)) or f"{k}:{v}")
    assert by_value.extract("k", "v") == "V" and not by_value.uses_key
    assert by_both.extract("k", "v") == "k:v" and by_both.uses_key
    assert seen == [("v",), ("k", "v")]


def test_a_plain_callable_means_the_value_and_a_two_argument_one_is_refused() -> None:
    assert ForeignKeyExtractor.of(str.upper).extract("ignored", "abc") == "ABC"
    extractor = ForeignKeyExtractor.from_key_and_value(region_of)
    assert ForeignKeyExtractor.of(extractor) is extractor
    with pytest.raises(TopologyError, match="from_key_and_value"):
        ForeignKeyExtractor.of(region_of)  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match="callable"):
        ForeignKeyExtractor.of("region")  # type: ignore[arg-type]


def test_subscriptions_ask_the_extractor_with_the_row_key_for_old_and_new_values() -> None:
    extractor = ForeignKeyExtractor.from_key_and_value(region_of)
    # the value moves the row from its key's region to another: unsubscribe silently, then subscribe
    assert subscription_instructions(extractor, "eu/1", "book", "book@us", left=False) == [
        ("eu", DELETE_NO_PROPAGATE),
        ("us", PROPAGATE_NULL_IF_NO_FK_VALUE),
    ]
    assert subscription_instructions(extractor, "eu/1", "book", "pen", left=False) == [
        ("eu", PROPAGATE_ONLY_IF_FK_VALUE)
    ]
    # a tombstone retracts the subscription its old value (read with the key) made
    assert subscription_instructions(extractor, "eu/1", "book@us", None, left=False) == [
        ("us", DELETE_AND_PROPAGATE)
    ]


def _orders_by_region(left: bool) -> StreamsBuilder:
    builder = StreamsBuilder()
    orders = builder.table("orders")
    regions = builder.table("regions")
    extractor = ForeignKeyExtractor.from_key_and_value(region_of)
    joined = (
        orders.left_join(regions, extractor, lambda o, r: f"{o} in {r}")
        if left
        else orders.join(regions, extractor, lambda o, r: f"{o} in {r}", "by-region")
    )
    joined.to_stream().to("out")
    return builder


@pytest.mark.parametrize("left", [False, True])
def test_join_on_a_key_derived_foreign_key(left: bool) -> None:
    with TopologyTestDriver(_orders_by_region(left).build(), CFG) as driver:
        orders, regions = driver.create_input_topic("orders"), driver.create_input_topic("regions")
        out = driver.create_output_topic("out")
        regions.pipe_input("eu", "Europe", 1)
        regions.pipe_input("us", "Americas", 2)
        orders.pipe_input("eu/1", "book", 3)
        orders.pipe_input("eu/2", "pen@us", 4)
        orders.pipe_input("xx/3", "cup", 5)  # no such region
        regions.pipe_input("eu", "EU", 6)
        expected = [
            ("eu/1", "book in Europe", 3),
            ("eu/2", "pen@us in Americas", 4),
            *([("xx/3", "cup in None", 5)] if left else []),
            ("eu/1", "book in EU", 6),
        ]
        assert [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()] == expected
        if not left:
            assert dict(driver.get_key_value_store("by-region").all()) == {
                "eu/1": "book in EU",
                "eu/2": "pen@us in Americas",
            }


def test_a_foreign_key_extractor_without_a_joiner_is_refused() -> None:
    builder = StreamsBuilder()
    orders, regions = builder.table("orders"), builder.table("regions")
    with pytest.raises(TopologyError, match="needs a joiner"):
        orders.join(regions, ForeignKeyExtractor.from_key_and_value(region_of))  # type: ignore[call-overload]
