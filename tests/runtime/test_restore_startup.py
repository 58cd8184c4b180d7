"""Start-up work before a restoration: the changelog ends of an assignment's tasks looked up together, and
exactly_once_v2's init_transactions running in the background until the first transaction begins."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kappaflow.api.metrics import Metrics
from kappaflow.clients.kafka import WatermarkReader
from kappaflow.runner.changelog_reader import ChangelogReader
from kappaflow.runner.managed_task import ManagedTask
from kappaflow.runner.producer import StreamsProducer
from tests.runtime.test_runner_parts import (
    FakeRestoreConsumer,
    FakeStateManager,
    RestoringTask,
    SecondPartitionManager,
)


class CountingBounds:
    """(log start, high watermark) of every partition asked for, each call's partitions recorded."""

    def __init__(self) -> None:
        self.calls: list[list[tuple[str, int]]] = []

    def __call__(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        self.calls.append(list(partitions))
        return {tp: (0, 10 + tp[1]) for tp in partitions}

    def close(self) -> None:
        pass


def test_an_assignments_changelog_ends_and_topic_ids_are_looked_up_once_for_all_its_tasks() -> None:
    bounds, described = CountingBounds(), []

    def topic_ids(topics: list[str]) -> dict[str, str]:
        described.append(topics)
        return dict.fromkeys(topics, "id-1")

    consumer = FakeRestoreConsumer([])
    reader = ChangelogReader(consumer, Metrics(), bounds, topic_ids=topic_ids)  # type: ignore[arg-type]
    managers = [FakeStateManager(None), SecondPartitionManager(None)]
    known = reader.look_up(managers)  # type: ignore[arg-type]
    topic = FakeStateManager.TP[0]
    assert bounds.calls == [[(topic, 0), (topic, 1)]] and described == [[topic]]
    tasks = [ManagedTask(RestoringTask(m), lock=None, standby=False) for m in managers]  # type: ignore[arg-type]
    for managed in tasks:
        reader.register(managed, known)
    assert len(bounds.calls) == 1 and len(described) == 1  # registering asked nothing more
    # each task restores to its own partition's end, from what the one lookup found
    assert [m.end_offsets for m in tasks] == [{(topic, 0): 10}, {(topic, 1): 11}]
    assert consumer.assigned == [(topic, 0, -2), (topic, 1, -2)]
    # a task the lookup did not cover is looked up alone, as before
    reader.register(ManagedTask(RestoringTask(SecondPartitionManager(None)), None, False), known)  # type: ignore[arg-type]
    assert len(bounds.calls) == 1
    reader.register(ManagedTask(RestoringTask(ThirdPartitionManager(None)), None, False), known)  # type: ignore[arg-type]
    assert bounds.calls[1:] == [[(topic, 2)]] and described[1:] == [[topic]]


class ThirdPartitionManager(FakeStateManager):
    TP = ("app-counts-changelog", 2)


@dataclass
class Answer:
    """A partition of `offsets_for_times`' answer (confluent-kafka's TopicPartition has no settable error)."""

    topic: str
    partition: int
    offset: int
    error: KafkaError | None = None


class OffsetsConsumer:
    """`offsets_for_times` of a consumer: the protocol's special timestamps -2 / -1 answered per partition;
    partitions of `failing` answer an error."""

    def __init__(self, failing: set[tuple[str, int]] = frozenset()) -> None:  # type: ignore[assignment]
        self.requests: list[list[tuple[str, int, int]]] = []
        self.looked_up: list[str] = []
        self.failing = failing

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float) -> list[Answer]:
        self.requests.append([(tp.topic, tp.partition, tp.offset) for tp in partitions])
        found = []
        for tp in partitions:
            if (tp.topic, tp.partition) in self.failing:
                error = KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION)
                found.append(Answer(tp.topic, tp.partition, tp.offset, error))
            else:
                found.append(Answer(tp.topic, tp.partition, 3 if tp.offset == -2 else 100 + tp.partition))
        return found

    def list_topics(self, topic: str, timeout: float) -> None:
        self.looked_up.append(topic)


def _watermarks(consumer: OffsetsConsumer) -> WatermarkReader:
    reader = WatermarkReader.__new__(WatermarkReader)
    reader._consumer = consumer  # type: ignore[assignment]
    return reader


