"""GlobalKTables on the real broker: loaded in full before processing, kept current, and checkpointed."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from kappaflow import StreamsBuilder, serdes
from kappaflow.runner import KafkaStreams, State
from tests.kafka.streams_support import produce, read_topic, wait_for

pytestmark = pytest.mark.kafka

S = serdes.String()


def enrichment(users: str, clicks: str, out: str) -> object:
    builder = StreamsBuilder()
    table = builder.global_table(users, key_serde=S, value_serde=S, materialized="users-store")
    builder.stream(clicks, key_serde=S, value_serde=S).left_join(
        table, lambda key, value: value.split(":")[0], lambda click, user: f"{click}@{user}"
    ).to(out, key_serde=S, value_serde=S)
    return builder.build()


def _streams(topology: object, bootstrap: str, state_dir: Path, app: str) -> KafkaStreams:
    return KafkaStreams(
        topology,  # type: ignore[arg-type]
        {
            "application.id": app,
            "bootstrap.servers": bootstrap,
            "state.dir": str(state_dir),
            "commit.interval.ms": 200,
            "metrics.port": -1,
        },
    )


def test_global_table_joins_across_partitions_and_restarts_from_its_checkpoint(
    kafka_bootstrap: str, kafka_topics, tmp_path: Path
) -> None:
    users = kafka_topics("users", partitions=3)
    clicks = kafka_topics("clicks", partitions=2)
    out = kafka_topics("enriched", partitions=2)
    app = f"global-{uuid.uuid4().hex[:6]}"
    # the table is spread over 3 partitions; the stream has 2: a global table needs no co-partitioning
    produce(kafka_bootstrap, users, [(f"u{i}".encode(), f"user{i}".encode()) for i in range(30)])
    topology = enrichment(users, clicks, out)

    streams = _streams(topology, kafka_bootstrap, tmp_path, app)
    streams.start()
    try:
        wait_for(lambda: streams.state is State.RUNNING, 60, "RUNNING")
        assert streams.metrics.counter("global-restored-records-total") == 30
        produce(kafka_bootstrap, clicks, [(b"c1", b"u1:home"), (b"c2", b"u29:cart"), (b"c3", b"nobody:x")])
        first = read_topic(kafka_bootstrap, out, expected=3)
        produce(kafka_bootstrap, users, [(b"u1", b"renamed")])
        thread = streams.stream_thread
        assert thread is not None and thread.global_state is not None
        store = thread.global_state.stores["users-store"]
        wait_for(lambda: store.get("u1").value == "renamed", 30, "the global update to be applied")
    finally:
        streams.close(30)
    joined = {m.key().decode(): m.value().decode() for m in first}
    assert joined == {"c1": "u1:home@user1", "c2": "u29:cart@user29", "c3": "nobody:x@None"}

    # restart on the same state dir: only the one update since the checkpoint is read again
    streams = _streams(topology, kafka_bootstrap, tmp_path, app)
    streams.start()
    try:
        wait_for(lambda: streams.state is State.RUNNING, 60, "RUNNING after restart")
        assert streams.metrics.counter("global-restored-records-total") <= 1
        produce(kafka_bootstrap, clicks, [(b"c4", b"u1:again")])
        records = read_topic(kafka_bootstrap, out, expected=4)
    finally:
        streams.close(30)
    assert records[-1].value().decode() == "u1:again@renamed"
