"""Word count end to end on the real broker: internal topics, partition placement, rebalancing."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from kappaflow.clients import partition_for_key
from kappaflow.clients.admin import TopicError
from kappaflow.runner import KafkaStreams, State
from tests.kafka.streams_support import (
    fast_config,
    latest_counts,
    produce_lines,
    read_topic,
    wait_for,
    wait_running,
)
from tests.kafka.streams_support import (
    wordcount_topology as wordcount,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

WORDS = ["apple", "banana", "cherry", "date", "elder", "fig", "grape"]


def lines(n: int, offset: int = 0) -> list[str]:
    return [f"{WORDS[(i + offset) % 7]} {WORDS[(i * 3 + offset) % 7]}" for i in range(n)]


def expected_counts(all_lines: list[str]) -> dict[str, int]:
    return dict(Counter(w for line in all_lines for w in line.split()))


def test_wordcount_end_to_end(kafka_bootstrap, kafka_topics, tmp_path):
    source = kafka_topics("wc-in", partitions=3)
    sink = kafka_topics("wc-out", partitions=3)
    app_id = f"wc-{uuid.uuid4().hex[:8]}"
    states: list[tuple[State, State]] = []
    streams = KafkaStreams(wordcount(source, sink), fast_config(kafka_bootstrap, app_id, str(tmp_path)))
    streams.set_state_listener(lambda new, old: states.append((new, old)))
    streams.start()
    try:
        wait_running(streams)
        data = lines(300)
        produce_lines(kafka_bootstrap, source, data)
        expected = expected_counts(data)
        wait_for(
            lambda: latest_counts(read_topic(kafka_bootstrap, sink, timeout=5)) == expected,
            60,
            "final counts",
        )
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        topics = admin.list_topics(timeout=10).topics
        changelog = f"{app_id}-counts-changelog"
        repartition = [t for t in topics if t.startswith(app_id) and t.endswith("-repartition")]
        assert changelog in topics and len(topics[changelog].partitions) == 3
        assert len(repartition) == 1 and len(topics[repartition[0]].partitions) == 3
        from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]

        configs = admin.describe_configs(
            [ConfigResource("topic", changelog), ConfigResource("topic", repartition[0])]
        )
        policies = [f.result(timeout=10)["cleanup.policy"].value for f in configs.values()]
        assert sorted(policies) == ["compact", "delete"]
        # murmur2_random everywhere: every output key sits where the Java partitioner would put it.
        for msg in read_topic(kafka_bootstrap, sink, timeout=5):
            assert msg.partition() == partition_for_key(msg.key(), 3)
        assert streams.metrics.counter("records-processed-total") >= 300
    finally:
        assert streams.close(30)
    assert streams.state is State.NOT_RUNNING
    assert (State.RUNNING, State.REBALANCING) in states
    assert states[-1] == (State.NOT_RUNNING, State.PENDING_SHUTDOWN)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_two_instances_share_partitions_and_rebalance(kafka_bootstrap, kafka_topics, tmp_path, protocol):
    """Eager `range` rebalances (classic) and incremental ones (KIP-848 with the `range` remote assignor)."""
    source = kafka_topics("wc2-in", partitions=4)
    sink = kafka_topics("wc2-out", partitions=4)
    app_id = f"wc2-{uuid.uuid4().hex[:8]}"
    extra = {"consumer.group.protocol": protocol}
    a = KafkaStreams(
        wordcount(source, sink), fast_config(kafka_bootstrap, app_id, str(tmp_path / "a"), **extra)
    )
    b = KafkaStreams(
        wordcount(source, sink), fast_config(kafka_bootstrap, app_id, str(tmp_path / "b"), **extra)
    )
    a.start()
    b.start()
    try:
        wait_for(
            lambda: (
                a.state is State.RUNNING
                and b.state is State.RUNNING
                and len(a.local_task_ids()[0]) + len(b.local_task_ids()[0]) == 8
                and a.local_task_ids()[0]
                and b.local_task_ids()[0]
            ),
            60,
            "both instances running with tasks",
        )
        active_a, active_b = set(a.local_task_ids()[0]), set(b.local_task_ids()[0])
        assert not active_a & active_b  # each task runs exactly once
        first = lines(200)
        produce_lines(kafka_bootstrap, source, first)
        wait_for(
            lambda: latest_counts(read_topic(kafka_bootstrap, sink, timeout=5)) == expected_counts(first),
            60,
            "counts from two instances",
        )
        assert b.close(30)
        wait_for(lambda: a.state is State.RUNNING and len(a.local_task_ids()[0]) == 8, 60, "a takes over")
        second = lines(100, offset=3)
        produce_lines(kafka_bootstrap, source, second)
        wait_for(
            lambda: (
                latest_counts(read_topic(kafka_bootstrap, sink, timeout=5)) == expected_counts(first + second)
            ),
            60,
            "counts after b left (restored from the changelog)",
        )
    finally:
        a.close(30)
        b.close(30)


def test_wrong_partition_count_of_internal_topic_fails_fast(kafka_bootstrap, kafka_topics, tmp_path):
    source = kafka_topics("wc3-in", partitions=2)
    sink = kafka_topics("wc3-out", partitions=2)
    app_id = f"wc3-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    changelog = f"{app_id}-counts-changelog"
    admin.create_topics([NewTopic(changelog, num_partitions=5, replication_factor=1)])[changelog].result(30)
    streams = KafkaStreams(wordcount(source, sink), fast_config(kafka_bootstrap, app_id, str(tmp_path)))
    streams.start()
    try:
        wait_for(lambda: streams.state is State.ERROR, 30, "ERROR state")
        assert isinstance(streams.error, TopicError)
        assert changelog in str(streams.error) and "has 5 (expected 2)" in str(streams.error)
    finally:
        streams.close(10)
        admin.delete_topics([changelog])


def test_missing_internal_topics_fail_when_the_operator_owns_them(kafka_bootstrap, kafka_topics, tmp_path):
    source = kafka_topics("wc4-in", partitions=2)
    sink = kafka_topics("wc4-out", partitions=2)
    app_id = f"wc4-{uuid.uuid4().hex[:8]}"
    config = fast_config(
        kafka_bootstrap, app_id, str(tmp_path), **{"kappaflow.internal.topics.create": "false"}
    )
    streams = KafkaStreams(wordcount(source, sink), config)
    streams.start()
    try:
        assert streams.wait_until(State.ERROR, 30)
        assert isinstance(streams.error, TopicError)
        assert f"{app_id}-counts-changelog" in str(streams.error)
        assert "kappaflow.internal.topics.create=false" in str(streams.error)
    finally:
        streams.close(10)
    topics = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
    assert not [t for t in topics if t.startswith(app_id)]


def test_join_inputs_must_be_copartitioned(kafka_bootstrap, kafka_topics, tmp_path):
    from kappaflow import StreamsBuilder, serdes

    left = kafka_topics("cp-left", partitions=2)
    right = kafka_topics("cp-right", partitions=3)
    sink = kafka_topics("cp-out", partitions=2)
    builder = StreamsBuilder()
    table = builder.table(right, key_serde=serdes.String(), value_serde=serdes.String())
    stream = builder.stream(left, key_serde=serdes.String(), value_serde=serdes.String())
    stream.join(table, lambda a, b: a + b).to(sink, key_serde=serdes.String(), value_serde=serdes.String())
    streams = KafkaStreams(
        builder.build(), fast_config(kafka_bootstrap, f"cp-{uuid.uuid4().hex[:8]}", str(tmp_path))
    )
    streams.start()
    try:
        assert streams.wait_until(State.ERROR, 30)
        message = str(streams.error)
        assert f"{left} (2 partitions)" in message and f"{right} (3 partitions)" in message
    finally:
        streams.close(10)


def test_repartition_topics_are_purged_below_committed_offsets(kafka_bootstrap, kafka_topics, tmp_path):
    from confluent_kafka import Consumer, TopicPartition

    source = kafka_topics("wc5-in", partitions=1)
    sink = kafka_topics("wc5-out", partitions=1)
    app_id = f"wc5-{uuid.uuid4().hex[:8]}"
    config = fast_config(kafka_bootstrap, app_id, str(tmp_path), **{"repartition.purge.interval.ms": 100})
    streams = KafkaStreams(wordcount(source, sink), config)
    streams.start()
    try:
        wait_running(streams)
        topics = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
        repartition = next(t for t in topics if t.startswith(app_id) and t.endswith("-repartition"))
        produce_lines(kafka_bootstrap, source, lines(50))
        consumer = Consumer(
            {"bootstrap.servers": kafka_bootstrap, "group.id": f"probe-{uuid.uuid4().hex[:6]}"}
        )
        try:
            wait_for(
                lambda: consumer.get_watermark_offsets(TopicPartition(repartition, 0), timeout=5)[0] >= 100,
                30,
                "repartition records below the committed offset deleted",
            )
        finally:
            consumer.close()
    finally:
        streams.close(30)


def test_an_instance_without_tasks_is_running(kafka_bootstrap, kafka_topics, tmp_path):
    source = kafka_topics("wc6-in", partitions=1)
    sink = kafka_topics("wc6-out", partitions=1)
    app_id = f"wc6-{uuid.uuid4().hex[:8]}"
    a = KafkaStreams(wordcount(source, sink), fast_config(kafka_bootstrap, app_id, str(tmp_path / "a")))
    b = KafkaStreams(wordcount(source, sink), fast_config(kafka_bootstrap, app_id, str(tmp_path / "b")))
    a.start()
    b.start()
    try:
        wait_for(
            lambda: (
                a.state is State.RUNNING
                and b.state is State.RUNNING
                and len(a.local_task_ids()[0]) + len(b.local_task_ids()[0]) == 2
                and not (a.local_task_ids()[0] and b.local_task_ids()[0])
            ),
            60,
            "one busy and one idle instance, both RUNNING",
        )
    finally:
        a.close(30)
        b.close(30)
