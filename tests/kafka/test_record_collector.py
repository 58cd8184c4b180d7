"""KafkaRecordCollector against the real broker: which delivery reports it keeps, and that none is lost.

Records the producer's partitioner places (sinks, repartition topics) get an error-only delivery report;
records sent to a chosen partition (changelogs) also record their acknowledged offset. A rejected record
must surface on flush either way.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from kappaflow.clients.kafka import KafkaRecordCollector, ProductionError

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
