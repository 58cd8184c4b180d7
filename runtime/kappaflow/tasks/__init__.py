"""Tasks: a sub-topology partition bound to the runtime (processors, stores, queues, commits)."""

from kappaflow.tasks.drain import RawRecord
from kappaflow.tasks.global_task import GlobalTask
from kappaflow.tasks.task import StreamTask, TaskState

__all__ = ["GlobalTask", "RawRecord", "StreamTask", "TaskState"]
