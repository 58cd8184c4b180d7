"""The broker contract the Kafka runtime relies on, checked against the real local broker.

These are not tests of Kafka itself: each one pins a behaviour the runtime's design assumes (see
ARCHITECTURE.md, "Runtime decisions already taken") with the exact client settings the runtime will use
(confluent-kafka / librdkafka 2.16 against Kafka 4.x), so a broker or client upgrade that breaks an
assumption fails here first, with a clear name.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription, NewTopic

from tests.harness.kafka_fixtures import TopicFactory, free_port
from tests.harness.murmur2 import default_partition, murmur2

# Reference values printed by the Java client itself (org.apache.kafka.common.utils.Utils.murmur2 from
# kafka-clients 4.3.1 on the harness classpath), covering every tail length (0-3 trailing bytes),
# multi-byte UTF-8 and all byte values (signedness of bytes >= 0x80).
JAVA_MURMUR2 = {
    b"": 275646681,
    b"a": -1563381124,
    b"ab": 316155434,
    b"abc": 479470107,
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    "été-日本".encode(): 1580312863,
    bytes(range(256)): -1948347274,
}


def test_murmur2_matches_the_java_client() -> None:
    for data, expected in JAVA_MURMUR2.items():
        assert murmur2(data) == expected, data


def _group_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _consume_all(consumer: Consumer, expected: int, timeout: float = 30.0) -> list[Message]:
    """Poll until ``expected`` records arrived, then drain briefly to catch any unexpected extras."""
    records: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(records) < expected and time.monotonic() < deadline:
        for msg in consumer.consume(num_messages=500, timeout=0.5):
            if msg.error() is None:
                records.append(msg)
            elif msg.error().code() != KafkaError._PARTITION_EOF:
                raise AssertionError(f"consumer error: {msg.error()}")
    settle = time.monotonic() + 0.5
    while time.monotonic() < settle:
        records.extend(m for m in consumer.consume(num_messages=500, timeout=0.2) if m.error() is None)
    return records


def _poll_until(consumers: Iterable[Consumer], condition: Callable[[], bool], timeout: float = 45.0) -> None:
    """Drive every consumer's poll loop (rebalances happen inside poll) until ``condition`` holds."""
    consumers = list(consumers)
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the group to settle")
        for consumer in consumers:
            msg = consumer.poll(0.05)
            if (
                msg is not None
                and msg.error() is not None
                and msg.error().code() != KafkaError._PARTITION_EOF
            ):
                raise AssertionError(f"consumer error: {msg.error()}")


def _describe_group(bootstrap: str, group: str) -> ConsumerGroupDescription:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    description: ConsumerGroupDescription = admin.describe_consumer_groups([group])[group].result(timeout=30)
    return description


def _partitions(consumer: Consumer) -> dict[str, set[int]]:
    result: dict[str, set[int]] = {}
    for tp in consumer.assignment():
        result.setdefault(tp.topic, set()).add(tp.partition)
    return result


@pytest.mark.kafka
def test_murmur2_random_places_keys_where_java_would(
    kafka_bootstrap: str, kafka_topics: TopicFactory
) -> None:
    partitions = 6
    topic = kafka_topics("murmur", partitions=partitions)
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random", "linger.ms": 5}
    )
    delivered: dict[bytes, int] = {}

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        assert err is None, err
        delivered[msg.key()] = msg.partition()

    keys = [f"user-{i}".encode() for i in range(300)] + ["ключ-é".encode(), b"\x00\xff\x80"]
    for key in keys:
        producer.produce(topic, key=key, value=b"v:" + key, on_delivery=on_delivery)
    assert producer.flush(30) == 0
    assert {key: default_partition(key, partitions) for key in keys} == delivered
    assert len(set(delivered.values())) == partitions  # the keys really spread over every partition

    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": _group_id("murmur"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        records = _consume_all(consumer, len(keys))
    finally:
        consumer.close()
    assert sorted((m.key(), m.value(), m.partition()) for m in records) == sorted(
        (key, b"v:" + key, default_partition(key, partitions)) for key in keys
    )


def _transactional_producer(bootstrap: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"harness-{uuid.uuid4().hex[:8]}",
            "partitioner": "murmur2_random",
            "transaction.timeout.ms": 30000,
        }
    )
    producer.init_transactions(30)
    return producer


