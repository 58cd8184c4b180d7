"""Punctuation schedules, with Kafka Streams' timing rules and its queue (`PunctuationQueue`).

Stream-time schedules are aligned to 0 and fire as soon as stream time reaches them (so the first fires
with the first record); wall-clock schedules first fire one interval after scheduling. A schedule that
missed several intervals fires once and is realigned, never in a burst.

One round (`PunctuationQueue.punctuate`) is Java's `maybePunctuate`: take the earliest schedule while it
is due, skip it if it was cancelled, run it, put it back at its next time unless it cancelled itself. So
a schedule added during the round (a stream-time one starts at 0) fires in the same round, and one
cancelled earlier in the round does not fire. The queue is a binary heap ordered by timestamp alone with
java.util.PriorityQueue's sift rules, so schedules due at the same time fire in the order Java's heap
hands them out (not necessarily the order they were scheduled), record for record as in Java.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


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


class PunctuationQueue:
    def __init__(self) -> None:
        # the heap's array, one list for the queue's life, so the task's per-record loop can hold it and
        # test it for emptiness without a Python-level __len__ call per record; a cancelled schedule stays
        # until it comes due (as in Java), then it is dropped
        self.schedules: list[PunctuationSchedule] = []

    def add(self, schedule: PunctuationSchedule) -> PunctuationSchedule:
        heap = self.schedules
        heap.append(schedule)
        # java.util.PriorityQueue.siftUp: move up while strictly earlier than the parent
        k = len(heap) - 1
        while k > 0:
            parent = (k - 1) >> 1
            if schedule.timestamp >= heap[parent].timestamp:
                break
            heap[k] = heap[parent]
            k = parent
        heap[k] = schedule
        return schedule

    def _poll(self) -> PunctuationSchedule:
        heap = self.schedules
        first = heap[0]
        last = heap.pop()
        n = len(heap)
        if n:
            # java.util.PriorityQueue.siftDown of the last element from the root
            k, half = 0, n >> 1
            while k < half:
                child = 2 * k + 1
                right = child + 1
                if right < n and heap[child].timestamp > heap[right].timestamp:
                    child = right
                if last.timestamp <= heap[child].timestamp:
                    break
                heap[k] = heap[child]
                k = child
            heap[k] = last
        return first

    def punctuate(self, now: int, run: Callable[[PunctuationSchedule], None]) -> bool:
        """One round at `now`: `run` every due schedule, earliest first (see the module docstring);
        whether any ran."""
        heap = self.schedules
        fired = False
        while heap and heap[0].timestamp <= now:
            schedule = self._poll()
            if schedule.cancelled:
                continue
            run(schedule)
            if not schedule.cancelled:  # it may cancel itself
                schedule.advance(now)
                self.add(schedule)
            fired = True
        return fired

    def __len__(self) -> int:
        return len(self.schedules)
