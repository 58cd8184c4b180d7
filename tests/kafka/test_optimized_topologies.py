"""`topology.optimization` against a real broker. `reuse.ktable.source.topics`, under exactly_once_v2: a
source table's store has no changelog topic, and a fresh instance restores it from the table's input
topic only up to the group's committed offset there (Kafka Streams' rule). Records past that offset were
not processed yet: the task processes them after restoring, so each reaches the join once, with the
table's state of before it."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient

from kappaflow import StreamsBuilder, Topology
from kappaflow.api.serdes import String
from kappaflow.query import QueryableStoreTypes
from kappaflow.runner import KafkaStreams
from tests.kafka.streams_support import fast_config, produce, read_topic, wait_for, wait_running

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]
S = String()


def _topology(users: str, views: str, out: str) -> Topology:
    builder = StreamsBuilder()
    table = builder.table(users, key_serde=S, value_serde=S, materialized="users")
    builder.stream(views, key_serde=S, value_serde=S).join(table, lambda v, u: f"{v}/{u}").to(
        out, value_serde=S
    )
    return builder.build({"topology.optimization": "all"})


def _joined(bootstrap: str, out: str) -> list[tuple[str, str]]:
    return [
        (m.key().decode(), m.value().decode())
        for m in read_topic(bootstrap, out, timeout=3, committed_only=True)
    ]


def test_a_fresh_instance_restores_the_table_from_its_input_up_to_the_committed_offset(
    kafka_bootstrap, kafka_topics, tmp_path
):
    users, views, out = kafka_topics("reuse-users"), kafka_topics("reuse-views"), kafka_topics("reuse-out")
    app_id = f"reuse-{uuid.uuid4().hex[:8]}"

    def config(state: str) -> dict[str, object]:
        return fast_config(
            kafka_bootstrap, app_id, str(tmp_path / state), **{"processing.guarantee": "exactly_once_v2"}
        )

    produce(kafka_bootstrap, users, [(b"u1", b"ann"), (b"u2", b"bob"), (None, b"nobody")])
    first = KafkaStreams(_topology(users, views, out), config("a"))
    first.start()
    try:
        wait_running(first)
        produce(kafka_bootstrap, views, [(b"u1", b"home")])
        wait_for(lambda: _joined(kafka_bootstrap, out) == [("u1", "home/ann")], 60, "the first join")
    finally:
        assert first.close(30)
    topics = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
    assert not [t for t in topics if t.startswith(app_id) and t.endswith("-changelog")]

    # while no instance runs u2 changes: the group committed the first three users records only, so
    # restoration stops there and the change is processed afterwards (and is joined from then on).
    produce(kafka_bootstrap, users, [(b"u2", b"bea")])
    fresh = KafkaStreams(_topology(users, views, out), config("b"))  # no local state: restore
    fresh.start()
    try:
        wait_running(fresh)
        assert fresh.metrics.counter("restored-records-total") == 2  # u1, u2; not the null key, not bea
        store = fresh.store("users", QueryableStoreTypes.key_value())
        wait_for(lambda: store.get("u2") == "bea", 60, "bea processed after the restoration")
        produce(kafka_bootstrap, views, [(b"u2", b"cart")])
        wait_for(
            lambda: _joined(kafka_bootstrap, out) == [("u1", "home/ann"), ("u2", "cart/bea")], 60, "the join"
        )
    finally:
        assert fresh.close(30)


def test_merged_repartitions_run_through_one_topic(kafka_bootstrap, kafka_topics, tmp_path):
    """`merge.repartition.topics` against the broker: the runtime creates the one shared repartition
    topic, and both aggregations below the key change read it."""
    source, out = kafka_topics("merge-in"), kafka_topics("merge-out")
    app_id = f"merge-{uuid.uuid4().hex[:8]}"
    builder = StreamsBuilder()
    keyed = builder.stream(source, key_serde=S, value_serde=S).select_key(lambda k, v: v[:1])
    keyed.group_by_key(key_serde=S).count("counts").to_stream().map_values(lambda n: f"count={n}").to(
        out, value_serde=S
    )
    keyed.group_by_key(key_serde=S).reduce(lambda a, c: a + c, "concat").to_stream().to(out, value_serde=S)
    topology = builder.build({"topology.optimization": "all"})
    produce(kafka_bootstrap, source, [(b"k1", b"ant"), (b"k2", b"bee"), (b"k3", b"axe")])
    app = KafkaStreams(topology, fast_config(kafka_bootstrap, app_id, str(tmp_path / "m")))
    app.start()
    try:
        wait_running(app)
        expected = {("a", "count=2"), ("a", "antaxe"), ("b", "count=1"), ("b", "bee")}
        wait_for(lambda: expected <= set(_joined(kafka_bootstrap, out)), 60, "both aggregations")
    finally:
        assert app.close(30)
    topics = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
    assert [t for t in topics if t.startswith(app_id) and t.endswith("-repartition")] == [
        f"{app_id}-counts-repartition"
    ]
