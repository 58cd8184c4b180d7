"""The RocksDB stores that share one write buffer manager, and the flushes RocksDB leaves undone for them.

A write buffer manager (the bounded setter's, `rocksdb_config.BoundedMemoryConfigSetter`) counts the
memtables of every database that shares it. Once that count passes its flush trigger, RocksDB flushes a
memtable of the database being written, whatever its size, and never one of the others. A store that took
a burst of writes and then went quiet keeps its large memtable (no write of its own flushes it), and from
then on every write to another store flushes that store's memtable, however few entries it holds.

That is what the scaling table's 64-partition cells did (bench/scaling_cost.py, 1M new keys): nine stores
took their partitions' records before the budget filled and were not written again, keeping ~1.1 MiB
memtables to the end (~10 of the 16 MiB budget), and the other 55 stores flushed ~7,400 memtables of a
few hundred entries each, about one flush per 140 records. Kafka Streams' bounded-memory recipe does the
same (README, "Cost as partitions and keys grow").

The group knows every open store sharing the manager. After a write, once the manager's count is past the
trigger, it flushes (without waiting) the memtables that hold far more than the group's mean: the ones
RocksDB would not flush. It looks at most once per `SCAN_INTERVAL_S`, so a write pays a clock read
(and, past the trigger, a read of the manager's count) and no more.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Protocol

# RocksDB's write buffer manager asks for flushes once its memtables pass 7/8 of its budget.
TRIGGER_NUMERATOR, TRIGGER_DENOMINATOR = 7, 8
# A memtable holding this many times the group's mean is one RocksDB's own flushes are not reaching:
# memtables that writes keep flushing are spread from near empty to the largest, about twice the mean.
OUTSIZED_FACTOR = 2
# How often, at most, the group reads its memtables' sizes (a property read each, under RocksDB's
# mutex): past the trigger RocksDB flushes a memtable every few ms, so a few scans clear a burst's
# leftovers before many small flushes happen.
SCAN_INTERVAL_S = 0.01


def outsized_memtables(sizes: Sequence[int]) -> list[int]:
    """Indexes of the memtables holding at least `OUTSIZED_FACTOR` times the mean of `sizes` (none of an
    empty group or of a single store, whose own writes flush it)."""
    if len(sizes) < 2:
        return []
    floor = OUTSIZED_FACTOR * sum(sizes) / len(sizes)
    return [index for index, size in enumerate(sizes) if size > 0 and size >= floor]


class MemtableOwner(Protocol):
    """A store of the group: one RocksDB database written by its own thread."""

    def active_memtable_bytes(self) -> int:
        """The memory of its default column family's active memtable (0 once closed)."""
        ...

    def start_memtable_flush(self) -> None:
        """Ask RocksDB to flush that memtable, without waiting (nothing once closed)."""
        ...


class WriteBufferGroup:
    """The open stores whose databases share `manager` (a `rocksdict.WriteBufferManager` of
    `budget_bytes`).

    Stores of several stream threads may share one group: joining, leaving and flushing hold one lock, so
    a store is never flushed here while it closes. The group holds its stores weakly: a store dropped
    without closing still frees its database (and its directory's lock)."""

    def __init__(self, manager: Any, budget_bytes: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._manager = manager
        self._clock = clock
        self._trigger = budget_bytes * TRIGGER_NUMERATOR // TRIGGER_DENOMINATOR
        self._lock = threading.Lock()
        self._stores: weakref.WeakSet[MemtableOwner] = weakref.WeakSet()
        self._next_scan = 0.0
        self.flushes = 0  # flushes the group started (a count for tests and debugging)

    def join(self, store: MemtableOwner) -> None:
        """`store` opened its database with the shared manager."""
        with self._lock:
            self._stores.add(store)

    def leave(self, store: MemtableOwner) -> None:
        """`store` is about to close its database: the group no longer touches it once this returns."""
        with self._lock:
            self._stores.discard(store)

    def after_write(self) -> None:
        """A store of the group wrote: past the trigger, flush the memtables RocksDB's flushes miss."""
        now = self._clock()
        if now < self._next_scan or self._manager.get_usage() < self._trigger:
            return
        self._next_scan = now + SCAN_INTERVAL_S
        with self._lock:
            stores = list(self._stores)
            sizes = [store.active_memtable_bytes() for store in stores]
            for index in outsized_memtables(sizes):
                stores[index].start_memtable_flush()
                self.flushes += 1
