"""Tasks: a sub-topology partition bound to the runtime (processors, stores, queues, commits)."""

from kappaflow.tasks.global_task import GlobalTask
from kappaflow.tasks.task import RawRecord, StreamTask, TaskState

__all__ = ["GlobalTask", "RawRecord", "StreamTask", "TaskState"]
