"""`topology.optimization=reuse.ktable.source.topics` against a real broker, under exactly_once_v2: a
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
