"""Partitions whose committed offsets librdkafka never fetched are assigned again.

librdkafka (confluentinc/librdkafka#5586) leaves newly assigned partitions waiting for their committed
offsets for good when the OffsetFetch fails as a whole with NOT_COORDINATOR (the group coordinator moved,
e.g. in a rolling restart): it refreshes the coordinator but never asks again. The cluster chaos test
(freeze and rolling restart, static members) caught a member that way: RUNNING with four tasks and no
input for three minutes. The stream thread now recognizes the error consumed in place of a record and
assigns those partitions again (`RebalanceHandler.refetch_offsets`)."""

from __future__ import annotations

import threading

from confluent_kafka import KafkaError, TopicPartition

from kappaflow.api.processor import TaskId
from kappaflow.runner.rebalance import RebalanceHandler
from kappaflow.runner.routing import offsets_not_fetched, raw_records_by_partition
from tests.runtime.test_runner_parts import AbortingProducer, FakeTasks

UNSET = -1001  # librdkafka's OFFSET_INVALID: no position, or "the committed offset" when assigning
FETCH_FAILED = 'Failed to fetch committed offsets for 0 partition(s) in group "app": Broker: Not coordinator'


def test_only_an_offset_fetch_failed_as_a_whole_on_a_moved_coordinator_is_recognized():
    assert offsets_not_fetched(KafkaError(KafkaError.NOT_COORDINATOR, FETCH_FAILED))
    assert offsets_not_fetched(KafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE, FETCH_FAILED))
    assert not offsets_not_fetched(KafkaError(KafkaError.NOT_COORDINATOR, "Failed to commit offsets"))
    assert not offsets_not_fetched(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, FETCH_FAILED))


class RecordingConsumer:
    """The consumer calls `refetch_offsets` makes, in order, with the positions librdkafka reports."""

    def __init__(self, positions: dict[tuple[str, int], int]) -> None:
        self.positions = positions
        self.calls: list[tuple[str, list[tuple[str, int, int]]]] = []

    def _log(self, call: str, partitions: list[TopicPartition] | None = None) -> None:
        self.calls.append((call, [(tp.topic, tp.partition, tp.offset) for tp in partitions or []]))

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [
            TopicPartition(tp.topic, tp.partition, self.positions[(tp.topic, tp.partition)])
            for tp in partitions
        ]

    def unassign(self) -> None:
        self._log("unassign")

    def assign(self, partitions: list[TopicPartition]) -> None:
        self._log("assign", partitions)

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        self._log("incremental_unassign", partitions)

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self._log("incremental_assign", partitions)

    def pause(self, partitions: list[TopicPartition]) -> None:
        self._log("pause", partitions)


class RecordingInputs:
    """The native reader's `open`, logged into the consumer's calls (its order against them matters)."""

    def __init__(self, consumer: RecordingConsumer) -> None:
        self._consumer = consumer

    def open(self, topic: str, partition: int) -> None:
        self._consumer.calls.append(("open", [(topic, partition, UNSET)]))


def _assigned(
    incremental: bool, positions: dict[tuple[str, int], int]
) -> tuple[RebalanceHandler, RecordingConsumer]:
    """A handler owning t-0 (running) and t-1 (restoring), its consumer reporting `positions`."""
    tasks = FakeTasks(restoring=frozenset({TaskId(0, 1)}))
    handler = RebalanceHandler(
        tasks,
        AbortingProducer(),
        lambda: None,
        lambda _: None,
        threading.RLock(),
        incremental=incremental,  # type: ignore[arg-type]
    )
    consumer = RecordingConsumer(positions)
    handler.on_assign(consumer, [TopicPartition("t", 0), TopicPartition("t", 1)])  # type: ignore[arg-type]
    consumer.calls.clear()
    handler.inputs = RecordingInputs(consumer)  # type: ignore[assignment]
    return handler, consumer


def test_an_eager_member_with_nothing_delivered_is_assigned_again_at_the_committed_offsets():
    handler, consumer = _assigned(False, {("t", 0): UNSET, ("t", 1): UNSET})
    handler.refetch_offsets(consumer)  # type: ignore[arg-type]
    assert consumer.calls == [
        ("unassign", []),
        ("open", [("t", 0, UNSET)]),
        ("open", [("t", 1, UNSET)]),
        ("assign", [("t", 0, UNSET), ("t", 1, UNSET)]),
        ("pause", [("t", 1, UNSET)]),  # its task is still restoring
    ]


def test_an_eager_reassignment_keeps_the_position_of_a_partition_that_delivers():
    handler, consumer = _assigned(False, {("t", 0): 42, ("t", 1): UNSET})
    handler.refetch_offsets(consumer)  # type: ignore[arg-type]
    assign = [args for call, args in consumer.calls if call == "assign"]
    assert assign == [[("t", 1, UNSET), ("t", 0, 42)]]  # t-0 resumes at 42: nothing skipped or repeated


def test_an_incremental_member_assigns_again_only_the_partitions_that_delivered_nothing():
    handler, consumer = _assigned(True, {("t", 0): 42, ("t", 1): UNSET})
    handler.refetch_offsets(consumer)  # type: ignore[arg-type]
    assert consumer.calls == [
        ("incremental_unassign", [("t", 1, UNSET)]),
        ("open", [("t", 1, UNSET)]),
        ("incremental_assign", [("t", 1, UNSET)]),
        ("pause", [("t", 1, UNSET)]),
    ]


def test_nothing_is_assigned_again_when_every_partition_delivers_or_the_member_left():
    handler, consumer = _assigned(False, {("t", 0): 42, ("t", 1): 7})
    handler.refetch_offsets(consumer)  # type: ignore[arg-type]
    assert consumer.calls == []
    handler.in_group = False
    consumer.positions = {("t", 0): UNSET, ("t", 1): UNSET}
    handler.refetch_offsets(consumer)  # type: ignore[arg-type]
    assert consumer.calls == []


class ErrorMessage:
    """A consumed message carrying an error, as librdkafka queues the failed offset fetch."""

    def __init__(self, err: KafkaError) -> None:
        self._err = err

    def error(self) -> KafkaError:
        return self._err


def test_the_python_router_hands_a_consumed_error_to_the_threads_handler():
    seen: list[KafkaError] = []
    err = KafkaError(KafkaError.NOT_COORDINATOR, FETCH_FAILED)
    assert list(raw_records_by_partition([ErrorMessage(err)], seen.append)) == []
    assert [e.code() for e in seen] == [KafkaError.NOT_COORDINATOR]
