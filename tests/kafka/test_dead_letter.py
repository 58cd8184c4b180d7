"""Poison records go to the dead-letter topic with their bytes, headers and the error; processing goes on."""

from __future__ import annotations

import struct
import time
import uuid

import pytest
from confluent_kafka import Producer

from kappaflow import StreamsBuilder, serdes
from kappaflow.runner import KafkaStreams
from tests.kafka.streams_support import fast_config, read_topic, wait_running

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]


def doubling(source: str, sink: str):
    def double(value: int) -> int:
        if value == 13:
            raise ValueError("unlucky number")
        return value * 2

    builder = StreamsBuilder()
    stream = builder.stream(source, key_serde=serdes.String(), value_serde=serdes.Long())
    stream.map_values(double).to(sink, key_serde=serdes.String(), value_serde=serdes.Long())
    return builder.build()


def test_poison_records_land_in_the_dead_letter_topic(kafka_bootstrap, kafka_topics, tmp_path):
    source = kafka_topics("dlq-in")
    sink = kafka_topics("dlq-out")
    dead = kafka_topics("dlq-dead")
    config = fast_config(
        kafka_bootstrap,
        f"dlq-{uuid.uuid4().hex[:8]}",
        str(tmp_path),
        **{
            "default.deserialization.exception.handler": "log_and_continue",
            "processing.exception.handler": "log_and_continue",
            "errors.dead.letter.queue.topic.name": dead,
        },
    )
    app = KafkaStreams(doubling(source, sink), config)
    app.start()
    try:
        wait_running(app)
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        long = struct.Struct(">q").pack
        producer.produce(source, key=b"a", value=long(1))
        producer.produce(source, key=b"poison", value=b"not a long", headers=[("trace", b"abc")])
        producer.produce(source, key=b"b", value=long(13))
        producer.produce(source, key=b"c", value=long(2))
        assert producer.flush(10) == 0
        out = read_topic(kafka_bootstrap, sink, expected=2, timeout=30)
        assert [(m.key(), struct.unpack(">q", m.value())[0]) for m in out] == [(b"a", 2), (b"c", 4)]
        dlq = read_topic(kafka_bootstrap, dead, expected=2, timeout=30)
    finally:
        app.close(30)
    assert [(m.key(), m.value()) for m in dlq] == [(b"poison", b"not a long"), (b"b", long(13))]
    first = dict(dlq[0].headers())
    assert first["trace"] == b"abc"
    assert first["__kappaflow.error.class"] == b"DeserializationError"
    assert first["__kappaflow.source.topic"] == source.encode()
    assert first["__kappaflow.source.offset"] == b"1"
    second = dict(dlq[1].headers())
    assert second["__kappaflow.error.class"] == b"ProcessingError"
    assert b"unlucky number" in second["__kappaflow.error.message"]
    assert app.metrics.counter("dropped-records-total") == 2
    assert app.metrics.counter("dead-letter-records-total", topic=dead) == 2


def test_a_dead_letter_that_could_not_be_written_is_not_counted(kafka_bootstrap, kafka_topics, tmp_path):
    """The dead-letter topic disappears while the app runs: the poison record's dead letter fails (the
    production handler drops it), and the dead-letter counter, which counts writes, stays at 0."""
    from confluent_kafka.admin import AdminClient

    source = kafka_topics("dlq-gone-in")
    sink = kafka_topics("dlq-gone-out")
    dead = kafka_topics("dlq-gone-dead")
    config = fast_config(
        kafka_bootstrap,
        f"dlq-gone-{uuid.uuid4().hex[:8]}",
        str(tmp_path),
        **{
            "processing.exception.handler": "log_and_continue",
            "production.exception.handler": "log_and_continue",
            "errors.dead.letter.queue.topic.name": dead,
            "producer.message.timeout.ms": 3000,
        },
    )
    app = KafkaStreams(doubling(source, sink), config)
    app.start()
    try:
        wait_running(app)
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        admin.delete_topics([dead])[dead].result(30)
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        producer.produce(source, key=b"b", value=struct.pack(">q", 13))
        producer.produce(source, key=b"c", value=struct.pack(">q", 2))
        assert producer.flush(10) == 0
        out = read_topic(kafka_bootstrap, sink, expected=1, timeout=30)
        assert [m.key() for m in out] == [b"c"]
        deadline = time.monotonic() + 30  # the dead letter's delivery fails after message.timeout.ms
        while app.metrics.counter("dropped-records-total") < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(5)  # past the delivery timeout and a few commits
    finally:
        app.close(30)
    assert app.metrics.counter("dropped-records-total") == 1
    assert app.metrics.counter("dead-letter-records-total", topic=dead) == 0


