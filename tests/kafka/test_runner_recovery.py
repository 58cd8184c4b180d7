"""Recovery from client failures on the real broker: a fenced producer (whichever call sees it first), a
commit whose reply is lost after the broker took it, a static member fenced by another consumer with its
group.instance.id, a broker unreachable at start-up."""

from __future__ import annotations

import functools
import socket
import threading
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from kappaflow.api.errors import ProducerFencedError, TransactionAbortedError
from kappaflow.clients.admin import InternalTopicManager
from kappaflow.clients.kafka import KafkaRecordCollector
from kappaflow.runner import KafkaStreams, State, assembly
from kappaflow.runner.producer import StreamsProducer
from tests.kafka.streams_support import (
    assert_exact_counts,
    fast_config,
    produce_lines,
    read_topic,
    wait_committed,
    wait_for,
    wait_running,
    wordcount_topology,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(150)]


def test_a_producer_fenced_while_producing_is_replaced_and_its_records_never_seen(
    kafka_bootstrap, kafka_topics
):
    topic = kafka_topics("fenced-out")
    txn_id = f"fence-{uuid.uuid4().hex[:8]}"
    settings = {"bootstrap.servers": kafka_bootstrap, "transactional.id": txn_id, "linger.ms": 5}
    admin = InternalTopicManager({"bootstrap.servers": kafka_bootstrap})
    producer = StreamsProducer(settings, True, None, api_timeout_s=30)
    collector = KafkaRecordCollector(producer, admin)
    producer.begin()
    collector.send(topic, b"k", b"before-fence", None, -1, None)
    producer.flush()
    zombie_killer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": txn_id})
    zombie_killer.init_transactions(30)  # bumps the epoch: `producer` is now a zombie
    with pytest.raises(ProducerFencedError):
        for _ in range(200):  # the fence surfaces on a send, a flush or the commit, whichever is first
            collector.send(topic, b"k", b"after-fence", None, -1, None)
            producer.flush()
        producer.commit([], None)
    producer.replace()  # takes the epoch back from zombie_killer
    producer.begin()
    collector.send(topic, b"k", b"committed", None, -1, None)
    producer.commit([], None)
    values = [
        m.value() for m in read_topic(kafka_bootstrap, topic, expected=1, timeout=10, committed_only=True)
    ]
    assert values == [b"committed"]
    producer.close()


class OffsetsReplyLostProducer(Producer):  # type: ignore[misc]
    """A real transactional producer whose send_offsets_to_transaction reaches the broker and then reports
    a timeout, on every attempt: a call resumed (runner/producer.py `_resumed`) until the API timeout and
    still unanswered, its TxnOffsetCommit possibly still under way."""

    def send_offsets_to_transaction(self, *args: Any) -> None:
        super().send_offsets_to_transaction(*args)
        raise KafkaException(
            KafkaError(KafkaError._TIMED_OUT, "injected: adding the offsets timed out", retriable=True)
        )


def transactional_pair(
    bootstrap: str, group: str, factory: Any, linger_ms: int, api_timeout_s: float = 30
) -> tuple[StreamsProducer, KafkaRecordCollector, Consumer]:
    """A StreamsProducer (transactional id `group`, clients made by `factory`), the record collector over
    it and a read_committed consumer of the same group, whose metadata its commits carry."""
    settings = {"bootstrap.servers": bootstrap, "transactional.id": group, "linger.ms": linger_ms}
    admin = InternalTopicManager({"bootstrap.servers": bootstrap})
    producer = StreamsProducer(settings, True, None, api_timeout_s=api_timeout_s, factory=factory)
    collector = KafkaRecordCollector(producer, admin)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed"}
    )
    return producer, collector, consumer


