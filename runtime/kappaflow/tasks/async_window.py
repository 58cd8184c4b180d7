"""`InFlightWindow`: the pure bookkeeping of one asynchronous node in one task.

It decides, without any I/O or clock, the three things the async semantics rest on:
- which accepted record's call may start now (at most `max_in_flight` calls run; under per-key
  ordering a key's next call starts only when its previous one completed, so calls of one key run in
  offset order);
- which completed records may be emitted, and in which order (as they complete; or, under per-partition
  ordering and whenever `release_in_offset_order` is set - exactly_once_v2 - the completed prefix of each
  input partition in offset order, so that everything emitted lies below the commit watermark);
- the commit watermark of each input partition: the offset of its oldest record not yet emitted, which
  offsets are committed up to (never past a record whose outputs are not out).

The node (`kappaflow.dsl.async_processors`) feeds it and acts on its answers; the tests drive it alone.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from kappaflow.api.async_calls import Ordering

Source = tuple[str, int]
"""An input partition `(topic, partition)`; records without one (a punctuation's) use `NO_SOURCE`."""
NO_SOURCE: Source = ("", -1)


@dataclass(slots=True, eq=False)
class InFlight:
    """One accepted record: where it came from, its key's token, what the node keeps with it, and how
    its call ended (`outcome`, set on completion)."""

    seq: int
    source: Source
    offset: int
    key: Hashable
    payload: Any
    started: bool = False
    done: bool = False
    released: bool = False
    outcome: Any = None
    cancel: Any = field(default=None)  # the executor's handle while the call runs


class InFlightWindow:
    """Accepted-but-not-emitted records of one node in one task (see the module docstring)."""

    def __init__(self, ordering: Ordering, max_in_flight: int, release_in_offset_order: bool) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, got {max_in_flight}")
        self.ordering = ordering
        self.max_in_flight = max_in_flight
        self.in_offset_order = release_in_offset_order or ordering is Ordering.PER_PARTITION
        self._next_seq = 0
        self._entries: dict[int, InFlight] = {}
        self._by_source: dict[Source, deque[InFlight]] = {}
        self._ready: deque[InFlight] = deque()  # may start as soon as a slot is free
        self._key_queues: dict[Hashable, deque[InFlight]] = {}  # per key: waiting behind a running call
        self._running = 0
        self._released: list[InFlight] = []

    # ----------------------------------------------------------------- counts
    @property
    def accepted(self) -> int:
        """Records accepted and not yet taken as released: what `max_in_flight` bounds."""
        return len(self._entries)

    @property
    def running(self) -> int:
        return self._running

    def free_slots(self) -> int:
        return max(0, self.max_in_flight - len(self._entries))

    def saturated(self) -> bool:
        return len(self._entries) >= self.max_in_flight

    def entries(self) -> list[InFlight]:
        """Every accepted record not taken yet, in acceptance order."""
        return [self._entries[s] for s in sorted(self._entries)]

    # ----------------------------------------------------------------- transitions
    def admit(self, source: Source, offset: int, key: Hashable, payload: Any) -> InFlight:
        """Accept a record; it starts when `startable()` hands it out."""
        entry = InFlight(self._next_seq, source, offset, key, payload)
        self._next_seq += 1
        self._entries[entry.seq] = entry
        self._by_source.setdefault(source, deque()).append(entry)
        if self.ordering is Ordering.PER_KEY:
            waiting = self._key_queues.get(key)
            if waiting is not None:  # a call of this key runs (or waits): this one waits behind it
                waiting.append(entry)
                return entry
            self._key_queues[key] = deque()
        self._ready.append(entry)
        return entry

    def startable(self) -> list[InFlight]:
        """The records whose calls start now (marked started), in acceptance order."""
        started: list[InFlight] = []
        while self._ready and self._running < self.max_in_flight:
            entry = self._ready.popleft()
            entry.started = True
            self._running += 1
            started.append(entry)
        return started

    def complete(self, seq: int, outcome: Any) -> bool:
        """The call of `seq` ended with `outcome`; False if the record is not held (cancelled)."""
        entry = self._entries.get(seq)
        if entry is None or entry.done or not entry.started:
            return False
        entry.done = True
        entry.outcome = outcome
        entry.cancel = None
        self._running -= 1
        if self.ordering is Ordering.PER_KEY:
            waiting = self._key_queues[entry.key]
            if waiting:
                self._ready.append(waiting.popleft())
            else:
                del self._key_queues[entry.key]
        if self.in_offset_order:
            queue = self._by_source[entry.source]
            while queue and queue[0].done:
                self._release(queue.popleft())
            if not queue:
                del self._by_source[entry.source]
        else:
            self._release(entry)
        return True

    def _release(self, entry: InFlight) -> None:
        entry.released = True
        self._released.append(entry)

    def take_released(self) -> list[InFlight]:
        """The records to emit now, in emission order; they leave the window."""
        released, self._released = self._released, []
        for entry in released:
            del self._entries[entry.seq]
        return released

    def watermark(self, source: Source) -> int | None:
        """The offset of the oldest record of `source` not emitted (None: none held): input offsets of
        `source` are committed up to it, not past it."""
        queue = self._by_source.get(source)
        while queue and queue[0].released:
            queue.popleft()
        if not queue:
            self._by_source.pop(source, None)
            return None
        return queue[0].offset

    def clear(self) -> list[InFlight]:
        """Drop every record held (the task is closing); return those whose calls still run, to cancel."""
        running = [e for e in self._entries.values() if e.started and not e.done]
        self._entries.clear()
        self._by_source.clear()
        self._ready.clear()
        self._key_queues.clear()
        self._released = []
        self._running = 0
        return running
