"""Grouping and aggregation of streams: repartitioning, null handling, timestamps and caching."""

from __future__ import annotations

from typing import Any

from kappaflow import Grouped, Materialized, StreamsBuilder, serdes
from kappaflow.testing import TopologyTestDriver

S, L = serdes.String(), serdes.Long()


def test_group_by_key_needs_no_repartition_but_group_by_does() -> None:
    builder = StreamsBuilder()
    stream = builder.stream("in", key_serde=S, value_serde=S)
    stream.group_by_key().count(Materialized.as_("by-key"))
    stream.filter(lambda k, v: True).map_values(len).group_by_key(value_serde=L).count()
    stream.group_by(lambda k, v: v, key_serde=S).count(Materialized.as_("by-value"))
    topology = builder.build()
    assert list(topology.internal_topics) == ["by-value-repartition"]


def test_key_change_then_stateful_op_inserts_one_repartition_named_after_grouping() -> None:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).select_key(lambda k, v: v).group_by_key(
        grouped=Grouped(S, S, name="regroup")
    ).count()
    topology = builder.build()
    assert list(topology.internal_topics) == ["regroup-repartition"]
    assert [s.source_topics for s in topology.sub_topologies()] == [["in"], ["regroup-repartition"]]


def test_count_drops_null_keys_and_values_and_counts_the_drop() -> None:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).group_by_key().count(
        Materialized.as_("c")
    ).to_stream().to("out", value_serde=L)
    with TopologyTestDriver(builder.build()) as driver:
        topic = driver.create_input_topic("in", S, S)
        topic.pipe_key_value_list([("a", "x"), (None, "y"), ("a", None), ("a", "z")])
        out = driver.create_output_topic("out", S, L).read_key_values_to_list()
        assert out == [("a", 1), ("a", 2)]
        assert driver.metrics().counter("dropped-records-total") == 2


def test_group_by_drops_null_keys_before_the_repartition_topic() -> None:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).group_by(
        lambda k, v: v or None, key_serde=S, value_serde=S
    ).count(Materialized.as_("c"))
    with TopologyTestDriver(builder.build(), {"application.id": "app"}) as driver:
        driver.create_input_topic("in", S, S).pipe_key_value_list([("1", "a"), ("2", ""), ("3", "a")])
        assert driver.get_key_value_store("c").to_dict() == {"a": 2}
        assert len(driver.produced["app-c-repartition"]) == 2
        assert driver.metrics().counter("dropped-records-total", reason="null-key") == 1


def test_reduce_and_aggregate_with_max_timestamps() -> None:
    builder = StreamsBuilder()
    grouped = builder.stream("in", key_serde=S, value_serde=L).group_by_key()
    grouped.reduce(lambda a, b: a + b, Materialized.as_("sum")).to_stream().to("sum-out", value_serde=L)
    grouped.aggregate(
        lambda: "", lambda k, v, agg: agg + str(v), Materialized.as_("concat").with_value_serde(S)
    ).to_stream().to("concat-out", value_serde=S)
    with TopologyTestDriver(builder.build()) as driver:
        topic = driver.create_input_topic("in", S, L)
        topic.pipe_input("k", 1, timestamp=10)
        topic.pipe_input("k", 2, timestamp=5)
        topic.pipe_input("k", 3, timestamp=20)
        sums = driver.create_output_topic("sum-out", S, L).read_records_to_list()
        assert [(r.value, r.timestamp) for r in sums] == [(1, 10), (3, 10), (6, 20)]
        concat = driver.create_output_topic("concat-out", S, S).read_records_to_list()
        assert [(r.value, r.timestamp) for r in concat] == [("1", 10), ("12", 10), ("123", 20)]
        stored = driver.get_timestamped_key_value_store("sum").get("k")
        assert (stored.value, stored.timestamp) == (6, 20)


def _twice_per_record(caching: bool, cache_bytes: int | None = None) -> list[tuple[Any, Any]]:
    builder = StreamsBuilder()
    mat = Materialized.as_("c")
    mat = mat.with_caching_enabled() if caching else mat.with_caching_disabled()
    builder.stream("in", key_serde=S, value_serde=S).flat_map_values(lambda v: [v, v]).group_by_key(
        value_serde=S
    ).count(mat).to_stream().to("out", value_serde=L)
    config = {} if cache_bytes is None else {"statestore.cache.max.bytes": cache_bytes}
    with TopologyTestDriver(builder.build(), config) as driver:
        driver.create_input_topic("in", S, S).pipe_key_value_list([("a", "x"), ("a", "y")])
        return driver.create_output_topic("out", S, L).read_key_values_to_list()


def test_caching_collapses_updates_of_a_key_between_commits() -> None:
    # the driver commits after each input record: with a cache, the two updates one input makes to
    # key "a" reach the output once; without, both are forwarded, as in Kafka Streams
    assert _twice_per_record(caching=True) == [("a", 2), ("a", 4)]
    assert _twice_per_record(caching=False) == [("a", 1), ("a", 2), ("a", 3), ("a", 4)]


def test_zero_cache_size_means_every_update_is_forwarded() -> None:
    assert _twice_per_record(caching=True, cache_bytes=0) == [("a", 1), ("a", 2), ("a", 3), ("a", 4)]


def test_in_memory_and_rocksdb_aggregates_agree() -> None:
    results = []
    for store_type in ("memory", "rocksdb"):
        builder = StreamsBuilder()
        builder.stream("in", key_serde=S, value_serde=S).group_by_key().count(
            Materialized.as_("c").with_store_type(store_type)  # type: ignore[arg-type]
        )
        with TopologyTestDriver(builder.build()) as driver:
            driver.create_input_topic("in", S, S).pipe_key_value_list([(k, "v") for k in "abcabca"])
            results.append(sorted(driver.get_key_value_store("c").all()))
    assert results[0] == results[1] == [("a", 3), ("b", 2), ("c", 2)]


def test_aggregate_store_is_changelogged_and_restorable() -> None:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).group_by_key().count(
        Materialized.as_("c").with_store_type("memory")
    ).to_stream().to("out", value_serde=L)
    topology = builder.build()
    first = TopologyTestDriver(topology, {"application.id": "app"})
    first.create_input_topic("in", S, S).pipe_key_value_list([("a", "1"), ("b", "1"), ("a", "1")])
    changelog = first.produced["app-c-changelog"]
    assert [(r.key, L.deserialize("t", r.value)) for r in changelog] == [(b"a", 1), (b"b", 1), (b"a", 2)]
    first.close()
    second = TopologyTestDriver(topology, {"application.id": "app"}, restore_from=first)
    try:
        assert second.get_key_value_store("c").to_dict() == {"a": 2, "b": 1}
        second.create_input_topic("in", S, S).pipe_input("a", "1")
        assert second.create_output_topic("out", S, L).read_key_value() == ("a", 3)
    finally:
        second.close()


def test_seeding_a_timestamped_store_through_the_driver_view() -> None:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).group_by_key().count(
        Materialized.as_("c")
    ).to_stream().to("out", value_serde=L)
    with TopologyTestDriver(builder.build()) as driver:
        driver.get_key_value_store("c").put("a", 41)
        driver.create_input_topic("in", S, S).pipe_input("a", "x", timestamp=5)
        assert driver.create_output_topic("out", S, L).read_key_value() == ("a", 42)
