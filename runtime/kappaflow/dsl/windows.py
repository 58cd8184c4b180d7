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
        """Tumbling windows of `size` (hopping once `advance_by` is given) that accept no late records."""
        millis = _positive(size, "window size")
        return TimeWindows(millis, millis, 0)

    @staticmethod
    def of_size_and_grace(size: Duration, grace: Duration) -> TimeWindows:
        """Tumbling windows of `size` that still accept records up to `grace` after a window ends (in stream
        time)."""
        millis = _positive(size, "window size")
        return TimeWindows(millis, millis, _non_negative(grace, "grace period"))

    def advance_by(self, advance: Duration) -> TimeWindows:
        """Hopping windows: a new window starts every `advance` (at most the size)."""
        millis = _positive(advance, "advance")
        if millis > self.size_ms:
            raise ValueError(f"advance ({millis} ms) must not exceed the window size ({self.size_ms} ms)")
        return replace(self, advance_ms=millis)

    def size(self) -> int:
        """The window size, in milliseconds."""
        return self.size_ms

    def grace_period_ms(self) -> int:
        """How long after a window's end it still accepts records, in milliseconds."""
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
        """Sliding windows: records are in a window together when their timestamps differ by at most
        `time_difference`; no late records."""
        return SlidingWindows(_positive(time_difference, "time difference"), 0)

    @staticmethod
    def of_time_difference_and_grace(time_difference: Duration, grace: Duration) -> SlidingWindows:
        """Sliding windows with a grace period for late records."""
        return SlidingWindows(
            _positive(time_difference, "time difference"), _non_negative(grace, "grace period")
        )

    def size(self) -> int:
        """The window size (the maximum time difference), in milliseconds."""
        return self.time_difference_ms

    def grace_period_ms(self) -> int:
        """How long after a window's end it still accepts records, in milliseconds."""
        return self.grace_ms


@dataclass(frozen=True)
class SessionWindows:
    """Sessions: records of a key closer than the inactivity gap belong to one session [first, last]."""

    gap_ms: int
    grace_ms: int

    @staticmethod
    def of_inactivity_gap_with_no_grace(gap: Duration) -> SessionWindows:
        """Session windows: records of a key closer than `gap` in time are one session; no late records."""
        return SessionWindows(_positive(gap, "inactivity gap"), 0)

    @staticmethod
    def of_inactivity_gap_and_grace(gap: Duration, grace: Duration) -> SessionWindows:
        """Session windows with a grace period for late records."""
        return SessionWindows(_positive(gap, "inactivity gap"), _non_negative(grace, "grace period"))

    def inactivity_gap(self) -> int:
        """The inactivity gap that closes a session, in milliseconds."""
        return self.gap_ms

    def grace_period_ms(self) -> int:
        """How long after a session's end it still accepts records, in milliseconds."""
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
        """Stream-stream join windows: records join when their timestamps differ by at most `time_difference`;
        no late records."""
        millis = _non_negative(time_difference, "time difference")
        return JoinWindows(millis, millis, 0)

    @staticmethod
    def of_time_difference_and_grace(time_difference: Duration, grace: Duration) -> JoinWindows:
        """Stream-stream join windows with a grace period for late records."""
        millis = _non_negative(time_difference, "time difference")
        return JoinWindows(millis, millis, _non_negative(grace, "grace period"))

    def before(self, time_difference: Duration) -> JoinWindows:
        """A window that reaches `before` back in time from the left record (instead of the symmetric time
        difference)."""
        return replace(self, before_ms=_non_negative(time_difference, "before"))

    def after(self, time_difference: Duration) -> JoinWindows:
        """A window that reaches `after` forward in time from the left record."""
        return replace(self, after_ms=_non_negative(time_difference, "after"))

    def size(self) -> int:
        """The window size, before plus after, in milliseconds."""
        return self.before_ms + self.after_ms

    def grace_period_ms(self) -> int:
        """How long after a window's end it still accepts records, in milliseconds."""
        return self.grace_ms
