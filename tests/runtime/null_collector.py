"""A record collector that sends nowhere: for tests of a task's or the task manager's own bookkeeping,
where what the sinks and changelogs write is not what is checked."""

from __future__ import annotations

from typing import Any


class NullCollector:
    def send(self, *args: Any) -> None:
        pass

    def send_changelog(self, *args: Any) -> None:
        pass

    def partition_count(self, topic: str) -> int:
        return 1