def test_a_transaction_whose_offsets_call_failed_is_aborted_under_a_new_epoch(kafka_bootstrap, kafka_topics):
    """An EndTxn abort after a failed offsets call can leave a hanging transaction (a late TxnOffsetCommit
    after the abort's markers blocks every read_committed offset fetch of the group): such a transaction is
    aborted by re-initializing the producer. One whose calls all succeeded is aborted with an EndTxn."""
    topic = kafka_topics("offsets-failed-out")
    group = f"offsets-failed-{uuid.uuid4().hex[:8]}"
    producer, collector, consumer = transactional_pair(
        kafka_bootstrap, group, OffsetsReplyLostProducer, linger_ms=5, api_timeout_s=3
    )
    try:
        producer.begin()
        collector.send(topic, b"k", b"aborted-by-endtxn", None, -1, None)
        producer.flush()
        healthy = producer.producer
        producer.abort()
        assert producer.producer is healthy  # every call succeeded: a plain EndTxn

        producer.begin()
        collector.send(topic, b"k", b"aborted-by-new-epoch", None, -1, None)
        # the injected timeout, or, when the last resumed attempt had only milliseconds of the budget left,
        # librdkafka's own: either way the call timed out with its outcome unknown
        with pytest.raises(TransactionAbortedError, match="adding offsets to the transaction: .*_TIMED_OUT"):
            producer.commit([TopicPartition(topic, 0, 5)], consumer.consumer_group_metadata())
        producer.abort()
        assert producer.producer is not healthy  # re-initialized: the coordinator aborted it
        # the group's offsets are settled (the fetch waits for pending ones) and not the aborted ones
        [committed] = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        assert committed.offset < 0

        producer.begin()
        collector.send(topic, b"k", b"committed", None, -1, None)
        producer.commit([], None)
        values = [
            m.value() for m in read_topic(kafka_bootstrap, topic, expected=1, timeout=10, committed_only=True)
        ]
        assert values == [b"committed"]
    finally:
        consumer.close()
        producer.close()


class InFlightAtOffsetsProducer(Producer):  # type: ignore[misc]
    """A real transactional producer that notes how many of its records were still unacknowledged when
    the transaction's offsets were added."""

    in_flight_at_offsets: list[int] = []

    def send_offsets_to_transaction(self, *args: Any) -> None:
        self.in_flight_at_offsets.append(len(self))
        super().send_offsets_to_transaction(*args)


def test_the_offsets_are_added_while_the_records_are_still_in_flight(kafka_bootstrap, kafka_topics):
    """The commit adds the offsets before it waits for the records' acknowledgements, so the two overlap
    (runner/producer.py `commit`); the records and the offsets still commit together."""
    topic = kafka_topics("offsets-first-out")
    group = f"offsets-first-{uuid.uuid4().hex[:8]}"
    # a long linger holds the records in the client until something flushes them
    producer, collector, consumer = transactional_pair(
        kafka_bootstrap, group, InFlightAtOffsetsProducer, linger_ms=2000
    )
    InFlightAtOffsetsProducer.in_flight_at_offsets.clear()
    try:
        producer.begin()
        for i in range(3):
            collector.send(topic, b"k", f"v{i}".encode(), None, -1, None)
        producer.commit([TopicPartition(topic, 0, 7)], consumer.consumer_group_metadata())
        assert InFlightAtOffsetsProducer.in_flight_at_offsets == [3]
        assert len(producer.producer) == 0  # committed: acknowledged by then
        values = [
            m.value() for m in read_topic(kafka_bootstrap, topic, expected=3, timeout=10, committed_only=True)
        ]
        assert values == [b"v0", b"v1", b"v2"]
        [committed] = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        assert committed.offset == 7
    finally:
        consumer.close()
        producer.close()


class SlowOffsetsProducer(Producer):  # type: ignore[misc]
    """A real transactional producer whose send_offsets_to_transaction waits until `STORES_FLUSHED` is
    set before going to the broker: a commit that ran the stores' flush after the offsets call could not
    get past it."""

    stores_flushed = threading.Event()

    def send_offsets_to_transaction(self, *args: Any) -> None:
        assert self.stores_flushed.wait(20), "the stores were not flushed while the offsets were being added"
        super().send_offsets_to_transaction(*args)


