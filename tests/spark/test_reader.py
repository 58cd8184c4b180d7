"""The kafka-client reader's ranges, native and accessor loops alike: every record of [start, end) in
offset order, and an end under transaction markers reached (read_committed never delivers the markers,
so only the partition's end says the range is done)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

from kappaflow.spark.reader import read_range

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]


@pytest.mark.parametrize("native", [True, False])
def test_a_range_under_transaction_markers_reads_every_record_and_ends(kafka_bootstrap, kafka_topics, native):
    topic = kafka_topics(f"reader-{uuid.uuid4().hex[:6]}", partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"reader-{uuid.uuid4()}"})
    producer.init_transactions(30)
    for batch in range(3):  # each transaction ends in a commit marker: the range's last offset is one
        producer.begin_transaction()
        for i in range(5):
            producer.produce(topic, key=b"k%d" % i, value=b"%d-%d" % (batch, i), partition=0)
        producer.commit_transaction(30)
    settings = {
        "bootstrap.servers": kafka_bootstrap,
        "group.id": "reader-test",
        "isolation.level": "read_committed",
    }
    records = read_range(settings, topic, 0, 0, 18, native)  # 15 records, 3 markers
    assert [r[3] for r in records] == [b"%d-%d" % (b, i) for b in range(3) for i in range(5)]
    assert [r[0] for r in records] == sorted(r[0] for r in records)
    middle = read_range(settings, topic, 0, 6, 11, native)  # a range cut inside the log
    assert [r[0] for r in middle] == [6, 7, 8, 9, 10] and middle[0][3] == b"1-0"


@pytest.mark.parametrize("native", [True, False])
def test_records_larger_than_a_fetch_are_read_whole(kafka_bootstrap, kafka_topics, native):
    """The reader fetches 256 KiB at a time into a 1 MiB queue: a record batch larger than both still
    arrives whole (Kafka returns the first batch of a fetch whatever its size), so large records read."""
    topic = kafka_topics(f"reader-large-{uuid.uuid4().hex[:6]}", partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 50})
    values = [bytes([i]) * (600 * 1024 if i % 2 else 10) for i in range(12)]
    for value in values:
        producer.produce(topic, key=b"k", value=value, partition=0)
    assert producer.flush(30) == 0
    settings = {"bootstrap.servers": kafka_bootstrap, "group.id": "reader-test"}
    records = read_range(settings, topic, 0, 0, 12, native)
    assert [r[3] for r in records] == values
    tail = read_range(settings, topic, 0, 5, 9, native)
    assert [r[0] for r in tail] == [5, 6, 7, 8] and tail[0][3] == values[5]
