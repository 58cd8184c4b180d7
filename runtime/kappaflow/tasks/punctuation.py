"""Punctuation schedules, with Kafka Streams' timing rules and its queue (`PunctuationQueue`).

Stream-time schedules are aligned to 0 and fire as soon as stream time reaches them (so the first fires
with the first record); wall-clock schedules first fire one interval after scheduling. A schedule that
missed several intervals fires once and is realigned, never in a burst.

One round (`PunctuationQueue.punctuate`) is Java's `maybePunctuate`: take the earliest schedule while it
is due, skip it if it was cancelled, run it, put it back at its next time unless it cancelled itself. So
a schedule added during the round (a stream-time one starts at 0) fires in the same round, and one
cancelled earlier in the round does not fire. The queue is a binary heap ordered by timestamp alone with
java.util.PriorityQueue's sift rules (`kappaflow.tasks.java_heap`), so schedules due at the same time fire
in the order Java's heap hands them out (not necessarily the order they were scheduled), as in Java.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kappaflow.tasks.java_heap import JavaPriorityQueue


@dataclass(eq=False)
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


def _timestamp(schedule: PunctuationSchedule) -> int:
    return schedule.timestamp


class PunctuationQueue:
    def __init__(self) -> None:
        self._heap: JavaPriorityQueue[PunctuationSchedule] = JavaPriorityQueue(_timestamp)
        # the heap's array, one list for the queue's life, so the task's per-record loop can hold it and
        # test it for emptiness without a Python-level __len__ call per record; a cancelled schedule stays
        # until it comes due (as in Java), then it is dropped
        self.schedules: list[PunctuationSchedule] = self._heap.items

    def add(self, schedule: PunctuationSchedule) -> PunctuationSchedule:
        self._heap.offer(schedule)
        return schedule

    def punctuate(self, now: int, run: Callable[[PunctuationSchedule], None]) -> bool:
        """One round at `now`: `run` every due schedule, earliest first (see the module docstring);
        whether any ran."""
        heap, due = self._heap, self.schedules
        fired = False
        while due and due[0].timestamp <= now:
            schedule = heap.poll()
            if schedule.cancelled:
                continue
            run(schedule)
            if not schedule.cancelled:  # it may cancel itself
                schedule.advance(now)
                heap.offer(schedule)
            fired = True
        return fired

    def __len__(self) -> int:
        return len(self.schedules)
