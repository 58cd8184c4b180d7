"""Window specifications, named as in Kafka Streams: TimeWindows, SlidingWindows, SessionWindows and
JoinWindows. Durations are `timedelta` or integer milliseconds. Each says which windows a timestamp
falls in and how long its windows must be retained (size + grace) so late records can still update them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta

from kappaflow.api.processor import to_millis
from kappaflow.api.windows import Window

Duration = timedelta | int


def _positive(value: Duration, what: str) -> int:
    millis = to_millis(value, what)
    if millis <= 0:
        raise ValueError(f"{what} must be positive, got {millis} ms")
    return millis


def _non_negative(value: Duration, what: str) -> int:
    millis = to_millis(value, what)
    if millis < 0:
        raise ValueError(f"{what} must not be negative, got {millis} ms")
    return millis


@dataclass(frozen=True)
class TimeWindows:
    """Fixed-size windows: tumbling (advance == size) or hopping (`advance_by(step)`), aligned to the
    epoch; [start, end) with end exclusive."""

    size_ms: int
    advance_ms: int
    grace_ms: int

    @staticmethod
    def of_size_with_no_grace(size: Duration) -> TimeWindows:
        millis = _positive(size, "window size")
        return TimeWindows(millis, millis, 0)

    @staticmethod
    def of_size_and_grace(size: Duration, grace: Duration) -> TimeWindows:
        millis = _positive(size, "window size")
        return TimeWindows(millis, millis, _non_negative(grace, "grace period"))

    def advance_by(self, advance: Duration) -> TimeWindows:
        millis = _positive(advance, "advance")
        if millis > self.size_ms:
            raise ValueError(f"advance ({millis} ms) must not exceed the window size ({self.size_ms} ms)")
        return replace(self, advance_ms=millis)

    def size(self) -> int:
        return self.size_ms

    def grace_period_ms(self) -> int:
        return self.grace_ms

    def windows_for(self, timestamp: int) -> dict[int, Window]:
        """Every window containing `timestamp`, by start (windows starting before 0 do not exist)."""
        start = max(0, timestamp - self.size_ms + self.advance_ms) // self.advance_ms * self.advance_ms
        result: dict[int, Window] = {}
        while start <= timestamp:
            result[start] = Window(start, start + self.size_ms)
            start += self.advance_ms
        return result


@dataclass(frozen=True)
class SlidingWindows:
    """Windows of `time_difference` defined by the records themselves: two records are in a common
    window when their timestamps differ by at most the time difference (both ends inclusive)."""

    time_difference_ms: int
    grace_ms: int

    @staticmethod
    def of_time_difference_without_grace(time_difference: Duration) -> SlidingWindows:
        return SlidingWindows(_positive(time_difference, "time difference"), 0)

    @staticmethod
    def of_time_difference_and_grace(time_difference: Duration, grace: Duration) -> SlidingWindows:
        return SlidingWindows(
            _positive(time_difference, "time difference"), _non_negative(grace, "grace period")
        )

    def size(self) -> int:
        return self.time_difference_ms

    def grace_period_ms(self) -> int:
        return self.grace_ms


@dataclass(frozen=True)
class SessionWindows:
    """Sessions: records of a key closer than the inactivity gap belong to one session [first, last]."""

    gap_ms: int
    grace_ms: int

    @staticmethod
    def of_inactivity_gap_with_no_grace(gap: Duration) -> SessionWindows:
        return SessionWindows(_positive(gap, "inactivity gap"), 0)

    @staticmethod
    def of_inactivity_gap_and_grace(gap: Duration, grace: Duration) -> SessionWindows:
        return SessionWindows(_positive(gap, "inactivity gap"), _non_negative(grace, "grace period"))

    def inactivity_gap(self) -> int:
        return self.gap_ms

    def grace_period_ms(self) -> int:
        return self.grace_ms


@dataclass(frozen=True)
class JoinWindows:
    """A record at time t joins records of the other stream in [t - before, t + after], both inclusive;
    `of_time_difference_*` makes before == after."""

    before_ms: int
    after_ms: int
    grace_ms: int

    @staticmethod
    def of_time_difference_without_grace(time_difference: Duration) -> JoinWindows:
        millis = _non_negative(time_difference, "time difference")
        return JoinWindows(millis, millis, 0)

    @staticmethod
    def of_time_difference_and_grace(time_difference: Duration, grace: Duration) -> JoinWindows:
        millis = _non_negative(time_difference, "time difference")
        return JoinWindows(millis, millis, _non_negative(grace, "grace period"))

    def before(self, time_difference: Duration) -> JoinWindows:
        return replace(self, before_ms=_non_negative(time_difference, "before"))

    def after(self, time_difference: Duration) -> JoinWindows:
        return replace(self, after_ms=_non_negative(time_difference, "after"))

    def size(self) -> int:
        return self.before_ms + self.after_ms

    def grace_period_ms(self) -> int:
        return self.grace_ms
