"""Foreign-key table-table joins (KIP-213): orders joined with the customer each order references."""

from __future__ import annotations

import pytest

from kappaflow import StreamsBuilder
from kappaflow.serdes import String
from kappaflow.testing import TopologyTestDriver

CFG = {"default.key.serde": "String", "default.value.serde": "String"}


def topology(kind: str):
    builder = StreamsBuilder()
    orders = builder.table("orders")  # value "customer-id:item"
    customers = builder.table("customers")
    method = orders.join if kind == "inner" else orders.left_join
    joined = method(
        customers, lambda order: order.split(":")[0], lambda order, customer: f"{order}@{customer}"
    )
    joined.to_stream().to("out")
    return builder.build()


def read(driver):
    return [(r.key, r.value, r.timestamp) for r in driver.create_output_topic("out").read_records_to_list()]


@pytest.mark.parametrize("kind", ["inner", "left"])
def test_foreign_key_join_follows_both_sides(kind: str) -> None:
    left = kind == "left"
    with TopologyTestDriver(topology(kind), CFG) as driver:
        orders, customers = driver.create_input_topic("orders"), driver.create_input_topic("customers")
        orders.pipe_input("o1", "c1:book", 1)  # customer unknown
        assert read(driver) == ([("o1", "c1:book@None", 1)] if left else [])
        customers.pipe_input("c1", "alice", 2)  # a right update answers its subscribers
        assert read(driver) == [("o1", "c1:book@alice", 2)]
        orders.pipe_input("o2", "c1:pen", 3)
        assert read(driver) == [("o2", "c1:pen@alice", 3)]
        customers.pipe_input("c1", "alicia", 4)
        assert read(driver) == [("o1", "c1:book@alicia", 4), ("o2", "c1:pen@alicia", 4)]
        orders.pipe_input("o1", "c2:book", 5)  # foreign key changes to an unknown customer
        # Kafka Streams 4.x unsubscribes the old key silently (DELETE_KEY_NO_PROPAGATE): one answer
        assert read(driver) == [("o1", "c2:book@None" if left else None, 5)]
        customers.pipe_input("c1", None, 6)  # right row deleted
        assert read(driver) == [("o2", "c1:pen@None" if left else None, 6)]
        orders.pipe_input("o2", None, 7)  # left row deleted: one tombstone
        assert read(driver) == [("o2", None, 7)]
        customers.pipe_input("c1", "back", 8)  # o2 unsubscribed: nothing
        assert read(driver) == []


def test_internal_topics_and_copartitioning() -> None:
    topo = topology("inner")
    names = sorted(topo.internal_topics)
    assert names == [  # Java's names (tests/conformance/test_describe.py compares them with Java's)
        "KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000006-topic",
        "KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000014-topic",
    ]
    assert any("customers" in group for group in topo.copartition_groups)
    assert any("orders" in group for group in topo.copartition_groups)
    assert "KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-0000000010" in topo.changelog_topics()


def test_subscriptions_survive_restart() -> None:
    topo = topology("inner")
    first = TopologyTestDriver(topo, CFG)
    first.create_input_topic("orders").pipe_input("o1", "c1:book", 1)
    first.close()
    second = TopologyTestDriver(topo, CFG, restore_from=first)
    try:
        second.create_input_topic("customers").pipe_input("c1", "alice", 2)
        assert read(second) == [("o1", "c1:book@alice", 2)]
    finally:
        second.close()


def null_fk_topology(kind: str, materialized: str | None = None):
    """Orders whose customer part may be empty: an empty customer is a null foreign key."""
    builder = StreamsBuilder()
    orders = builder.table("orders", key_serde=String(), value_serde=String())
    customers = builder.table("customers", key_serde=String(), value_serde=String())
    method = orders.join if kind == "inner" else orders.left_join
    joined = method(
        customers,
        lambda order: order.split(":")[0] or None,
        lambda order, customer: f"{order}@{customer}",
        materialized,
    )
    joined.to_stream().to("out", key_serde=String(), value_serde=String())
    return builder.build()


def test_left_join_with_a_null_foreign_key_joins_with_null() -> None:
    """KIP-962 (Kafka 3.7+), as Java's shouldEmitRecordOnNullForeignKeyForLeftJoins: the row is kept."""
    with TopologyTestDriver(null_fk_topology("left", "joined"), CFG) as driver:
        orders, customers = driver.create_input_topic("orders"), driver.create_input_topic("customers")
        customers.pipe_input("c1", "alice", 1)
        orders.pipe_input("o1", ":book", 2)
        assert read(driver) == [("o1", ":book@None", 2)]
        orders.pipe_input("o1", "c1:book", 3)  # null -> c1: joins with the customer
        assert read(driver) == [("o1", "c1:book@alice", 3)]
        orders.pipe_input("o1", ":pen", 4)  # c1 -> null: c1 unsubscribed silently, null answers
        assert read(driver) == [("o1", ":pen@None", 4)]
        customers.pipe_input("c1", "alicia", 5)  # o1 no longer subscribes to c1
        assert read(driver) == []
        assert driver.get_key_value_store("joined").get("o1") == ":pen@None"
        orders.pipe_input("o1", None, 6)  # a row with a null foreign key deleted: tombstone
        assert read(driver) == [("o1", None, 6)]


def test_inner_join_drops_a_null_foreign_key() -> None:
    with TopologyTestDriver(null_fk_topology("inner"), CFG) as driver:
        driver.create_input_topic("customers").pipe_input("c1", "alice", 1)
        driver.create_input_topic("orders").pipe_input("o1", ":book", 2)
        assert read(driver) == []


def test_unmaterialized_join_has_no_output_store_and_needs_no_default_serde() -> None:
    """Java's result is a store-less KTableSource; its value type needs no serde unless materialized."""
    topo = null_fk_topology("left")
    assert not any("FK-JOIN-OUTPUT-STATE-STORE" in name for name in topo.changelog_topics())
    with TopologyTestDriver(topo, {}) as driver:
        driver.create_input_topic("customers", String(), String()).pipe_input("c1", "alice", 1)
        driver.create_input_topic("orders", String(), String()).pipe_input("o1", "c1:book", 2)
        out = driver.create_output_topic("out", String(), String())
        assert [(r.key, r.value) for r in out.read_records_to_list()] == [("o1", "c1:book@alice")]


def test_unmaterialized_result_is_materialized_when_joined_again() -> None:
    """A later primary-key join needs the result's value getter: the store is added then."""
    builder = StreamsBuilder()
    orders, customers = builder.table("orders"), builder.table("customers")
    joined = orders.left_join(customers, lambda o: o.split(":")[0], lambda o, c: f"{o}@{c}")
    notes = builder.table("notes")
    joined.join(notes, lambda j, n: f"{j}+{n}").to_stream().to("out")
    topo = builder.build()
    assert any("FK-JOIN-OUTPUT-STATE-STORE" in name for name in topo.changelog_topics())
    with TopologyTestDriver(topo, CFG) as driver:
        driver.create_input_topic("notes").pipe_input("o1", "gift", 1)
        driver.create_input_topic("orders").pipe_input("o1", "c1:book", 2)
        assert read(driver) == [("o1", "c1:book@None+gift", 2)]