def test_watermarks_of_many_partitions_are_two_requests_and_a_failed_partition_refreshes_its_topic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import kappaflow.clients.kafka as kafka_module

    monkeypatch.setattr(kafka_module, "serve_consumer_logs", lambda _consumer: None)
    consumer = OffsetsConsumer()
    tps = [("a", 0), ("a", 1), ("b", 0)]
    assert _watermarks(consumer)(tps) == {("a", 0): (3, 100), ("a", 1): (3, 101), ("b", 0): (3, 100)}
    assert consumer.requests == [[(t, p, -2) for t, p in tps], [(t, p, -1) for t, p in tps]]
    assert _watermarks(consumer)([]) == {} and len(consumer.requests) == 2  # nothing asked: no request
    failing = OffsetsConsumer({("b", 0)})
    with pytest.raises(KafkaException) as raised:
        _watermarks(failing)(tps)
    assert raised.value.args[0].code() == KafkaError.NOT_LEADER_FOR_PARTITION
    assert failing.looked_up == ["b"]  # its metadata refreshed for the caller's retry


class SlowInitProducer:
    """A transactional client whose init_transactions waits for `release` (or fails with `failure`)."""

    release = threading.Event()
    failure: BaseException | None = None
    calls: list[str] = []

    def __init__(self, _settings: dict[str, object]) -> None:
        pass

    def init_transactions(self, _timeout: float) -> None:
        SlowInitProducer.calls.append("init started")
        SlowInitProducer.release.wait(30)
        if SlowInitProducer.failure is not None:
            raise SlowInitProducer.failure
        SlowInitProducer.calls.append("init done")

    def begin_transaction(self) -> None:
        SlowInitProducer.calls.append("begin")

    def abort_transaction(self, _timeout: float) -> None:
        SlowInitProducer.calls.append("abort")

    def flush(self, _timeout: float) -> int:
        return 0

    def poll(self, _timeout: float) -> int:
        return 0

    def purge(self) -> None:
        pass


@pytest.fixture
def slow_init() -> type[SlowInitProducer]:
    SlowInitProducer.release = threading.Event()
    SlowInitProducer.failure = None
    SlowInitProducer.calls = []
    return SlowInitProducer


def _release_later(event: threading.Event) -> threading.Thread:
    """Set `event` from another thread a little later: a call that did not wait for it would return
    before it (the order, not the time, is what the tests assert)."""
    timer = threading.Timer(0.2, event.set)
    timer.start()
    return timer


def test_init_transactions_runs_before_the_constructor_returns_and_only_under_exactly_once(
    slow_init: type[SlowInitProducer],
) -> None:
    # Kafka Streams' order: the predecessor with this transactional id is fenced, and its open transaction
    # ended, before any task restores or reads its committed offsets (which come after the constructor)
    slow_init.release.set()
    StreamsProducer({}, False, None, api_timeout_s=5, factory=slow_init)
    assert slow_init.calls == []  # at_least_once: no transactions
    producer = StreamsProducer({}, True, None, api_timeout_s=5, factory=slow_init)
    assert slow_init.calls == ["init started", "init done"]
    producer.begin()
    assert slow_init.calls[-1] == "begin"


class ConnectingConsumer:
    """A consumer whose metadata request waits for `release`; records its calls in order."""

    def __init__(self, release: threading.Event, calls: list[str]) -> None:
        self.release, self.calls = release, calls

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> None:
        self.calls.append(f"list_topics {topic}")
        self.release.wait(30)
        self.calls.append("connected")

    def close(self) -> None:
        self.calls.append("close")


def test_the_early_consumer_connects_on_a_thread_and_is_handed_over_or_closed_only_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The group consumer's first connection overlaps the topics' preparation: creating it does not wait
    for its metadata request, and neither handing it to `_join` nor closing it overlaps that request
    (a call of another thread on a closed client is a use after free in librdkafka)."""
    import kappaflow.runner.early_consumer as early_module

    release, calls = threading.Event(), []
    consumer = ConnectingConsumer(release, calls)
    monkeypatch.setattr(early_module, "new_consumer", lambda _settings: consumer)
    early = early_module.EarlyConsumer({}, "input")  # returns while the request cannot return yet
    _release_later(release)
    assert early.take() is consumer
    assert calls == ["list_topics input", "connected"]
    with pytest.raises(RuntimeError):
        early.take()  # handed over once
    early.close()
    assert calls == ["list_topics input", "connected"]  # a consumer handed over is not closed here

    release, calls = threading.Event(), []
    consumer = ConnectingConsumer(release, calls)
    early = early_module.EarlyConsumer({}, None)
    _release_later(release)
    early.close()  # the thread stopped before joining the group
    assert calls == ["list_topics None", "connected", "close"]
