"""KIP-1065: the production exception handler may answer RETRY. A delivery that fails with a retriable
error is retried by redoing the work since the last commit: the task is rewound to its committed offset,
processes the record again and sends it again."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from kappaflow import HandlerResponse, StreamsBuilder, serdes
from kappaflow.runner import KafkaStreams
from tests.kafka.streams_support import fast_config, produce, read_topic, wait_for, wait_running

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]


def test_retry_rewinds_the_task_and_sends_the_failed_record_again(kafka_bootstrap, kafka_topics, tmp_path):
    """The sink topic is deleted while the app runs: the record cannot be delivered (a retriable
    failure: the topic's metadata never comes), the handler creates the topic again and answers RETRY,
    the task rewinds to its committed offset and sends the record again, which arrives."""
    source = kafka_topics("retry-in")
    sink = kafka_topics("retry-out")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    seen: list[tuple[str, bytes | None, bool]] = []
    lock = threading.Lock()

    def handler(error: BaseException, record: Any) -> HandlerResponse:
        with lock:
            seen.append((record.topic, record.key, delivery_retriable_text(str(error))))
        for future in admin.create_topics([NewTopic(sink, num_partitions=1, replication_factor=1)]).values():
            future.result(10)
        return HandlerResponse.RETRY

    builder = StreamsBuilder()
    stream = builder.stream(source, key_serde=serdes.String(), value_serde=serdes.String())
    stream.map_values(str.upper).to(sink, key_serde=serdes.String(), value_serde=serdes.String())
    config = fast_config(
        kafka_bootstrap,
        f"retry-{uuid.uuid4().hex[:8]}",
        str(tmp_path),
        **{"production.exception.handler": handler, "producer.message.timeout.ms": 3000},
    )
    app = KafkaStreams(builder.build(), config)
    app.start()
    try:
        wait_running(app)
        for future in admin.delete_topics([sink]).values():
            future.result(10)
        wait_for(lambda: sink not in admin.list_topics(timeout=10).topics, 30, "the sink deleted")
        produce(kafka_bootstrap, source, [(b"k", b"hello")])
        out = read_topic(kafka_bootstrap, sink, expected=1, timeout=60)
        assert [(m.key(), m.value()) for m in out] == [(b"k", b"HELLO")]
        with lock:
            assert seen and seen[0][:2] == (sink, b"k"), seen
        assert app.metrics.counter("task-rewinds-total") >= 1  # redone from the committed offset
    finally:
        app.close(30)


def delivery_retriable_text(message: str) -> bool:
    return "timed out" in message or "Unknown topic" in message


def test_retry_of_a_non_retriable_failure_fails_like_fail() -> None:
    """Java treats RETRY for a non-retriable exception as FAIL: the delivery error is raised as such."""
    from confluent_kafka import KafkaError

    from kappaflow.api.errors import TaskCorruptedError
    from kappaflow.clients.kafka import DeliveryReports, ProductionError, delivery_retriable

    assert delivery_retriable(KafkaError(KafkaError._MSG_TIMED_OUT))
    assert not delivery_retriable(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))

    class Message:
        def topic(self) -> str:
            return "out"

    reports = DeliveryReports(lambda err, msg: HandlerResponse.RETRY)
    reports.on_delivery(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), Message())
    with pytest.raises(ProductionError, match="producing to 'out' failed") as failed:
        reports.raise_error()
    assert not isinstance(failed.value, TaskCorruptedError)
    reports.on_delivery(KafkaError(KafkaError._MSG_TIMED_OUT), Message())
    with pytest.raises(TaskCorruptedError, match="answered RETRY"):
        reports.raise_error()
