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
_GAUGES = tuple((phase, f"{phase}-ratio") for phase in PHASES)


class LoopRatios:
    """Times the phases of one iteration (`begin`, `add` per phase, `publish` at its end).

    This runs on every iteration of the stream thread, so it costs no more than it must: `begin` returns
    the clock reading it took, for the loop to reuse as the start of its first phase (one clock read per
    phase boundary), and `publish` sets the gauges in one call on the registry."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._start = clock()
        self._spent = dict.fromkeys(PHASES, 0.0)

    def begin(self) -> float:
        """An iteration starts: nothing spent yet. Returns the clock's reading of the start."""
        self._start = start = self._clock()
        self._spent = dict.fromkeys(PHASES, 0.0)
        return start

    def add(self, phase: str, seconds: float) -> None:
        """`seconds` more spent in `phase` during this iteration."""
        try:
            self._spent[phase] += seconds
        except KeyError:
            raise ValueError(f"unknown loop phase {phase!r}; one of {', '.join(PHASES)}") from None

    def ratios(self) -> dict[str, float]:
        """Each phase's share of the iteration so far (0 for an iteration that took no measurable time),
        each in [0, 1]."""
        total = self._clock() - self._start
        if total <= 0:
            return dict.fromkeys(PHASES, 0.0)
        return {phase: min(1.0, max(0.0, spent / total)) for phase, spent in self._spent.items()}

    def publish(self, metrics: Metrics) -> None:
        """Set the `<phase>-ratio` gauges from this iteration."""
        ratios = self.ratios()
        metrics.set_gauges({gauge: ratios[phase] for phase, gauge in _GAUGES})
