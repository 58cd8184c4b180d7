"""The record collector against the real broker: which delivery reports it keeps, and that none is lost.

Changelog records report their acknowledged offsets (a commit checkpoints them). Every other record
(sinks, repartition topics) reports only a failure at at_least_once, through a producer of its own, and
nothing under exactly_once_v2, where the transaction's commit reports it. A rejected record must surface
either way: on flush, to the production handler, or as a commit that fails and leaves nothing of the
transaction visible.
"""

from __future__ import annotations

from typing import Any

import pytest

from kappaflow.api.errors import HandlerResponse, TransactionAbortedError
from kappaflow.api.record import Headers
from kappaflow.clients.admin import InternalTopicManager
from kappaflow.clients.kafka import KafkaRecordCollector, ProductionError
from kappaflow.runner.native_produce import failure_plugin, native_send
from kappaflow.runner.producer import StreamsProducer
from tests.kafka.streams_support import read_topic
from tests.native_support import require_native_core

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]


def _producer(
    bootstrap: str, exactly_once: bool, handler: Any = None, txn: str = "", native: bool | str = False
) -> tuple[StreamsProducer, KafkaRecordCollector]:
    """`native`: sink, repartition and changelog records through the native core's sends (produce.rs),
    dead letters as before; "plugin": at at_least_once, the sink and repartition records with no
    delivery state, their failures through the core's librdkafka plugin (delivery_failures.rs), as the
    stream thread's assembly wires them."""
    settings: dict[str, Any] = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"}
    if exactly_once:
        settings["transactional.id"] = txn
    admin = InternalTopicManager({"bootstrap.servers": bootstrap})
    plugin = failure_plugin(require_native_core()) if native == "plugin" else None
    producer = StreamsProducer(settings, exactly_once, handler, api_timeout_s=30, failure_plugin=plugin)
    collector = KafkaRecordCollector(producer, admin)
    if native:
        on_error = None if producer.reports_failures_natively else collector.report_error
        assert producer.reports_failures_natively == (plugin is not None and not exactly_once)
        sender = native_send(require_native_core(), producer, collector.send, on_error)
        assert sender is not None
        collector.use_native(sender)
        changelog = native_send(
            require_native_core(),
            producer,
            collector.send_changelog,
            collector.report_offset,
            "changelog_producer",
        )
        assert changelog is not None
        collector.use_native_changelog(changelog)
    return producer, collector


both_paths = pytest.mark.parametrize("native", [False, True], ids=["python", "native"])
# at at_least_once the native send's failures may also come through the core's plugin
at_least_once_paths = pytest.mark.parametrize(
    "native", [False, True, "plugin"], ids=["python", "native", "native-plugin"]
)


@at_least_once_paths
def test_at_least_once_tracks_changelog_offsets_only_and_a_rejected_record_fails_the_flush(
    kafka_bootstrap, kafka_topics, native
):
    changelog = kafka_topics("changelog", partitions=2)
    sink = kafka_topics("sink", partitions=2, config={"max.message.bytes": "1024"})
    producer, collector = _producer(kafka_bootstrap, exactly_once=False, native=native)
    for i in range(3):
        collector.send_changelog(changelog, b"k%d" % i, b"v", 1000 + i, 1)
    collector.send(sink, b"small", b"v", None, 1000, None)
    collector.send(sink, b"chosen", b"v", Headers([("h", b"1")]), 1000, 1)  # a StreamPartitioner's pick
    producer.flush()
    # the third record on changelog partition 1 has offset 2; sink partitions are not tracked
    assert producer.acknowledged == {(changelog, 1): 2}
    assert [m.value() for m in read_topic(kafka_bootstrap, sink, expected=2, timeout=10)] == [b"v", b"v"]

    collector.send(sink, b"big", b"x" * 4096, None, 1000, None)  # over the topic's max.message.bytes
    with pytest.raises(ProductionError, match=sink):
        producer.flush()
    big_changelog = kafka_topics("changelog-small", config={"max.message.bytes": "1024"})
    collector.send_changelog(big_changelog, b"big", b"x" * 4096, 1000, 0)
    with pytest.raises(ProductionError, match=big_changelog):
        producer.flush()
    producer.close()


@at_least_once_paths
def test_at_least_once_hands_a_rejected_record_to_the_production_handler(
    kafka_bootstrap, kafka_topics, native
):
    sink = kafka_topics("sink", config={"max.message.bytes": "1024"})
    handled: list[tuple[str, bytes]] = []

    def drop(err: Any, msg: Any) -> HandlerResponse:
        handled.append((msg.topic(), msg.key()))
        return HandlerResponse.CONTINUE  # the record is dropped, the flush succeeds

    producer, collector = _producer(kafka_bootstrap, exactly_once=False, handler=drop, native=native)
    collector.send(sink, b"big", b"x" * 4096, None, 1000, None)
    producer.flush()  # (flushed alone: the broker rejects a whole batch holding it)
    collector.send(sink, b"small", b"v", None, 1000, None)
    producer.flush()
    assert handled == [(sink, b"big")]
    assert [m.key() for m in read_topic(kafka_bootstrap, sink, expected=1, timeout=10)] == [b"small"]
    producer.close()


@both_paths
def test_a_rejected_sink_record_in_a_transaction_fails_the_commit_and_nothing_of_it_is_read(
    kafka_bootstrap, kafka_topics, native
):
    changelog = kafka_topics("changelog", partitions=2)
    sink = kafka_topics("sink", config={"max.message.bytes": "1024"})
    producer, collector = _producer(
        kafka_bootstrap, exactly_once=True, txn=f"collector-{sink}", native=native
    )
    producer.begin()
    for i in range(3):
        collector.send_changelog(changelog, b"k%d" % i, b"v", 1000 + i, 1)
    collector.send(sink, b"small", b"committed", None, 1000, None)
    producer.commit([], None)
    assert producer.acknowledged == {(changelog, 1): 2}  # changelog offsets are reported in a transaction

    producer.begin()
    collector.send(sink, b"small", b"aborted", None, 1000, None)
    collector.send(sink, b"big", b"x" * 4096, None, 1000, None)  # over max.message.bytes
    with pytest.raises(TransactionAbortedError, match=sink):
        producer.commit([], None)
    producer.abort()
    values = [
        m.value() for m in read_topic(kafka_bootstrap, sink, expected=1, timeout=10, committed_only=True)
    ]
    assert values == [b"committed"]
    producer.close()
