"""Foreign-key table-table joins (KIP-213): orders joined with the customer each order references."""

from __future__ import annotations

import pytest

from kappaflow import StreamsBuilder
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
        assert read(driver) == [("o1", "c2:book@None" if left else None, 5)]
        customers.pipe_input("c1", None, 6)  # right row deleted
        assert read(driver) == [("o2", "c1:pen@None" if left else None, 6)]
        orders.pipe_input("o2", None, 7)  # left row deleted: tombstone
        assert read(driver) == [("o2", None, 7)]
        customers.pipe_input("c1", "back", 8)  # o2 unsubscribed: nothing
        assert read(driver) == []


def test_internal_topics_and_copartitioning() -> None:
    topo = topology("inner")
    names = sorted(topo.internal_topics)
    assert names == [
        "KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000006-subscription-registration-repartition",
        "KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000006-subscription-response-repartition",
    ]
    assert any("customers" in group for group in topo.copartition_groups)
    assert any("orders" in group for group in topo.copartition_groups)
    assert "KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000006-subscription-store" in topo.changelog_topics()


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
