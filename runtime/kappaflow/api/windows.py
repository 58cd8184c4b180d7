"""Window and windowed-key value types shared by the DSL, the stores and the serdes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K")


@dataclass(frozen=True, slots=True, order=True)
class Window:
    """A time interval [start, end) in epoch milliseconds (session windows are inclusive of end)."""

    start: int
    end: int

    def overlaps(self, other: Window) -> bool:
        return self.start < other.end and other.start < self.end


@dataclass(frozen=True, slots=True)
class Windowed(Generic[K]):
    """A key in the context of a window: the result key of every windowed aggregation."""

    key: K
    window: Window

    def __repr__(self) -> str:
        return f"[{self.key!r}@{self.window.start}/{self.window.end}]"
