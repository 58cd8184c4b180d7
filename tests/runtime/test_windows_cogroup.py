"""cogroup: several grouped streams into one aggregate (Kafka Streams' CogroupedKStream)."""

from __future__ import annotations

from kappaflow import Materialized, StreamsBuilder
from kappaflow.testing import TopologyTestDriver

CFG = {"default.key.serde": "String", "default.value.serde": "String"}


def test_cogroup_aggregates_streams_into_one_table() -> None:
    builder = StreamsBuilder()
    clicks = builder.stream("clicks").group_by_key()
    buys = builder.stream("buys").select_key(lambda k, v: v).group_by_key()
    (
        clicks.cogroup(lambda k, v, agg: agg + "c")
        .cogroup(buys, lambda k, v, agg: agg + "B")
        .aggregate(lambda: "", Materialized.as_("activity").with_caching_disabled())
        .to_stream()
        .to("out")
    )
    topology = builder.build()
    assert any("clicks" in group for group in topology.copartition_groups)
    with TopologyTestDriver(topology, CFG) as driver:
        driver.create_input_topic("clicks").pipe_input("u1", "x", 1)
        driver.create_input_topic("buys").pipe_input("ignored", "u1", 5)
        driver.create_input_topic("clicks").pipe_input("u1", "y", 3)
        out = driver.create_output_topic("out")
        assert [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()] == [
            ("u1", "c", 1),
            ("u1", "cB", 5),
            ("u1", "cBc", 5),  # max(aggregate 5, record 3)
        ]
        assert driver.get_key_value_store("activity").get("u1") == "cBc"
