"""Sink, repartition and changelog records produced by the native core (`ProduceSend`, produce.rs) against the
Python path (`KafkaRecordCollector.send` through confluent-kafka's `Producer.produce`): what lands in
Kafka is the same record for record (partition, key, value, timestamp, headers), under both guarantees;
a full local queue and a record over the producer's size limit end as on the Python path. The failure
cases shared with the Python path (a record the broker rejects, to the production handler or failing
the transaction) run both ways in test_record_collector.py."""

from __future__ import annotations

from typing import Any

import pytest

from kappaflow.api.record import Headers
from kappaflow.clients.admin import InternalTopicManager
from kappaflow.clients.kafka import KafkaRecordCollector, ProductionError
from kappaflow.runner.native_produce import native_send
from kappaflow.runner.producer import StreamsProducer
from kappaflow.tasks.native import ProduceSend
from tests.kafka.streams_support import read_topic
from tests.native_support import require_native_core

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

# (key, value, headers, timestamp, partition): keyed records the murmur2_random partitioner places,
# explicit partitions, tombstones, empty payloads, headers (those go through the Python send)
RECORDS: list[tuple[bytes | None, bytes | None, Headers | None, int, int | None]] = [
    *((b"key-%d" % i, b"value-%d" % i, None, 1_000 + i, None) for i in range(40)),
    (b"explicit", b"p2", None, 2_000, 2),
    (None, b"no key", None, 3_000, 1),
    (b"tombstone", None, None, 4_000, None),
    (b"", b"", None, 5_000, 0),
    (b"headers", b"h", Headers([("h", b"1"), ("n", None)]), 6_000, None),
    (b"large", b"timestamp", None, 1_700_000_000_123, None),
]


def collector(
    bootstrap: str, exactly_once: bool, native: bool, txn: str = "", **extra: Any
) -> tuple[StreamsProducer, KafkaRecordCollector, ProduceSend | None]:
    settings: dict[str, Any] = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"}
    settings.update(extra)
    if exactly_once:
        settings["transactional.id"] = txn
    producer = StreamsProducer(settings, exactly_once, None, api_timeout_s=30)
    sink = KafkaRecordCollector(producer, InternalTopicManager({"bootstrap.servers": bootstrap}))
    sender = None
    if native:
        sender = native_send(require_native_core(), producer, sink.send, sink.report_error)
        assert sender is not None, "the native produce path was refused (see the log)"
        sink.use_native(sender)
    return producer, sink, sender


def landed(bootstrap: str, topic: str) -> list[tuple[Any, ...]]:
    found = read_topic(bootstrap, topic, expected=len(RECORDS), timeout=20, committed_only=True)
    return sorted((m.partition(), m.offset(), m.key(), m.value(), m.timestamp(), m.headers()) for m in found)


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at_least_once", "exactly_once_v2"])
def test_both_paths_land_the_same_records(kafka_bootstrap, kafka_topics, exactly_once):
    topics = {}
    for native in (False, True):
        topic = topics[native] = kafka_topics(f"sink-{'native' if native else 'python'}", partitions=3)
        producer, sink, sender = collector(kafka_bootstrap, exactly_once, native, txn=f"np-{topic}")
        producer.begin()
        for key, value, headers, timestamp, partition in RECORDS:
            sink.send(topic, key, value, headers, timestamp, partition)
        producer.commit([], None)
        assert sink.sent == len(RECORDS)
        if sender is not None:  # every record but the one with headers went natively
            assert sender.sent == len(RECORDS) - 1
        producer.close()
    python, native = landed(kafka_bootstrap, topics[False]), landed(kafka_bootstrap, topics[True])
    assert len(python) == len(RECORDS)
    assert native == python


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at_least_once", "exactly_once_v2"])
def test_changelog_records_and_their_acknowledged_offsets_are_the_same_both_ways(
    kafka_bootstrap, kafka_topics, exactly_once
):
    """`send_changelog` through the core's `changelog` on the changelog producer: the same records land,
    and every delivery reaches the offset report, so the checkpoint's acknowledged offsets match."""
    changelog = [(key, value, timestamp, partition or 0) for key, value, _, timestamp, partition in RECORDS]
    results = {}
    for native in (False, True):
        topic = kafka_topics(f"changelog-{'native' if native else 'python'}", partitions=3)
        producer, sink, _ = collector(kafka_bootstrap, exactly_once, False, txn=f"nc-{topic}")
        sender = None
        if native:
            sender = native_send(
                require_native_core(), producer, sink.send_changelog, sink.report_offset, "changelog_producer"
            )
            assert sender is not None, "the native changelog path was refused (see the log)"
            sink.use_native_changelog(sender)
        producer.begin()
        for key, value, timestamp, partition in changelog:
            sink.send_changelog(topic, key or b"", value, timestamp, partition)
        producer.commit([], None)
        assert sink.sent == len(changelog)
        if sender is not None:
            assert sender.sent == len(changelog)
        acknowledged = {
            partition: offset for (t, partition), offset in producer.acknowledged.items() if t == topic
        }
        results[native] = (landed(kafka_bootstrap, topic), acknowledged)
        producer.close()
    python, native_result = results[False], results[True]
    assert len(python[0]) == len(RECORDS) and python[1]
    assert native_result == python


