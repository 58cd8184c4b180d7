"""Progress of a reprocessing stage while Spark runs it, and the warning about live output topics.

A stage over a large retained log runs for minutes with nothing to say until it ends; the driver's
SparkContext knows how many of the stage's Spark tasks are done, so a thread asks it every interval and
reports one line. The counting and the text are pure (`stage_progress_text`); `StageProgress` is the
thread around them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_INTERVAL_S = 10.0


@dataclass(frozen=True)
class SparkTasks:
    total: int
    done: int
    running: int
    failed: int


def count_tasks(stage_infos: Iterable[Any]) -> SparkTasks:
    """Spark tasks of the active Spark stages (`SparkStageInfo`s), summed."""
    infos = [i for i in stage_infos if i is not None]
    return SparkTasks(
        sum(i.numTasks for i in infos),
        sum(i.numCompletedTasks for i in infos),
        sum(i.numActiveTasks for i in infos),
        sum(i.numFailedTasks for i in infos),
    )


def stage_progress_text(label: str, tasks: SparkTasks, seconds: float) -> str:
    failed = f", {tasks.failed} failed" if tasks.failed else ""
    return (
        f"{label}: {tasks.done}/{tasks.total} Spark tasks done, {tasks.running} running{failed} "
        f"({seconds:.0f}s)"
    )


class StageProgress:
    """While the `with` block runs, report `label`'s Spark tasks every `interval_s` through `report`."""

    def __init__(
        self, spark: Any, label: str, report: Callable[[str], None], interval_s: float = DEFAULT_INTERVAL_S
    ) -> None:
        self._tracker = spark.sparkContext.statusTracker()
        self._label, self._report, self._interval_s = label, report, interval_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kappaflow-stage-progress", daemon=True)
        self._started = time.monotonic()

    def __enter__(self) -> StageProgress:
        if self._interval_s > 0:
            self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _run(self) -> None:
        while not self._done.wait(self._interval_s):
            try:
                ids = self._tracker.getActiveStageIds()
                tasks = count_tasks(self._tracker.getStageInfo(i) for i in ids)
            except Exception:  # the context is stopping: the stage's own end will be reported
                return
            if tasks.total and not self._done.is_set():
                self._report(stage_progress_text(self._label, tasks, time.monotonic() - self._started))


def live_output_warning(
    outputs: Iterable[str], output_map: Mapping[str, str], skip_outputs: bool
) -> str | None:
    """The warning `kappaflow reprocess` gives before writing to output topics that are not redirected:
    they are the live application's, and their readers will see every rebuilt record again."""
    live = sorted(t for t in outputs if t not in output_map)
    if skip_outputs or not live:
        return None
    example = ", ".join(f"--output-map {t}={t}-reprocessed" for t in live)
    return (
        f"reprocess writes to the live output topic(s) {', '.join(live)}: their consumers will read every "
        f"rebuilt record again. To write elsewhere: {example} (create those topics first); to rebuild "
        "state only: --skip-outputs"
    )
