"""KIP-1065: the production exception handler may answer RETRY. A delivery that fails with a retriable
error (here librdkafka's message timeout, Java's TimeoutException) is retried by redoing the work since
the last commit: the task is rewound to its committed offset, processes the record again and sends it
again, so the handler sees the same record a second time (here it then answers CONTINUE)."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest

from kappaflow import HandlerResponse, StreamsBuilder, serdes
from kappaflow.runner import KafkaStreams
from tests.kafka.streams_support import fast_config, produce, wait_running

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]


def test_retry_rewinds_the_task_and_sends_the_failed_record_again(kafka_bootstrap, kafka_topics, tmp_path):
    source = kafka_topics("retry-in")
    sink = kafka_topics("retry-out")
    seen: list[tuple[str, bytes | None, bytes | None]] = []
    lock = threading.Lock()

    def handler(error: BaseException, record: Any) -> HandlerResponse:
        with lock:
            seen.append((record.topic, record.key, record.value))
            return HandlerResponse.RETRY if len(seen) == 1 else HandlerResponse.CONTINUE

    builder = StreamsBuilder()
    stream = builder.stream(source, key_serde=serdes.String(), value_serde=serdes.String())
    stream.map_values(str.upper).to(sink, key_serde=serdes.String(), value_serde=serdes.String())
    config = fast_config(
        kafka_bootstrap,
        f"retry-{uuid.uuid4().hex[:8]}",
        str(tmp_path),
        **{
            "production.exception.handler": handler,
            # every delivery times out before the broker can answer: a retriable failure
            "producer.linger.ms": 0,
            "producer.message.timeout.ms": 1,
        },
    )
    app = KafkaStreams(builder.build(), config)
    app.start()
    try:
        wait_running(app)
        produce(kafka_bootstrap, source, [(b"k", b"hello")])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with lock:
                if len(seen) >= 2:
                    break
            time.sleep(0.05)
        with lock:
            assert seen[:2] == [(sink, b"k", b"HELLO"), (sink, b"k", b"HELLO")], seen
        assert app.metrics.counter("task-rewinds-total") >= 1  # redone from the committed offset
        assert app.state.name == "RUNNING"
    finally:
        app.close(30)


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
