"""KafkaRecordCollector against the real broker: which delivery reports it keeps, and that none is lost.

Records the producer's partitioner places (sinks, repartition topics) get an error-only delivery report,
or none under exactly_once_v2, where the transaction's commit reports them; records sent to a chosen
partition (changelogs) also record their acknowledged offset. A rejected record must surface either way:
on flush, or as a commit that fails and leaves nothing of the transaction visible.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from kappaflow.api.errors import TransactionAbortedError
from kappaflow.clients.admin import InternalTopicManager
from kappaflow.clients.kafka import KafkaRecordCollector, ProductionError
from kappaflow.runner.producer import StreamsProducer
from tests.kafka.streams_support import read_topic

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]


def _collector(bootstrap: str) -> KafkaRecordCollector:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    return KafkaRecordCollector(producer, metadata_source=None)


def test_changelog_offsets_are_tracked_and_a_rejected_sink_record_fails_the_flush(
    kafka_bootstrap, kafka_topics
):
    changelog = kafka_topics("changelog", partitions=2)
    sink = kafka_topics("sink", config={"max.message.bytes": "1024"})
    collector = _collector(kafka_bootstrap)
    for i in range(3):
        collector.send(changelog, b"k%d" % i, b"v", None, 1000 + i, 1)
    collector.send(sink, b"small", b"v", None, 1000, None)
    collector.flush(30)
    assert collector.written == {(changelog, 1): 2}  # the third record on partition 1: offset 2

    collector.send(sink, b"big", b"x" * 4096, None, 1000, None)  # over the topic's max.message.bytes
    with pytest.raises(ProductionError, match=sink):
        collector.flush(30)


def test_a_rejected_sink_record_in_a_transaction_fails_the_commit_and_nothing_of_it_is_read(
    kafka_bootstrap, kafka_topics
):
    changelog = kafka_topics("changelog", partitions=2)
    sink = kafka_topics("sink", config={"max.message.bytes": "1024"})
    settings = {"bootstrap.servers": kafka_bootstrap, "transactional.id": f"collector-{sink}"}
    producer = StreamsProducer(
        settings, True, InternalTopicManager({"bootstrap.servers": kafka_bootstrap}), None, 30
    )
    producer.begin()
    for i in range(3):
        producer.collector.send(changelog, b"k%d" % i, b"v", None, 1000 + i, 1)
    producer.collector.send(sink, b"small", b"committed", None, 1000, None)
    producer.commit([], None)
    assert producer.acknowledged == {(changelog, 1): 2}  # changelog offsets are reported in a transaction

    producer.begin()
    producer.collector.send(sink, b"small", b"aborted", None, 1000, None)
    producer.collector.send(sink, b"big", b"x" * 4096, None, 1000, None)  # over max.message.bytes
    with pytest.raises(TransactionAbortedError, match=sink):
        producer.commit([], None)
    producer.abort()
    values = [
        m.value() for m in read_topic(kafka_bootstrap, sink, expected=1, timeout=10, committed_only=True)
    ]
    assert values == [b"committed"]
    producer.close()