def test_the_stores_flush_into_the_transaction_while_its_offsets_are_added(kafka_bootstrap, kafka_topics):
    """The commit starts adding the offsets, then flushes the stores (which produce into the transaction)
    while that call is in flight; records and offsets commit together. A store flush that fails is the
    error raised once the offsets call has returned, and the transaction aborts with nothing visible."""
    topic = kafka_topics("flush-during-offsets-out")
    group = f"flush-during-offsets-{uuid.uuid4().hex[:8]}"
    producer, collector, consumer = transactional_pair(
        kafka_bootstrap, group, SlowOffsetsProducer, linger_ms=5
    )

    def flush_stores(values: list[bytes]) -> None:
        for value in values:
            collector.send(topic, b"k", value, None, -1, None)
        SlowOffsetsProducer.stores_flushed.set()

    try:
        SlowOffsetsProducer.stores_flushed.clear()
        producer.begin()
        collector.send(topic, b"k", b"processed", None, -1, None)
        tps = [TopicPartition(topic, 0, 4)]
        producer.commit(tps, consumer.consumer_group_metadata(), lambda: flush_stores([b"flushed"]))
        values = [
            m.value() for m in read_topic(kafka_bootstrap, topic, expected=2, timeout=10, committed_only=True)
        ]
        assert values == [b"processed", b"flushed"]
        [committed] = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        assert committed.offset == 4

        SlowOffsetsProducer.stores_flushed.clear()

        def failing_flush() -> None:
            flush_stores([b"half-flushed"])
            raise ValueError("a store flush failed")

        producer.begin()
        with pytest.raises(ValueError, match="a store flush failed"):
            producer.commit([TopicPartition(topic, 0, 9)], consumer.consumer_group_metadata(), failing_flush)
        healthy = producer.producer
        producer.abort()
        assert producer.producer is healthy  # the offsets call succeeded: a plain EndTxn abort
        producer.begin()
        collector.send(topic, b"k", b"after", None, -1, None)
        producer.commit([], None)
        values = [
            m.value() for m in read_topic(kafka_bootstrap, topic, expected=3, timeout=10, committed_only=True)
        ]
        assert values == [b"processed", b"flushed", b"after"]
        [committed] = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        assert committed.offset == 4  # the aborted transaction's offsets are not the group's
    finally:
        consumer.close()
        producer.close()


LOSE_NEXT_COMMIT_REPLY = threading.Event()


class LostCommitReplyProducer(Producer):  # type: ignore[misc]
    """A real transactional producer whose commit, once `LOSE_NEXT_COMMIT_REPLY` is set, completes on the
    broker and then reports a timeout: the commit's reply lost, its outcome unknown to the caller."""

    def commit_transaction(self, *args: Any) -> None:
        super().commit_transaction(*args)
        if LOSE_NEXT_COMMIT_REPLY.is_set():
            LOSE_NEXT_COMMIT_REPLY.clear()
            raise KafkaException(
                KafkaError(KafkaError._TIMED_OUT, "injected: the commit's reply was lost", retriable=True)
            )


def test_a_commit_whose_reply_was_lost_is_not_redone(kafka_bootstrap, kafka_topics, tmp_path, monkeypatch):
    """The thread cannot tell a lost commit reply from a failed commit: it drops its work and replaces the
    producer. It must then resume where the broker says the group committed, not where it last saw a
    commit succeed, or the committed batch is processed again and counted twice."""
    source = kafka_topics("lost-reply-in", partitions=2)
    sink = kafka_topics("lost-reply-out", partitions=2)
    monkeypatch.setattr(
        assembly, "StreamsProducer", functools.partial(StreamsProducer, factory=LostCommitReplyProducer)
    )
    config = fast_config(
        kafka_bootstrap,
        f"lost-reply-{uuid.uuid4().hex[:8]}",
        str(tmp_path),
        **{"processing.guarantee": "exactly_once_v2", "statestore.cache.max.bytes": 0},
    )
    first = [f"a{i % 7} b{i % 3}" for i in range(100)]
    second = [f"a{i % 5} c{i % 4}" for i in range(100)]
    app = KafkaStreams(wordcount_topology(source, sink), config)
    app.start()
    try:
        wait_running(app)
        produce_lines(kafka_bootstrap, source, first)
        wait_committed(kafka_bootstrap, sink, 200, 60, "first")
        LOSE_NEXT_COMMIT_REPLY.set()
        produce_lines(kafka_bootstrap, source, second)
        wait_for(lambda: not LOSE_NEXT_COMMIT_REPLY.is_set(), 30, "a commit with its reply lost")
        wait_committed(kafka_bootstrap, sink, 400, 60, "second")
        assert app.metrics.counter("transaction-aborts-total") >= 1  # the work was dropped, then resumed
    finally:
        LOSE_NEXT_COMMIT_REPLY.clear()
        app.close(30)
    assert_exact_counts(kafka_bootstrap, sink, first + second)


