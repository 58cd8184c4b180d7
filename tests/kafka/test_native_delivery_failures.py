"""At at_least_once the native send produces sink and repartition records with no delivery state, and
their failed deliveries reach the production handler through the native core's librdkafka plugin
(runtime/native/src/delivery_failures.rs: an `on_acknowledgement` interceptor): once each, with the
record's topic, partition, key, value and error, and never twice for a record that went through
confluent-kafka's `produce` (whose own report serves it) or that librdkafka refused inside the send.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaError

from kappaflow.api.errors import HandlerResponse
from kappaflow.api.record import Headers
from kappaflow.clients.admin import InternalTopicManager
from kappaflow.clients.kafka import KafkaRecordCollector, ProductionError
from kappaflow.runner.native_produce import failure_plugin, native_send
from kappaflow.runner.producer import StreamsProducer
from tests.kafka.streams_support import read_topic
from tests.native_support import require_native_core

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]


def _wired(bootstrap: str, handler: Any) -> tuple[StreamsProducer, KafkaRecordCollector, Any]:
    """The stream thread's at_least_once producer, collector and native send, wired as assembly.py does."""
    core = require_native_core()
    plugin = failure_plugin(core)
    assert plugin is not None, "the core's failure plugin was refused (see the log)"
    settings = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"}
    producer = StreamsProducer(settings, False, handler, api_timeout_s=30, failure_plugin=plugin)
    assert producer.reports_failures_natively
    collector = KafkaRecordCollector(producer, InternalTopicManager({"bootstrap.servers": bootstrap}))
    sender = native_send(core, producer, collector.send, None)  # no delivery state per record
    assert sender is not None
    collector.use_native(sender)
    return producer, collector, sender


def test_a_failed_native_delivery_reaches_the_handler_once_with_its_record(kafka_bootstrap, kafka_topics):
    sink = kafka_topics("sink", partitions=2, config={"max.message.bytes": "1024"})
    handled: list[tuple[Any, ...]] = []

    def drop(err: Any, msg: Any) -> HandlerResponse:
        record = (msg.topic(), msg.partition(), msg.key(), msg.value(), msg.headers(), msg.timestamp())
        handled.append((err.code(), str(err), *record))
        return HandlerResponse.CONTINUE

    producer, collector, sender = _wired(kafka_bootstrap, drop)
    collector.send(sink, b"big", b"x" * 4096, None, 1000, 1)  # over the topic's max.message.bytes
    producer.flush()  # flushed alone: the broker rejects a whole batch holding it
    assert sender.sent == 1  # it went natively: no confluent-kafka report could have carried it
    too_large = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)  # what confluent-kafka's report carries
    assert handled == [
        (too_large.code(), str(too_large), sink, 1, b"big", b"x" * 4096, None, (TIMESTAMP_NOT_AVAILABLE, -1))
    ]

    # a record through confluent-kafka's produce (headers) keeps its own report: handled once, not twice
    collector.send(sink, b"big-h", b"y" * 4096, Headers([("h", b"1")]), 1000, 0)
    producer.flush()
    assert sender.sent == 1
    assert [h[4] for h in handled] == [b"big", b"big-h"]
    # the same report both ways (confluent-kafka's Message of a failed record has no timestamp either)
    assert handled[1][:4] == (too_large.code(), str(too_large), sink, 0)
    assert handled[1][6:] == handled[0][6:] == (None, (TIMESTAMP_NOT_AVAILABLE, -1))

    for i in range(50):  # delivered records report nothing
        collector.send(sink, b"k%d" % i, b"v", None, 1000 + i, None)
    producer.flush()
    assert len(handled) == 2
    assert len(read_topic(kafka_bootstrap, sink, expected=50, timeout=20)) == 50
    producer.close()


def test_a_failed_native_delivery_fails_the_flush_naming_the_topic(kafka_bootstrap, kafka_topics):
    sink = kafka_topics("sink", config={"max.message.bytes": "1024"})
    producer, collector, _ = _wired(kafka_bootstrap, None)
    collector.send(sink, b"big", b"x" * 4096, None, 1000, None)
    with pytest.raises(ProductionError, match=sink):
        producer.flush()
    producer.flush()  # raised once: nothing else failed
    producer.close()


def test_a_record_librdkafka_refuses_inside_the_send_is_not_reported_as_a_delivery(
    kafka_bootstrap, kafka_topics
):
    """librdkafka calls `on_acknowledgement` inside `rd_kafka_producev` for a message its partitioner
    refuses (a partition the topic does not have); the native send then hands the record to the Python
    send, whose produce raises. The interceptor must not keep that refusal as a failed delivery too."""
    sink = kafka_topics("sink", partitions=1)
    handled: list[Any] = []
    producer, collector, sender = _wired(kafka_bootstrap, lambda err, msg: handled.append(err))
    collector.send(sink, b"k", b"v", None, 1000, None)
    producer.flush()  # the producer now knows the topic has one partition
    with pytest.raises(ProductionError):
        collector.send(sink, b"k", b"v", None, 1000, 5)
    producer.flush()
    assert handled == []
    assert sender.sent == 1
    producer.close()
