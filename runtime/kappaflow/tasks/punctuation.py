"""Punctuation schedules, with Kafka Streams' timing rules.

Stream-time schedules are aligned to 0 and fire as soon as stream time reaches them (so the first fires
with the first record); wall-clock schedules first fire one interval after scheduling. A schedule that
missed several intervals fires once and is realigned, never in a burst.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class PunctuationSchedule:
    node: Any
    interval: int
    callback: Callable[[int], None]
    timestamp: int
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True

    def advance(self, now: int) -> None:
        next_time = self.timestamp + self.interval
        if now >= next_time:
            missed = (now - self.timestamp) // self.interval
            next_time = self.timestamp + (missed + 1) * self.interval
        self.timestamp = next_time


class PunctuationQueue:
    def __init__(self) -> None:
        # one list for the queue's life (pruned in place), so the task's per-record loop can hold it and
        # test it for emptiness without a Python-level __len__ call per record
        self.schedules: list[PunctuationSchedule] = []

    def add(self, schedule: PunctuationSchedule) -> PunctuationSchedule:
        self.schedules.append(schedule)
        return schedule

    def due(self, now: int) -> list[PunctuationSchedule]:
        self.schedules[:] = [s for s in self.schedules if not s.cancelled]
        return sorted((s for s in self.schedules if s.timestamp <= now), key=lambda s: s.timestamp)

    def __len__(self) -> int:
        return len(self.schedules)