def test_a_static_member_fenced_by_its_namesake_rejoins_and_counts_stay_exact(
    kafka_bootstrap, kafka_topics, tmp_path
):
    source = kafka_topics("static-in", partitions=2)
    sink = kafka_topics("static-out", partitions=2)
    app_id = f"static-{uuid.uuid4().hex[:8]}"
    config = fast_config(
        kafka_bootstrap,
        app_id,
        str(tmp_path),
        **{
            "processing.guarantee": "exactly_once_v2",
            "group.instance.id": "pod-0",
            "statestore.cache.max.bytes": 0,
        },
    )
    first = [f"a{i % 7} b{i % 3}" for i in range(150)]
    second = [f"a{i % 5}" for i in range(100)]
    app = KafkaStreams(wordcount_topology(source, sink), config)
    app.start()
    try:
        wait_running(app)
        produce_lines(kafka_bootstrap, source, first)
        wait_committed(kafka_bootstrap, sink, 300, 60, "first")
        # Another consumer joins with the app's group.instance.id, as a stale pod would after a broker
        # restart: the coordinator fences the app's consumer, which librdkafka reports as fatal.
        namesake = Consumer(
            {"bootstrap.servers": kafka_bootstrap, "group.id": app_id, "group.instance.id": "pod-0",
             "session.timeout.ms": 6000}
        )  # fmt: skip
        namesake.subscribe([source])
        namesake.consume(1, 5)
        namesake.close()
        produce_lines(kafka_bootstrap, source, second)
        wait_committed(kafka_bootstrap, sink, 400, 90, "second")
        assert app.state is State.RUNNING
        assert app.metrics.counter("consumer-rejoins-total") >= 1
    finally:
        app.close(30)
    assert_exact_counts(kafka_bootstrap, sink, first + second)


class DelayedPort:
    """A TCP port that refuses connections until `open()`, then forwards to the broker: a broker that
    cannot be reached when the instance starts."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self._target = (host, int(port))
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self._server: socket.socket | None = None

    def open(self) -> None:
        server = self._server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.port))
        server.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        assert self._server is not None
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._target)
            except OSError:  # the broker is gone (the session is ending): drop the client
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            dst.close()

    def close(self) -> None:
        if self._server is not None:
            self._server.close()


def test_an_instance_started_while_the_broker_is_unreachable_waits_for_it(
    kafka_bootstrap, kafka_topics, tmp_path
):
    source = kafka_topics("late-in")
    sink = kafka_topics("late-out")
    port = DelayedPort(kafka_bootstrap)
    config = fast_config(f"127.0.0.1:{port.port}", f"late-{uuid.uuid4().hex[:8]}", str(tmp_path))
    app = KafkaStreams(wordcount_topology(source, sink), config)
    app.start()
    try:
        # librdkafka's own metadata wait is 15 s: unreachable for longer, the instance must still wait
        opened = threading.Timer(20.0, port.open)
        opened.start()
        wait_for(lambda: app.state is State.RUNNING, 90, "running once the broker is reachable")
        produce_lines(kafka_bootstrap, source, ["late but there"])
        wait_for(lambda: len(read_topic(kafka_bootstrap, sink, timeout=2)) >= 3, 30, "output")
    finally:
        app.close(30)
        port.close()
