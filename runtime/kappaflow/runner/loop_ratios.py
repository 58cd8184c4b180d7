"""The stream thread's time ratios: the share of one loop iteration spent polling, restoring, processing,
punctuating and committing (Kafka Streams' thread-level `poll-ratio`, `process-ratio`, `punctuate-ratio`,
`commit-ratio`, and the state updater's `restore-ratio`).

Autoscalers read them: a thread whose process ratio is near 1 is saturated, one whose poll ratio is near
1 waits for input. As in Java (`StreamThread.runOnce`, sensors with a `Value` stat), each ratio is the
phase's time over the whole iteration's, published once per iteration, so a scrape sees the last
iteration's split. The arithmetic is here, apart from the loop that measures, so it can be tested with
a fake clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kappaflow.api.metrics import Metrics

PHASES = ("poll", "restore", "process", "punctuate", "commit")
"""The phases timed, each exported as the gauge `<phase>-ratio`."""
_GAUGES = tuple(f"{phase}-ratio" for phase in PHASES)


class LoopRatios:
    """The last iteration's split between the phases, as the `<phase>-ratio` gauges of `metrics`.

    It runs on every iteration of the stream thread, so an iteration costs one call (`record`) and one
    clock reading here: the loop times its phases with the clock readings it takes at their boundaries
    anyway, and the gauges are computed from the last iteration when the registry is read
    (`Metrics.set_gauge_source`): a scrape sees the last iteration's split, as it did when every
    iteration set the five gauges, and the iterations between scrapes pay no division and no update."""

    def __init__(self, metrics: Metrics, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        # the last finished iteration: (seconds per phase in PHASES order, its whole length); one tuple,
        # so a reader on another thread (an HTTP scrape) never sees one iteration's phases with
        # another's length
        self._last: tuple[tuple[float, ...], float] | None = None
        metrics.set_gauge_source("loop-ratios", self._gauges)

    def record(
        self, start: float, poll: float, restore: float, process: float, punctuate: float, commit: float
    ) -> None:
        """An iteration that began at `start` (a reading of the clock) ends now, having spent those
        seconds in each phase."""
        self._last = ((poll, restore, process, punctuate, commit), self._clock() - start)

    def ratios(self) -> dict[str, float]:
        """Each phase's share of the last iteration, each in [0, 1] (all 0 before the first iteration
        and for an iteration that took no measurable time)."""
        last = self._last
        if last is None or last[1] <= 0:
            return dict.fromkeys(PHASES, 0.0)
        spent, total = last
        return {
            phase: min(1.0, max(0.0, seconds / total)) for phase, seconds in zip(PHASES, spent, strict=True)
        }

    def _gauges(self) -> dict[str, float]:
        if self._last is None:  # no gauge before the first iteration
            return {}
        return dict(zip(_GAUGES, self.ratios().values(), strict=True))
