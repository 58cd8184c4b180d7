"""The task manager's running and restoring tasks are kept between changes, not worked out per ask (the
stream thread asks several times an iteration). Kept wrong, the loop would skip a task that finished
restoring, or process one that was closed: every change of a task's state must show at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from examples.wordcount import build_topology

from kappaflow.api.config import StreamsConfig
from kappaflow.api.metrics import Metrics
from kappaflow.api.processor import TaskId
from kappaflow.runner.managed_task import ManagedTask
from kappaflow.runner.tasks import TaskManager
from kappaflow.tasks.task import TaskState
from tests.runtime.null_collector import NullCollector


class _Reader:
    """The changelog reader's part in opening and restoring: every task registered is pending (restoring)
    until `finish` hands it to the next `step`, which completes its restoration as the reader does."""

    def __init__(self) -> None:
        self.registered: list[ManagedTask] = []
        self.finished: list[ManagedTask] = []

    def look_up(self, managers: list[Any]) -> None:
        return None

    def register(self, managed: ManagedTask, known: Any = None) -> None:
        managed.pending = {("changelog", managed.task.id.partition)}
        self.registered.append(managed)

    def unregister(self, managed: ManagedTask) -> None:
        pass

    def remaining_text(self, managed: ManagedTask) -> str:
        return "1 record"

    def finish(self, task_id: TaskId) -> None:
        self.finished.extend(m for m in self.registered if m.task.id == task_id)

    def step(self, max_records: int, timeout: float) -> list[ManagedTask]:
        done, self.finished = self.finished, []
        for managed in done:
            managed.pending.clear()
            managed.task.complete_restoration()
        return done


def test_running_and_restoring_follow_every_open_restoration_and_close(tmp_path: Path) -> None:
    config = StreamsConfig({"application.id": "states", "state.dir": str(tmp_path)})
    reader = _Reader()
    tm = TaskManager(
        build_topology(),
        config,
        NullCollector(),
        None,
        Metrics(),
        reader,
        lambda: 0,  # type: ignore[arg-type]
    )
    a, b = TaskId(1, 0), TaskId(1, 1)
    assert tm.running() == [] and tm.restoring() == []
    tm.create_actives([a, b])
    assert tm.running() == []
    assert [m.task.id for m in tm.restoring()] == [a, b]
    assert tm.publish_task_counts() == 2

    reader.finish(a)
    assert [m.task.id for m in tm.restore_step()] == [a]
    assert [t.id for t in tm.running()] == [a]
    assert [m.task.id for m in tm.restoring()] == [b]
    assert tm.running_with_async() == []  # the word count has no asynchronous nodes

    reader.finish(b)
    tm.restore_step()
    assert [t.id for t in tm.running()] == [a, b] and tm.restoring() == []
    assert tm.publish_task_counts() == 0

    closed = tm.running()[0]
    tm.close_active(a, clean=True)
    assert closed.state is TaskState.CLOSED
    assert [t.id for t in tm.running()] == [b]
    tm.close_active(b, clean=True)
    assert tm.running() == [] and tm.restoring() == []
