"""`JavaPriorityQueue`: a binary heap that hands out equal keys in the order java.util.PriorityQueue does.

Kafka Streams orders two things with a PriorityQueue compared by timestamp alone: the punctuation
schedules of a task (PunctuationQueue) and a task's non-empty input queues (PartitionGroup's
`nonEmptyQueuesByTime`). Which of several equal-time entries comes first is then decided by the heap's
sift rules, not by insertion order, and it is observable (which punctuator fires first, which partition's
record is processed first). This heap uses the same rules - siftUp moves an element above a strictly
larger parent, poll moves the last element down from the root, preferring the left child on a tie - so the
order is Java's record for record. `heapq` differs (its pop sifts to a leaf first).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class JavaPriorityQueue(Generic[T]):
    """Elements ordered by `key` (read when compared: an element's key must not change while queued)."""

    __slots__ = ("items", "key")

    def __init__(self, key: Callable[[T], int]) -> None:
        self.key = key
        self.items: list[T] = []  # the heap's array: its truthiness says whether anything is queued

    def offer(self, item: T) -> None:
        """java.util.PriorityQueue.offer (siftUp)."""
        heap, key = self.items, self.key
        heap.append(item)
        k = len(heap) - 1
        item_key = key(item)
        while k > 0:
            parent = (k - 1) >> 1
            if item_key >= key(heap[parent]):
                break
            heap[k] = heap[parent]
            k = parent
        heap[k] = item

    def peek(self) -> T | None:
        return self.items[0] if self.items else None

    def poll(self) -> T:
        """java.util.PriorityQueue.poll (siftDown of the last element from the root); the queue must not
        be empty."""
        heap, key = self.items, self.key
        first = heap[0]
        last = heap.pop()
        n = len(heap)
        if n:
            k, half = 0, n >> 1
            last_key = key(last)
            while k < half:
                child = 2 * k + 1
                right = child + 1
                if right < n and key(heap[child]) > key(heap[right]):
                    child = right
                if last_key <= key(heap[child]):
                    break
                heap[k] = heap[child]
                k = child
            heap[k] = last
        return first

    def __len__(self) -> int:
        return len(self.items)
