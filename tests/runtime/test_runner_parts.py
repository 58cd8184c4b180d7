"""The stream thread's parts, each alone, with its collaborators played by small in-test doubles:
broker retries, repartition purging, standby placement, the commit protocol and rebalance handling.
(The same parts against the real broker: tests/kafka/test_runner_recovery.py.)"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kappaflow.api.errors import ProducerFencedError, StreamsError, TaskMigratedError, TransactionAbortedError
from kappaflow.api.metrics import Metrics
from kappaflow.api.processor import TaskId
from kappaflow.clients.admin import GroupMember
from kappaflow.runner.commit import Committer
from kappaflow.runner.producer import StreamsProducer
from kappaflow.runner.rebalance import RebalanceHandler
from kappaflow.runner.retry import is_unreachable, retry_unreachable
from kappaflow.runner.standbys import StandbyPlacer
from kappaflow.runner.tasks import PartitionOwnership
from kappaflow.runner.topics import RepartitionPurger
from kappaflow.tasks.task import TaskState


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


# ----------------------------------------------------------------- retries
def test_unreachable_broker_is_retried_until_the_api_timeout_then_named():
    clock, calls = FakeClock(), []

    def down() -> None:
        calls.append(clock.now)
        raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Connection refused"))

    with pytest.raises(StreamsError, match="preparing topics: broker unreachable for 60s"):
        retry_unreachable("preparing topics", down, 60.0, sleep=clock.sleep, clock=clock)
    assert len(calls) > 5 and calls[-1] <= 60.0  # backed off, gave up at the deadline


def test_a_broker_back_in_time_ends_the_retries():
    clock, attempts = FakeClock(), iter([True, True, False])

    def back_after_two_tries() -> str:
        if next(attempts):
            raise KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN, "down"))
        return "ok"

    assert retry_unreachable("x", back_after_two_tries, 60.0, sleep=clock.sleep, clock=clock) == "ok"
    assert clock.now == pytest.approx(0.5 + 1.0)


def test_errors_that_are_not_about_reachability_are_not_retried():
    assert not is_unreachable(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)))
    assert not is_unreachable(KafkaException(KafkaError(KafkaError._TRANSPORT, fatal=True)))
    assert not is_unreachable(ValueError("no"))
    with pytest.raises(KafkaException):
        retry_unreachable(
            "x",
            lambda: (_ for _ in ()).throw(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))),
            60.0,
        )


# ----------------------------------------------------------------- purging
class FakeAdmin:
    def __init__(self) -> None:
        self.purged: list[dict[tuple[str, int], int]] = []

    def purge(self, offsets: dict[tuple[str, int], int]) -> None:
        self.purged.append(dict(offsets))


def test_repartition_records_are_purged_below_commits_once_per_interval():
    clock, admin = FakeClock(), FakeAdmin()
    purger = RepartitionPurger(admin, frozenset({"app-r"}), 30.0, clock)  # type: ignore[arg-type]
    purger.committed({("app-r", 0): 5, ("input", 0): 9})
    assert admin.purged == []  # within the interval
    clock.now = 31
    purger.committed({("app-r", 0): 7, ("app-r", 1): 2})
    assert admin.purged == [{("app-r", 0): 7, ("app-r", 1): 2}]  # user topics never
    clock.now = 40
    purger.committed({("app-r", 0): 8})
    assert len(admin.purged) == 1


# ----------------------------------------------------------------- standbys
class FakeTasks(PartitionOwnership):
    """The task manager as the standby placer and rebalance handler see it (its partition -> task map
    the real one's)."""

    def __init__(self, restoring: frozenset[TaskId] = frozenset()) -> None:
        super().__init__()
        self.active: dict[TaskId, FakeManaged] = {}
        self.standby: dict[TaskId, str] = {}
        self.closed: list[tuple[TaskId, bool]] = []
        self._restoring = restoring

    def task_ids_for(self, partitions: list[tuple[str, int]]) -> dict[TaskId, list[tuple[str, int]]]:
        result: dict[TaskId, list[tuple[str, int]]] = {}
        for topic, partition in partitions:
            result.setdefault(TaskId(0, partition), []).append((topic, partition))
        return result

    def create_standby(self, task_id: TaskId) -> None:
        self.standby[task_id] = "standby"

    def close_standby(self, task_id: TaskId) -> None:
        del self.standby[task_id]

    def create_active(self, task_id: TaskId) -> FakeManaged:
        state = TaskState.RESTORING if task_id in self._restoring else TaskState.RUNNING
        managed = self.active[task_id] = FakeManaged(FakeTask(task_id, state))
        return managed

    def create_actives(self, task_ids: list[TaskId]) -> list[FakeManaged]:
        return [self.create_active(task_id) for task_id in task_ids]

    def close_active(self, task_id: TaskId, clean: bool) -> None:
        if self.active.pop(task_id, None) is not None:
            self.closed.append((task_id, clean))

    def restoring(self) -> list[FakeManaged]:
        return [m for m in self.active.values() if m.task.state is TaskState.RESTORING]


@dataclass
class FakeTask:
    id: TaskId
    state: TaskState


@dataclass
class FakeManaged:
    task: FakeTask


def _member(member_id: str, *partitions: int) -> GroupMember:
    return GroupMember(member_id, "c", "", tuple(("t", p) for p in partitions))


def test_standbys_are_placed_once_the_group_is_stable_and_this_member_sees_its_own_assignment():
    clock, tasks = FakeClock(), FakeTasks()
    views = iter(
        [
            ("PreparingRebalance", [_member("a", 0), _member("b", 1)]),
            ("Stable", [_member("a"), _member("b", 1)]),  # a stale view of this member
            ("Stable", [_member("a", 0), _member("b", 1)]),
        ]
    )
    placer = StandbyPlacer(tasks, lambda: next(views), lambda _t: True, 1, clock)  # type: ignore[arg-type]
    asked: list[str] = []

    def member_id() -> str:  # librdkafka's memberid() is a round trip: asked only when placing
        asked.append("a")
        return "a"

    placer.maybe_place(member_id, lambda: [("t", 0)])
    assert tasks.standby == {} and asked == []  # nothing scheduled yet
    placer.schedule()
    for _ in range(3):
        placer.maybe_place(member_id, lambda: [("t", 0)])
        placer.maybe_place(member_id, lambda: [("t", 0)])  # not due again until the retry delay passed
        clock.now += 1.0
    assert set(tasks.standby) == {TaskId(0, 1)}  # b's task; never a's own
    assert len(asked) == 3


def test_no_standby_for_tasks_without_stores_and_none_when_not_configured():
    tasks = FakeTasks()
    view = ("Stable", [_member("a", 0), _member("b", 1)])
    StandbyPlacer(tasks, lambda: view, lambda _t: False, 1, FakeClock()).schedule()  # type: ignore[arg-type]
    placer = StandbyPlacer(tasks, lambda: view, lambda _t: False, 1, FakeClock())  # type: ignore[arg-type]
    placer.schedule()
    placer.maybe_place(lambda: "a", lambda: [("t", 0)])
    assert tasks.standby == {}
    unconfigured = StandbyPlacer(tasks, lambda: view, lambda _t: True, 0, FakeClock())  # type: ignore[arg-type]
    unconfigured.schedule()
    unconfigured.maybe_place(lambda: "a", lambda: [("t", 0)])
    assert tasks.standby == {}


# ----------------------------------------------------------------- the commit protocol
@dataclass
class CommittingTask:
    consumed: dict[tuple[str, int], int]
    committed_with: list[dict[tuple[str, int], int]] = field(default_factory=list)

    flushed: list[str] = field(default_factory=list)  # shared with the producer's calls to order them

    def prepare_commit(self) -> dict[tuple[str, int], int]:
        self.flushed.append("flush stores")
        return dict(self.consumed)

    def committable_offsets(self) -> dict[tuple[str, int], int]:
        return dict(self.consumed)

    def post_commit(self, written: dict[tuple[str, int], int]) -> None:
        self.committed_with.append(dict(written))


class FakeStreamsProducer:
    def __init__(self, exactly_once: bool, fail: BaseException | None = None) -> None:
        self.exactly_once = exactly_once
        self.acknowledged = {("app-counts-changelog", 0): 41}
        self.calls: list[str] = []
        self._fail = fail

    def flush(self) -> None:
        self.calls.append("flush")

    def commit(
        self, offsets: list[TopicPartition], group_metadata: object, prepare: Callable[[], None]
    ) -> None:
        self.calls.append(
            f"commit {[(tp.topic, tp.partition, tp.offset) for tp in offsets]} {group_metadata}"
        )
        prepare()
        if self._fail is not None:
            raise self._fail


class FakeConsumer:
    def __init__(self, commit_error: KafkaError | None = None) -> None:
        self.committed: list[list[tuple[str, int, int]]] = []
        self._commit_error = commit_error
        self.assigned: list[TopicPartition] = []
        self.paused: list[TopicPartition] = []

    def consumer_group_metadata(self) -> str:
        return "generation-7"

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        if self._commit_error is not None:
            raise KafkaException(self._commit_error)
        self.committed.append([(tp.topic, tp.partition, tp.offset) for tp in offsets])

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned = list(partitions)

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused.extend(partitions)


def test_at_least_once_flushes_then_commits_offsets_then_checkpoints_at_what_kafka_acknowledged():
    producer, consumer = FakeStreamsProducer(exactly_once=False), FakeConsumer()
    task = CommittingTask({("in", 0): 10})
    offsets = Committer(producer, Metrics()).commit([task], consumer)  # type: ignore[arg-type, list-item]
    assert offsets == {("in", 0): 10}
    assert producer.calls == ["flush"] and consumer.committed == [[("in", 0, 10)]]
    assert task.committed_with == [{("app-counts-changelog", 0): 41}]


def test_at_least_once_commit_with_no_task_to_commit_waits_on_no_flush():
    producer, consumer = FakeStreamsProducer(exactly_once=False), FakeConsumer()
    assert Committer(producer, Metrics()).commit([], consumer) == {}  # type: ignore[arg-type]
    assert producer.calls == [] and consumer.committed == []


def test_exactly_once_commits_the_offsets_in_the_transaction_with_the_group_metadata():
    producer, consumer = FakeStreamsProducer(exactly_once=True), FakeConsumer()
    task = CommittingTask({("in", 1): 3}, flushed=producer.calls)
    Committer(producer, Metrics()).commit([task], consumer)  # type: ignore[arg-type, list-item]
    # the stores flush inside the producer's commit, once the offsets are on their way
    assert producer.calls == ["commit [('in', 1, 3)] generation-7", "flush stores"]
    assert consumer.committed == []
    assert len(task.committed_with) == 1


def test_a_commit_that_fails_leaves_the_tasks_uncommitted():
    for producer, consumer, error in [
        (
            FakeStreamsProducer(exactly_once=True, fail=TransactionAbortedError("timed out")),
            FakeConsumer(),
            TransactionAbortedError,
        ),
        (
            FakeStreamsProducer(exactly_once=False),
            FakeConsumer(KafkaError(KafkaError.ILLEGAL_GENERATION)),
            TaskMigratedError,
        ),
    ]:
        task = CommittingTask({("in", 0): 10})
        with pytest.raises(error):
            Committer(producer, Metrics()).commit([task], consumer)  # type: ignore[arg-type, list-item]
        assert task.committed_with == []  # stores not checkpointed: their writes are not committed


# ----------------------------------------------------------------- rebalances
class AbortingProducer:
    def __init__(self) -> None:
        self.aborts = 0

    def abort(self) -> None:
        self.aborts += 1


def _handler(tasks: FakeTasks, commit, changes: list[bool]) -> tuple[RebalanceHandler, AbortingProducer]:
    producer = AbortingProducer()
    handler = RebalanceHandler(tasks, producer, commit, changes.append, threading.RLock(), incremental=False)  # type: ignore[arg-type]
    return handler, producer


def test_assignment_opens_tasks_and_pauses_the_input_of_those_still_restoring():
    tasks, changes = FakeTasks(restoring=frozenset({TaskId(0, 1)})), []
    handler, _ = _handler(tasks, lambda: None, changes)
    consumer = FakeConsumer()
    handler.on_assign(consumer, [TopicPartition("t", 0), TopicPartition("t", 1)])  # type: ignore[arg-type]
    assert set(tasks.active) == {TaskId(0, 0), TaskId(0, 1)} and handler.in_group and changes == [True]
    assert [(tp.topic, tp.partition) for tp in consumer.paused] == [("t", 1)]
    assert handler.assigned == [("t", 0), ("t", 1)]


def test_revocation_commits_then_closes_clean():
    tasks, changes, commits = FakeTasks(), [], []
    handler, producer = _handler(tasks, lambda: commits.append(1), changes)
    consumer = FakeConsumer()
    handler.on_assign(consumer, [TopicPartition("t", 0)])  # type: ignore[arg-type]
    handler.on_revoke(consumer, [TopicPartition("t", 0)])  # type: ignore[arg-type]
    assert commits == [1] and tasks.closed == [(TaskId(0, 0), True)] and producer.aborts == 0
    assert not handler.in_group and handler.assigned == []


def test_a_failed_commit_on_revocation_hands_the_tasks_over_dirty_without_failing_the_thread():
    tasks, changes = FakeTasks(), []

    def fenced() -> None:
        raise TaskMigratedError("the producer was fenced")

    handler, producer = _handler(tasks, fenced, changes)
    consumer = FakeConsumer()
    handler.on_assign(consumer, [TopicPartition("t", 0)])  # type: ignore[arg-type]
    handler.on_revoke(consumer, [TopicPartition("t", 0)])  # type: ignore[arg-type]
    assert tasks.closed == [(TaskId(0, 0), False)] and producer.aborts == 1
    handler.raise_error()  # nothing kept for the thread


def test_a_bug_in_a_commit_on_revocation_reaches_the_thread():
    tasks = FakeTasks()

    def broken() -> None:
        raise ZeroDivisionError("user code")

    handler, _ = _handler(tasks, broken, [])
    consumer = FakeConsumer()
    handler.on_assign(consumer, [TopicPartition("t", 0)])  # type: ignore[arg-type]
    handler.on_revoke(consumer, [TopicPartition("t", 0)])  # type: ignore[arg-type]
    with pytest.raises(ZeroDivisionError):
        handler.raise_error()


@dataclass
class FetchedOffset:
    topic: str
    partition: int
    offset: int
    error: KafkaError | None


class OffsetFetchingConsumer:
    """Answers `committed()` with `answers`, one per call: (partition, offset, error) triples."""

    def __init__(self, answers: list[list[tuple[int, int, KafkaError | None]]]) -> None:
        self._answers = answers
        self.seeks: list[tuple[str, int, int]] = []

    def pause(self, partitions: list[TopicPartition]) -> None:
        pass

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        # confluent-kafka's TopicPartition takes no error from Python: a stand-in with its fields
        return [FetchedOffset("t", p, offset, error) for p, offset, error in self._answers.pop(0)]

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append((tp.topic, tp.partition, tp.offset))


def test_reopened_tasks_resume_where_the_broker_says_and_a_partition_it_could_not_answer_is_asked_again():
    tasks, changes = FakeTasks(), []
    handler, _ = _handler(tasks, lambda: None, changes)
    unstable = KafkaError(KafkaError.UNSTABLE_OFFSET_COMMIT)
    consumer = OffsetFetchingConsumer([[(0, 50, None), (1, -1001, unstable)], [(0, 50, None), (1, 70, None)]])
    handler.on_assign(consumer, [TopicPartition("t", 0), TopicPartition("t", 1)])  # type: ignore[arg-type]
    # the thread's own record is older than what the broker holds (a commit whose reply was lost)
    handler.reopen_tasks(consumer, {("t", 0): 40, ("t", 1): 60}, api_timeout_s=5)  # type: ignore[arg-type]
    assert sorted(consumer.seeks) == [("t", 0, 50), ("t", 1, 70)]


def test_a_dirty_member_never_commits_on_revocation_and_lost_partitions_are_closed_dirty():
    tasks, commits = FakeTasks(), []
    handler, producer = _handler(tasks, lambda: commits.append(1), [])
    consumer = FakeConsumer()
    handler.on_assign(consumer, [TopicPartition("t", 0), TopicPartition("t", 1)])  # type: ignore[arg-type]
    handler.dirty = True
    handler.on_revoke(consumer, [TopicPartition("t", 0)])  # type: ignore[arg-type]
    handler.dirty = False
    handler.on_assign(consumer, [TopicPartition("t", 1)])  # type: ignore[arg-type]
    handler.on_lost(consumer, [TopicPartition("t", 1)])  # type: ignore[arg-type]
    assert commits == [] and producer.aborts == 1
    assert tasks.closed == [(TaskId(0, 0), False), (TaskId(0, 1), False)]


# ----------------------------------------------------------------- the changelog reader
class FakeMessage:
    def __init__(self, tp: tuple[str, int], offset: int, key: bytes = b"k", eof: bool = False) -> None:
        self._tp, self._offset, self._key, self._eof = tp, offset, key, eof

    def topic(self) -> str:
        return self._tp[0]

    def partition(self) -> int:
        return self._tp[1]

    def offset(self) -> int:
        return self._offset

    def error(self) -> KafkaError | None:
        return KafkaError(KafkaError._PARTITION_EOF) if self._eof else None

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes:
        return b"v"

    def timestamp(self) -> tuple[int, int]:
        return (1, 1000)


class FakeRestoreConsumer:
    def __init__(self, batches: list[list[FakeMessage]]) -> None:
        self.batches = batches
        self.assigned: list[tuple[str, int, int]] = []
        self.looked_up: list[tuple[str, int]] = []  # topics asked for, with the assignments at that time

    def list_topics(self, topic: str, timeout: float) -> None:
        self.looked_up.append((topic, len(self.assigned)))

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned += [(tp.topic, tp.partition, tp.offset) for tp in partitions]

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        self.assigned = [a for a in self.assigned if (a[0], a[1]) not in gone]

    def consume(self, _n: int, _timeout: float) -> list[FakeMessage]:
        return self.batches.pop(0) if self.batches else []


class FakeStateManager:
    """One store, `counts`, over changelog partition ("app-counts-changelog", 0)."""

    TP = ("app-counts-changelog", 0)

    def __init__(self, committed: int | None) -> None:
        self.committed, self.offset_now = committed, committed
        self.applied: list[bytes] = []
        self.checkpoints: list[int | None] = []
        self.stores: dict[str, object] = {}

    def restore_offsets(self, bounds: object = None, topic_ids: object = None) -> dict[str, int | None]:
        return {"counts": self.committed}

    def changelog_partitions(self) -> dict[tuple[str, int], str]:
        return {self.TP: "counts"}

    def source_changelog_partitions(self) -> set[tuple[str, int]]:
        return set()  # its changelog is its own topic (test_topology_optimization has a source one)

    def offset(self, _store: str) -> int | None:
        return self.offset_now

    def advance(self, _store: str, offset: int) -> None:
        self.offset_now = max(self.offset_now or 0, offset)

    def restore_messages(
        self, _store: str, messages: list[FakeMessage], next_offset: int, _writer: object = None
    ) -> None:
        self.applied += [m.key() for m in messages]
        self.offset_now = next_offset

    def checkpoint_offsets(self) -> None:
        self.checkpoints.append(self.offset_now)

    def checkpoint_in_background(self) -> bool:
        """The end of the restoration's offset, written by the next `settle_checkpoint` (its flush)."""
        self.deferred: int | None = self.offset_now
        return True

    def settle_checkpoint(self, wait: bool = False) -> bool:
        self.checkpoints.append(self.deferred)
        return True


class RestoringTask:
    def __init__(self, manager: FakeStateManager) -> None:
        self.id = TaskId(1, 0)
        self.state_manager = manager
        self.restored = False

    def complete_restoration(self) -> None:
        self.restored = True


class FixedBounds:
    def __init__(self, bounds: tuple[int, int]) -> None:
        self.bounds = bounds

    def __call__(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        return {tp: self.bounds for tp in partitions}

    def close(self) -> None:
        pass


def _reader_with(batches, bounds, committed=None):
    from kappaflow.runner.changelog_reader import ChangelogReader
    from kappaflow.runner.managed_task import ManagedTask

    consumer = FakeRestoreConsumer(batches)
    reader = ChangelogReader(consumer, Metrics(), FixedBounds(bounds))  # type: ignore[arg-type]
    task = RestoringTask(FakeStateManager(committed))
    managed = ManagedTask(task, lock=None, standby=False)  # type: ignore[arg-type]
    reader.register(managed)
    return reader, consumer, managed, task


def test_restoration_waits_past_an_open_transaction_up_to_the_high_watermark():
    tp = FakeStateManager.TP
    # The log: records 0..2 committed, then a transaction left open by a crashed owner (3..5, not yet
    # readable under read_committed), later committed, then records 6..7. High watermark: 8.
    batches = [
        [FakeMessage(tp, 0), FakeMessage(tp, 1), FakeMessage(tp, 2), FakeMessage(tp, 3, eof=True)],
        [FakeMessage(tp, 3, eof=True)],  # the last stable offset is still 3: keep waiting
        [
            FakeMessage(tp, 3, b"a"),
            FakeMessage(tp, 4, b"b"),
            FakeMessage(tp, 7, b"c"),
            FakeMessage(tp, 8, eof=True),
        ],
    ]
    reader, consumer, managed, task = _reader_with(batches, (0, 8))
    assert consumer.assigned == [(tp[0], tp[1], -2)]  # from the beginning: nothing committed locally
    assert consumer.looked_up == [(tp[0], 0)]  # its metadata asked for first, before the assignment
    assert reader.step() == [] and reader.step() == [] and not task.restored  # stopped at the LSO: not done
    assert reader.step() == [managed] and task.restored
    assert task.state_manager.applied == [b"k", b"k", b"k", b"a", b"b", b"c"]
    assert task.state_manager.checkpoints == [] and consumer.assigned == [] and not reader.has_work()
    assert reader.step() == [] and task.state_manager.checkpoints == [8]  # the next step writes it


class SecondPartitionManager(FakeStateManager):
    TP = ("app-counts-changelog", 1)


class NoMetadataConsumer(FakeRestoreConsumer):
    def list_topics(self, topic: str, timeout: float) -> None:
        super().list_topics(topic, timeout)
        raise KafkaException(KafkaError(KafkaError._TRANSPORT))


@pytest.mark.parametrize("lookup_fails", [False, True])
def test_a_changelog_topic_is_looked_up_once_before_its_first_assignment_and_again_only_if_that_failed(
    lookup_fails: bool,
) -> None:
    """The restore consumer's metadata head start (`_know_topics`): one lookup per topic; a failed one
    stops no assignment and is tried again at the topic's next one."""
    from kappaflow.runner.changelog_reader import ChangelogReader
    from kappaflow.runner.managed_task import ManagedTask

    consumer = NoMetadataConsumer([]) if lookup_fails else FakeRestoreConsumer([])
    reader = ChangelogReader(consumer, Metrics(), FixedBounds((0, 2)))  # type: ignore[arg-type]
    for manager in (FakeStateManager(None), SecondPartitionManager(None)):
        reader.register(ManagedTask(RestoringTask(manager), lock=None, standby=False))  # type: ignore[arg-type]
    topic = FakeStateManager.TP[0]
    assert consumer.assigned == [(topic, 0, -2), (topic, 1, -2)]
    assert consumer.looked_up == ([(topic, 0), (topic, 1)] if lookup_fails else [(topic, 0)])


def test_a_store_already_at_the_end_restores_nothing_and_a_truncated_log_is_read_from_its_start():
    _reader, consumer, managed, _task = _reader_with([], (0, 5), committed=5)
    assert not managed.pending and consumer.assigned == []  # the task runs at once
    _reader, consumer, managed, _task = _reader_with([], (0, 0))
    assert not managed.pending  # an empty changelog: nothing to wait for
    _reader, consumer, managed, _task = _reader_with([], (10, 20), committed=4)  # below the log start
    assert consumer.assigned == [(FakeStateManager.TP[0], 0, -2)] and managed.pending


def test_a_restore_stuck_from_its_start_exports_its_series_at_once_with_help_lines():
    """The metrics the KappaflowRestoreStuck alert and the restore panel read exist before the first
    restored record: remaining records, and the restored-records counter at 0 (not absent)."""
    from kappaflow.runner.http import prometheus_text

    reader, _consumer, _managed, _task = _reader_with([[]], (0, 500))
    assert reader.step() == []  # nothing arrives
    text = prometheus_text(reader._metrics)
    assert 'kappaflow_restored_records_total{store="counts",task="1_0"} 0.0' in text
    assert 'kappaflow_restore_remaining_records{task="1_0"} 500.0' in text
    assert "# HELP kappaflow_restored_records_total Changelog records restored" in text
    assert "# HELP kappaflow_restore_remaining_records Changelog records" in text


class HangingOffsetsProducer:
    """A transactional client whose send_offsets_to_transaction does not return (as librdkafka's was
    seen doing after a broker restart) until released."""

    def __init__(self, _settings: dict[str, object]) -> None:
        self.release = threading.Event()
        self.calls: list[str] = []

    def init_transactions(self, _timeout: float) -> None:
        self.calls.append("init")

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def send_offsets_to_transaction(self, *_args: object) -> None:
        self.release.wait(10)

    def flush(self, _timeout: float) -> int:
        return 0

    def poll(self, _timeout: float) -> int:
        return 0


def test_a_store_flush_failing_while_the_offsets_call_hangs_raises_that_the_producer_is_done(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stores flush while the offsets are being added. When the flush fails and the offsets call has
    not returned within its bound, the commit raises ProducerFencedError (caused by the flush's error):
    the stream thread must replace the producer, not abort with an EndTxn while the call is still out."""
    import kappaflow.runner.producer as producer_module

    monkeypatch.setattr(producer_module, "CALL_GRACE_S", 0.0)
    producer = StreamsProducer({}, True, None, api_timeout_s=0.2, factory=HangingOffsetsProducer)
    client = producer.producer

    def failing_flush() -> None:
        raise ValueError("a store flush failed")

    try:
        with pytest.raises(ProducerFencedError, match="did not return") as raised:
            producer.commit([TopicPartition("in", 0, 5)], "generation-7", failing_flush)
        assert isinstance(raised.value.__cause__, ValueError)
    finally:
        client.release.set()
