"""KIP-1106, `AutoOffsetReset`: where a source starts reading a partition its group has never committed.

Why per source: one application often reads a history topic from the beginning and a live feed from its
end, or only the last hours of a large topic. Kafka Streams 4.x takes the policy per source
(`Consumed.withOffsetResetPolicy`); a source without one follows `auto.offset.reset` (earliest by
default). Internal topics (repartition, changelogs) always start at the beginning.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from kappaflow.api.errors import TopologyError
from kappaflow.api.processor import to_millis

ResetKind = Literal["earliest", "latest", "none", "by_duration"]


@dataclass(frozen=True)
class AutoOffsetReset:
    """Java's `AutoOffsetReset`: `earliest()`, `latest()`, `none()` (no committed offset is an error) or
    `by_duration(d)` (the first record at or after now - d; the end when there is none)."""

    kind: ResetKind
    duration_ms: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("earliest", "latest", "none", "by_duration"):
            raise TopologyError(f"AutoOffsetReset: unknown policy {self.kind!r}")
        if (self.kind == "by_duration") != (self.duration_ms is not None):
            raise TopologyError("AutoOffsetReset: a duration goes with by_duration only")
        if self.duration_ms is not None and self.duration_ms < 0:
            raise TopologyError(
                f"AutoOffsetReset.by_duration: duration must not be negative, got {self.duration_ms}"
            )

    @staticmethod
    def earliest() -> AutoOffsetReset:
        """From the first record still in the partition."""
        return AutoOffsetReset("earliest")

    @staticmethod
    def latest() -> AutoOffsetReset:
        """From the end: only records written after the position is taken."""
        return AutoOffsetReset("latest")

    @staticmethod
    def none() -> AutoOffsetReset:
        """No start of its own: a partition without a committed offset is an error."""
        return AutoOffsetReset("none")

    @staticmethod
    def by_duration(duration: timedelta | int) -> AutoOffsetReset:
        """From the first record at or after now - `duration` (the end when there is none)."""
        return AutoOffsetReset("by_duration", to_millis(duration, "AutoOffsetReset.by_duration"))
