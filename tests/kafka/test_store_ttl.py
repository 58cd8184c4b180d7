"""A TTL'd store on the real broker: expiry writes changelog tombstones, so a restore after a restart
(from the changelog, with a fresh state directory) and a standby replica see the expiry too."""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer

from kappaflow import Materialized, StreamsBuilder, serdes
from kappaflow.query import QueryableStoreTypes
from kappaflow.runner import KafkaStreams
from kappaflow.runner.http import prometheus_text
from kappaflow.state.ttl import EXPIRED_METRIC
from tests.kafka.streams_support import fast_config, read_topic, wait_for, wait_running

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]
S, L = serdes.String(), serdes.Long()


def ttl_count_topology(source: str, sink: str) -> Any:
    builder = StreamsBuilder()
    builder.stream(source, key_serde=S, value_serde=S).group_by_key().count(
        Materialized.as_("counts").with_ttl(1000)
    ).to_stream().to(sink, value_serde=L)
    return builder.build()


def produce_at(bootstrap: str, topic: str, records: list[tuple[str, int]]) -> None:
    """Keyed records with these event timestamps: stream time is what expires entries."""
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for key, timestamp in records:
        producer.produce(topic, key=key.encode(), value=b"x", timestamp=timestamp)
    assert producer.flush(30) == 0


def tombstoned(bootstrap: str, changelog: str) -> set[str]:
    return {m.key().decode() for m in read_topic(bootstrap, changelog, timeout=5) if m.value() is None}


def local_counts(app: KafkaStreams, stale: bool = False) -> dict[str, int]:
    return dict(app.store("counts", QueryableStoreTypes.key_value(), enable_stale_stores=stale).all())


def test_expiry_reaches_the_changelog_a_restore_and_a_standby(kafka_bootstrap, kafka_topics, tmp_path):
    source = kafka_topics("ttl-in")
    sink = kafka_topics("ttl-out")
    app_id = f"ttl-{uuid.uuid4().hex[:8]}"
    changelog = f"{app_id}-counts-changelog"

    def instance(name: str) -> KafkaStreams:
        config = fast_config(kafka_bootstrap, app_id, str(tmp_path / name), **{"num.standby.replicas": 1})
        return KafkaStreams(ttl_count_topology(source, sink), config)

    first, second = instance("a"), instance("b")
    first.start()
    second.start()
    try:
        wait_running(first, second)
        wait_for(
            lambda: any(app.local_task_ids()[1] for app in (first, second)), 60, "a standby for the one task"
        )
        active = first if first.local_task_ids()[0] else second
        standby = second if active is first else first
        produce_at(kafka_bootstrap, source, [("a", 1000), ("b", 1000), ("c", 1500)])
        wait_for(lambda: local_counts(active) == {"a": 1, "b": 1, "c": 1}, 60, "counts")
        produce_at(kafka_bootstrap, source, [("d", 2100)])  # stream time 2100: a and b (1000) expire
        wait_for(lambda: tombstoned(kafka_bootstrap, changelog) == {"a", "b"}, 60, "changelog tombstones")
        assert local_counts(active) == {"c": 1, "d": 1}
        assert active.metrics.counter(EXPIRED_METRIC, store="counts", task="0_0") == 2.0
        exported = prometheus_text(active.metrics)
        assert 'kappaflow_state_store_expired_total{store="counts",task="0_0"} 2.0' in exported
        # the standby applies the active task's tombstones (it expires nothing itself: no stream time)
        wait_for(lambda: local_counts(standby, stale=True) == {"c": 1, "d": 1}, 60, "the standby's copy")
    finally:
        assert first.close(30)
        assert second.close(30)

    # a fresh state directory: restored from the changelog alone, the expired keys are gone
    fresh = instance("fresh")
    fresh.start()
    try:
        wait_running(fresh)
        assert fresh.metrics.counter("restored-records-total") > 0
        assert local_counts(fresh) == {"c": 1, "d": 1}
        produce_at(kafka_bootstrap, source, [("a", 2200), ("c", 2200)])  # a starts over; c (1500) lives
        wait_for(lambda: local_counts(fresh) == {"a": 1, "c": 2, "d": 1}, 60, "counting after the restore")
        records = read_topic(kafka_bootstrap, sink, expected=6)
        outputs = [(m.key().decode(), struct.unpack(">q", m.value())[0]) for m in records]
        # no downstream tombstones (not asked for); a counts from 1 again after its expiry
        assert outputs == [("a", 1), ("b", 1), ("c", 1), ("d", 1), ("a", 1), ("c", 2)]
    finally:
        assert fresh.close(30)