def _read(bootstrap: str, topic: str, isolation: str, expected: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": _group_id("reader"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    try:
        consumer.subscribe([topic])
        return sorted(m.value() for m in _consume_all(consumer, expected))
    finally:
        consumer.close()


@pytest.mark.kafka
def test_read_committed_sees_committed_transactions_only(
    kafka_bootstrap: str, kafka_topics: TopicFactory
) -> None:
    topic = kafka_topics("txn", partitions=2)
    producer = _transactional_producer(kafka_bootstrap)
    outcomes = [
        ("first", producer.commit_transaction),
        ("aborted", producer.abort_transaction),
        ("second", producer.commit_transaction),
    ]
    for label, finish in outcomes:
        producer.begin_transaction()
        for i in range(5):
            producer.produce(topic, key=str(i).encode(), value=f"{label}-{i}".encode())
        # Flush first: librdkafka's abort purges records it has not sent yet, and this test wants the
        # aborted ones written to the log so that read_committed really has something to filter out.
        assert producer.flush(30) == 0
        finish(30)

    committed = sorted(f"{label}-{i}".encode() for label in ("first", "second") for i in range(5))
    assert _read(kafka_bootstrap, topic, "read_committed", len(committed)) == committed
    # The aborted records are in the log (a read_uncommitted reader sees them): read_committed filtered them.
    everything = sorted(f"{label}-{i}".encode() for label, _ in outcomes for i in range(5))
    assert _read(kafka_bootstrap, topic, "read_uncommitted", len(everything)) == everything


@pytest.mark.kafka
def test_send_offsets_to_transaction_commits_the_group_offsets_atomically(
    kafka_bootstrap: str, kafka_topics: TopicFactory
) -> None:
    source = kafka_topics("eos-in", partitions=2)
    sink = kafka_topics("eos-out", partitions=2)
    seed = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random"})
    for i in range(20):
        seed.produce(source, key=f"k{i}".encode(), value=f"v{i}".encode())
    assert seed.flush(30) == 0

    group = _group_id("eos")
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    producer = _transactional_producer(kafka_bootstrap)
    source_partitions = [TopicPartition(source, p) for p in range(2)]
    try:
        consumer.subscribe([source])
        records = _consume_all(consumer, 20)
        assert len(records) == 20
        positions = consumer.position(source_partitions)

        # An aborted transaction must leave the group's offsets untouched...
        producer.begin_transaction()
        producer.produce(sink, value=b"discarded")
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        producer.abort_transaction(30)
        assert all(tp.offset < 0 for tp in consumer.committed(source_partitions, timeout=10))

        # ...and a committed one stores them together with its output.
        producer.begin_transaction()
        for msg in records:
            producer.produce(sink, key=msg.key(), value=msg.value().upper())
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        committed = {tp.partition: tp.offset for tp in consumer.committed(source_partitions, timeout=10)}
    finally:
        consumer.close()
    ends = {tp.partition: _high_watermark(kafka_bootstrap, tp) for tp in source_partitions}
    assert committed == ends
    assert sum(ends.values()) == 20
    outputs = _read(kafka_bootstrap, sink, "read_committed", 20)
    assert outputs == sorted(f"V{i}".encode() for i in range(20))


def _high_watermark(bootstrap: str, tp: TopicPartition) -> int:
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": _group_id("wm")})
    try:
        _, high = probe.get_watermark_offsets(tp, timeout=10)
        return int(high)
    finally:
        probe.close()


def _classic_member(
    bootstrap: str, group: str, instance: str, topics: list[str], revoked: list[str]
) -> Consumer:
    """A classic-protocol member as the runtime configures one: range assignor, static membership."""

    def on_revoke(consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if partitions:
            revoked.append(instance)

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.instance.id": instance,
            "partition.assignment.strategy": "range",
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 250,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(topics, on_revoke=on_revoke)
    return consumer


def _poll_for(consumers: Iterable[Consumer], seconds: float) -> None:
    consumers = list(consumers)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for consumer in consumers:
            consumer.poll(0.05)


@pytest.mark.kafka
def test_classic_range_with_static_members_co_partitions_and_survives_a_restart(
    kafka_bootstrap: str, kafka_topics: TopicFactory
) -> None:
    topics = [kafka_topics("classic-a", partitions=4), kafka_topics("classic-b", partitions=4)]
    group = _group_id("classic")
    revoked: list[str] = []
    members = {
        name: _classic_member(kafka_bootstrap, group, name, topics, revoked) for name in ("pod-0", "pod-1")
    }
    try:

        def settled() -> bool:
            views = [_partitions(c) for c in members.values()]
            return all(len(v.get(t, ())) == 2 for v in views for t in topics)

        _poll_until(members.values(), settled)
        before = {name: _partitions(c) for name, c in members.items()}
        for view in before.values():
            # range co-partitions: a member owns the same partition numbers of both topics, contiguous.
            assert view[topics[0]] == view[topics[1]]
            assert view[topics[0]] in ({0, 1}, {2, 3})
        assert before["pod-0"][topics[0]] != before["pod-1"][topics[0]]
        description = _describe_group(kafka_bootstrap, group)
        assert description.type == ConsumerGroupType.CLASSIC
        assert description.partition_assignor == "range"
        assert sorted(m.group_instance_id for m in description.members) == ["pod-0", "pod-1"]

        # Static membership: a member that closes and comes back with the same group.instance.id within
        # the session timeout gets its partitions back without a rebalance, so pod-0 never loses its own.
        # Restart both in turn, as a rolling upgrade does (pod-0 subscribed first: usually the group leader).
        for restarted, other in (("pod-1", "pod-0"), ("pod-0", "pod-1")):
            revoked.clear()
            members[restarted].close()
            members[restarted] = _classic_member(kafka_bootstrap, group, restarted, topics, revoked)
            _poll_until(members.values(), lambda r=restarted: _partitions(members[r]) == before[r])
            _poll_for(members.values(), 2.0)  # several heartbeats: a rebalance would revoke `other` now
            assert _partitions(members[other]) == before[other]
            assert other not in revoked, f"restarting {restarted} rebalanced {other}"
    finally:
        for consumer in members.values():
            consumer.close()


@pytest.mark.kafka
def test_consumer_protocol_with_the_range_remote_assignor_co_partitions(
    kafka_bootstrap: str, kafka_topics: TopicFactory
) -> None:
    topics = [kafka_topics("kip848-a", partitions=4), kafka_topics("kip848-b", partitions=4)]
    group = _group_id("kip848")
    members = [
        Consumer(
            {
                "bootstrap.servers": kafka_bootstrap,
                "group.id": group,
                "group.protocol": "consumer",
                "group.remote.assignor": "range",
                "group.instance.id": f"pod-{i}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        for i in range(2)
    ]
    try:
        for consumer in members:
            consumer.subscribe(topics)

        def settled() -> bool:
            return all(len(_partitions(c).get(t, ())) == 2 for c in members for t in topics)

        _poll_until(members, settled)
        views = [_partitions(c) for c in members]
        for view in views:
            assert view[topics[0]] == view[topics[1]]
        assert views[0][topics[0]] | views[1][topics[0]] == {0, 1, 2, 3}
        assert not views[0][topics[0]] & views[1][topics[0]]
        # The broker really runs this group on the KIP-848 protocol (no silent fallback to classic).
        description = _describe_group(kafka_bootstrap, group)
        assert description.type == ConsumerGroupType.CONSUMER
        assert description.partition_assignor == "range"
        assert sorted(m.group_instance_id for m in description.members) == ["pod-0", "pod-1"]
    finally:
        for consumer in members:
            consumer.close()


@pytest.mark.kafka
def test_auto_topic_creation_is_off(kafka_bootstrap: str) -> None:
    """The runtime creates internal topics itself, with explicit partition counts; a typo must not
    silently create a one-partition topic."""
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    name = f"never-created-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "message.timeout.ms": 1000})
    errors: list[KafkaError] = []
    producer.produce(name, value=b"x", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    assert errors and errors[0] is not None
    assert name not in admin.list_topics(timeout=10).topics


@pytest.mark.kafka
@pytest.mark.skipif(bool(os.environ.get("KAPPAFLOW_TEST_BOOTSTRAP")), reason="uses the local broker only")
def test_cli_starts_a_detached_broker_idempotently_and_keeps_its_topics(tmp_path: Path) -> None:
    """What ``make kafka-up``/``kafka-down`` run: start (twice), status, stop, restart on the same dir."""
    repo = Path(__file__).resolve().parents[2]
    data_dir = tmp_path / "kafka"
    port, controller_port = free_port(), free_port()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tests.harness.kafka_broker", *args, "--dir", str(data_dir)],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=120,
        )

    start = ["start", "--port", str(port), "--controller-port", str(controller_port)]
    try:
        first = cli(*start)
        assert first.returncode == 0, first.stderr
        bootstrap = f"127.0.0.1:{port}"
        assert first.stdout.strip().splitlines()[-1] == bootstrap
        assert "already running" in cli(*start).stdout
        assert cli("status").returncode == 0

        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("kept-across-restarts", num_partitions=3)])[
            "kept-across-restarts"
        ].result(30)
        assert cli("stop").returncode == 0
        assert cli("status").returncode == 1

        # A restart on the same dir does not reformat: the topic is still there.
        assert cli(*start).returncode == 0
        topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
        assert len(topics["kept-across-restarts"].partitions) == 3
    finally:
        cli("stop")
    assert cli("status").returncode == 1