def test_uncaught_processing_error_reaches_the_handler_and_stops_the_client(
    kafka_bootstrap, kafka_topics, tmp_path
):
    from kappaflow import ProcessingError
    from kappaflow.runner import State, StreamThreadExceptionResponse

    source = kafka_topics("fail-in")
    sink = kafka_topics("fail-out")
    app = KafkaStreams(
        doubling(source, sink), fast_config(kafka_bootstrap, f"fail-{uuid.uuid4().hex[:8]}", str(tmp_path))
    )
    seen: list[BaseException] = []

    def handler(error: BaseException) -> StreamThreadExceptionResponse:
        seen.append(error)
        return StreamThreadExceptionResponse.SHUTDOWN_CLIENT

    app.set_uncaught_exception_handler(handler)
    app.start()
    try:
        wait_running(app)
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        producer.produce(source, key=b"b", value=struct.pack(">q", 13))
        assert producer.flush(10) == 0
        assert app.wait_until(State.ERROR, 30)
        assert app.state is State.ERROR
    finally:
        app.close(30)
    assert len(seen) == 1 and isinstance(seen[0], ProcessingError)
    assert "unlucky number" in str(seen[0])
    assert app.state is State.NOT_RUNNING


def test_shutdown_application_stops_every_instance_and_a_restart_runs_again(
    kafka_bootstrap, kafka_topics, tmp_path
):
    """SHUTDOWN_APPLICATION from the instance that failed reaches the other one (through the member-less
    `<app>-shutdown` group): both end in ERROR. An instance started afterwards is not stopped by it."""
    from kappaflow.runner import State, StreamThreadExceptionResponse
    from kappaflow.runner.app_shutdown import WATCH_INTERVAL_S

    source = kafka_topics("app-stop-in", partitions=2)
    sink = kafka_topics("app-stop-out", partitions=2)
    app_id = f"app-stop-{uuid.uuid4().hex[:8]}"

    def instance(name: str, **extra: str) -> KafkaStreams:
        config = fast_config(kafka_bootstrap, app_id, str(tmp_path / name), **{"client.id": name, **extra})
        app = KafkaStreams(doubling(source, sink), config)
        app.set_uncaught_exception_handler(lambda error: StreamThreadExceptionResponse.SHUTDOWN_APPLICATION)
        return app

    # Static members with a session longer than the signal takes: the failed instance's partitions stay
    # with it, so the other one stops because of the signal, not by inheriting the poison record.
    static = {"consumer.session.timeout.ms": "12000"}
    first = instance("one", **{"group.instance.id": "one", **static})
    second = instance("two", **{"group.instance.id": "two", **static})
    first.start()
    second.start()
    try:
        wait_running(first, second)
        producer = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random"})
        producer.produce(source, key=b"b", value=struct.pack(">q", 13))  # fails whichever owns its partition
        assert producer.flush(10) == 0
        assert first.wait_until(State.ERROR, 60)
        assert second.wait_until(State.ERROR, 60)
        messages = {str(first.error), str(second.error)}
        assert any("unlucky number" in m for m in messages)
        assert any("application shutdown requested by" in m for m in messages)
    finally:
        first.close(30)
        second.close(30)

    # the poison record was never committed: this instance drops it instead of failing on it again
    third = instance("three", **{"processing.exception.handler": "log_and_continue"})
    third.start()
    try:
        wait_running(third)
        producer.produce(source, key=b"a", value=struct.pack(">q", 2))
        assert producer.flush(10) == 0
        # partitions come to it once the stopped static members' sessions (12 s) expire
        out = read_topic(kafka_bootstrap, sink, expected=1, timeout=60)
        assert [struct.unpack(">q", m.value())[0] for m in out if m.key() == b"a"] == [4]
        time.sleep(2 * WATCH_INTERVAL_S + 1)
        assert third.state is State.RUNNING  # the earlier signal does not stop a new instance
    finally:
        third.close(30)
