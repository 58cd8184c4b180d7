"""KTables: sources, tombstones, filter/map_values emit rules, re-grouping with subtraction."""

from __future__ import annotations

from kappaflow import Materialized, StreamsBuilder, serdes
from kappaflow.testing import TopologyTestDriver

S, L = serdes.String(), serdes.Long()


def test_table_source_materializes_latest_value_and_tombstones_delete() -> None:
    builder = StreamsBuilder()
    builder.table("t", key_serde=S, value_serde=S, materialized="tstore").to_stream().to("out")
    with TopologyTestDriver(builder.build()) as driver:
        topic = driver.create_input_topic("t", S, S)
        topic.pipe_key_value_list([("a", "1"), ("b", "2"), ("a", "3"), ("b", None)])
        assert driver.get_key_value_store("tstore").to_dict() == {"a": "3"}
        out = driver.create_output_topic("out", S, S).read_key_values_to_list()
        assert out == [("a", "1"), ("b", "2"), ("a", "3"), ("b", None)]


def test_table_source_drops_null_keys() -> None:
    builder = StreamsBuilder()
    builder.table("t", key_serde=S, value_serde=S).to_stream().to("out")
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("t", S, S).pipe_input(None, "x")
        assert driver.create_output_topic("out", S, S).is_empty()
        assert driver.metrics().counter("dropped-records-total", reason="null-key") == 1


def test_filter_emits_tombstones_for_records_that_fail_the_predicate() -> None:
    builder = StreamsBuilder()
    builder.table("t", key_serde=S, value_serde=L).filter(lambda k, v: v % 2 == 1).to_stream().to("out")
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("t", S, L).pipe_key_value_list([("a", 1), ("b", 2), ("a", 4)])
        out = driver.create_output_topic("out", S, L).read_key_values_to_list()
        # without old values downstream, Kafka Streams forwards a tombstone for every filtered record
        assert out == [("a", 1), ("b", None), ("a", None)]


def test_filter_not_and_materialized_filter_are_queryable() -> None:
    builder = StreamsBuilder()
    builder.table("t", key_serde=S, value_serde=L).filter_not(lambda k, v: v > 10, Materialized.as_("small"))
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("t", S, L).pipe_key_value_list([("a", 1), ("b", 20), ("c", 3), ("a", 30)])
        assert driver.get_key_value_store("small").to_dict() == {"c": 3}


def test_map_values_skips_tombstones() -> None:
    builder = StreamsBuilder()
    builder.table("t", key_serde=S, value_serde=S).map_values(len).to_stream().to("out", value_serde=L)
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("t", S, S).pipe_key_value_list([("a", "xyz"), ("a", None)])
        assert driver.create_output_topic("out", S, L).read_key_values_to_list() == [("a", 3), ("a", None)]


def test_group_by_subtracts_old_values_when_a_key_moves() -> None:
    # user -> region; count users per region: a user moving region leaves the old region's count
    builder = StreamsBuilder()
    builder.table("users", key_serde=S, value_serde=S).group_by(
        lambda user, region: (region, user), key_serde=S, value_serde=S
    ).count(Materialized.as_("per-region")).to_stream().to("out", value_serde=L)
    with TopologyTestDriver(builder.build()) as driver:
        users = driver.create_input_topic("users", S, S)
        users.pipe_key_value_list([("alice", "eu"), ("bob", "eu"), ("alice", "us"), ("bob", None)])
        assert driver.get_key_value_store("per-region").to_dict() == {"eu": 0, "us": 1}
        out = driver.create_output_topic("out", S, L).read_key_values_to_list()
        assert out == [("eu", 1), ("eu", 2), ("eu", 1), ("us", 1), ("eu", 0)]


def test_filtered_table_regrouped_sends_no_double_tombstones() -> None:
    builder = StreamsBuilder()
    builder.table("t", key_serde=S, value_serde=L).filter(lambda k, v: v > 0).group_by(
        lambda k, v: ("all", v), key_serde=S, value_serde=L
    ).reduce(lambda a, b: a + b, lambda a, b: a - b, Materialized.as_("total"))
    with TopologyTestDriver(builder.build(), {"application.id": "app"}) as driver:
        driver.create_input_topic("t", S, L).pipe_key_value_list([("a", -1), ("b", 5), ("a", 2), ("b", -3)])
        assert driver.get_key_value_store("total").to_dict() == {"all": 2}
        # "a" = -1 never passed the filter: with old values enabled nothing is sent for it
        assert len(driver.produced["app-total-repartition"]) == 3


def test_grouped_table_aggregate_with_adder_and_subtractor() -> None:
    builder = StreamsBuilder()
    builder.table("scores", key_serde=S, value_serde=L).group_by(
        lambda player, score: (player[0], score), key_serde=S, value_serde=L
    ).aggregate(
        lambda: 0,
        lambda k, v, agg: agg + v,
        lambda k, v, agg: agg - v,
        Materialized.as_("by-initial").with_value_serde(L),
    )
    with TopologyTestDriver(builder.build()) as driver:
        topic = driver.create_input_topic("scores", S, L)
        topic.pipe_key_value_list([("ann", 10), ("amy", 5), ("ann", 12), ("bob", 1)])
        assert driver.get_key_value_store("by-initial").to_dict() == {"a": 17, "b": 1}


def test_stream_to_table_and_back() -> None:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).to_table(Materialized.as_("latest")).to_stream().to(
        "out"
    )
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("in", S, S).pipe_key_value_list([("a", "1"), ("a", "2")])
        assert driver.get_key_value_store("latest").get("a") == "2"
        assert driver.create_output_topic("out", S, S).read_values_to_list() == ["1", "2"]


def test_global_table_is_readable_from_the_driver() -> None:
    builder = StreamsBuilder()
    builder.global_table("g", key_serde=S, value_serde=S, materialized="gstore")
    builder.stream("in", key_serde=S, value_serde=S).to("out")
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("g", S, S).pipe_key_value_list([("a", "1"), ("b", "2"), ("a", None)])
        assert driver.get_key_value_store("gstore").to_dict() == {"b": "2"}


def _unnamed_table_tombstones(joined: bool) -> list[tuple[str, str | None]]:
    builder = StreamsBuilder()
    table = builder.table("t")
    table.to_stream().to("out")
    if joined:
        builder.stream("s").join(table, lambda a, b: f"{a}+{b}").to("joined")
    config = {"default.key.serde": "String", "default.value.serde": "String"}
    with TopologyTestDriver(builder.build(), config) as driver:
        source = driver.create_input_topic("t")
        source.pipe_input("x", None, 1)  # a delete of a key never seen
        source.pipe_input("x", "1", 2)
        return [(r.key, r.value) for r in driver.create_output_topic("out").read_records_to_list()]


def test_an_unnamed_table_has_no_cache_until_something_needs_its_store() -> None:
    """Java builds an unnamed builder.table without a store, so every update - also the delete of an
    absent key - goes straight on; a join needs the store, which then caches and drops that delete."""
    assert _unnamed_table_tombstones(joined=False) == [("x", None), ("x", "1")]
    assert _unnamed_table_tombstones(joined=True) == [("x", "1")]