def test_a_full_queue_waits_and_keeps_the_order_as_the_python_path_does(kafka_bootstrap, kafka_topics):
    topic = kafka_topics("sink-full-queue")
    # room for 2 records: most sends find the queue full and wait through the Python send
    producer, sink, sender = collector(
        kafka_bootstrap, False, True, **{"queue.buffering.max.messages": 2, "linger.ms": 50}
    )
    assert sender is not None
    for i in range(30):
        sink.send(topic, b"k", b"%d" % i, None, 1_000 + i, None)
    producer.flush()
    assert 0 < sender.sent < 30  # some went natively, some waited on the Python path
    values = [m.value() for m in read_topic(kafka_bootstrap, topic, expected=30, timeout=20)]
    assert values == [b"%d" % i for i in range(30)]
    producer.close()


@pytest.mark.parametrize("native", [False, True], ids=["python", "native"])
def test_a_record_over_the_producer_limit_raises_the_same_error(kafka_bootstrap, kafka_topics, native):
    topic = kafka_topics("sink-too-large")
    producer, sink, sender = collector(kafka_bootstrap, False, native, **{"message.max.bytes": 1000})
    with pytest.raises(ProductionError, match=f"cannot produce to '{topic}'.*MSG_SIZE_TOO_LARGE"):
        sink.send(topic, b"big", b"x" * 4096, None, 1_000, None)
    sink.send(topic, b"small", b"v", None, 1_000, None)
    producer.flush()
    assert [m.key() for m in read_topic(kafka_bootstrap, topic, expected=1, timeout=10)] == [b"small"]
    if sender is not None:
        assert sender.sent == 1
    producer.close()


@pytest.mark.parametrize("native", [False, True], ids=["python", "native"])
def test_an_unknown_topic_fails_as_the_python_path_does(kafka_bootstrap, kafka_topics, native):
    """The broker creates no topic: the first record fails in its delivery report, which reaches the
    collector's error callback (through the core's per-message state on the native path); once
    librdkafka knows the topic is missing, the next produce fails at once, raised by the Python send."""
    missing = f"{kafka_topics('present')}-missing"
    producer, sink, sender = collector(
        kafka_bootstrap,
        False,
        native,
        **{"topic.metadata.propagation.max.ms": 10, "message.timeout.ms": 5000},
    )
    sink.send(missing, b"k", b"v", None, 1_000, None)
    with pytest.raises(ProductionError, match=f"producing to '{missing}' failed"):
        producer.flush()
    with pytest.raises(ProductionError, match=f"'{missing}'"):
        sink.send(missing, b"k", b"v", None, 1_000, None)
        producer.flush()
    if sender is not None:
        assert sender.sent == 1  # the first went natively; the second was refused and raised in Python
    producer.close()
