"""Where a Spark job's wall time goes, from Spark's own event log (`bench/reprocess.py --timeline`).

Spark writes one JSON event per line when `spark.eventLog.enabled` is set: stages submitted and
completed, and per task its launch and finish times with its metrics. This reads them back and prints,
per stage, its wall time next to what its tasks spent: the run time (for a PySpark task, the Python
worker's time included), the JVM's deserialization, shuffle write and fetch waits, result serialization
and garbage collection, and the scheduler's delay before the first task started. What a stage's wall time
holds beyond its tasks' work over the slots is Spark's own overhead on this machine.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class StageTimes:
    stage: int
    name: str
    submitted_ms: int = 0
    completed_ms: int = 0
    tasks: int = 0
    first_launch_ms: int | None = None
    run_ms: int = 0  # Executor Run Time: includes the Python worker's time in PySpark
    deserialize_ms: int = 0
    shuffle_write_ms: float = 0.0
    fetch_wait_ms: int = 0
    result_serialization_ms: int = 0
    gc_ms: int = 0
    task_wall_ms: list[int] = field(default_factory=list)

    @property
    def wall_ms(self) -> int:
        return self.completed_ms - self.submitted_ms


def event_lines(event_log: Path) -> list[str]:
    """The JSON lines of an event log: one file, or Spark's rolling log directory (`eventlog_v2_*`,
    files `events_<n>_<app>` in order)."""
    if not event_log.is_dir():
        return event_log.read_text().splitlines()
    files = sorted(event_log.glob("events_*"), key=lambda f: int(f.name.split("_")[1]))
    return [line for f in files for line in f.read_text().splitlines()]


def read_stages(event_log: Path) -> list[StageTimes]:
    """The stages of an event log, in submission order."""
    stages: dict[int, StageTimes] = {}
    for line in event_lines(event_log):
        event: dict[str, Any] = json.loads(line)
        kind = event.get("Event")
        if kind in ("SparkListenerStageSubmitted", "SparkListenerStageCompleted"):
            info = event["Stage Info"]
            stage = stages.setdefault(info["Stage ID"], StageTimes(info["Stage ID"], info["Stage Name"]))
            stage.submitted_ms = info.get("Submission Time", stage.submitted_ms)
            stage.completed_ms = info.get("Completion Time", stage.completed_ms)
        elif kind == "SparkListenerTaskEnd":
            stage = stages.setdefault(event["Stage ID"], StageTimes(event["Stage ID"], ""))
            task, metrics = event["Task Info"], event.get("Task Metrics") or {}
            stage.tasks += 1
            launch = task["Launch Time"]
            stage.first_launch_ms = (
                launch if stage.first_launch_ms is None else min(stage.first_launch_ms, launch)
            )
            stage.task_wall_ms.append(task["Finish Time"] - launch)
            stage.run_ms += metrics.get("Executor Run Time", 0)
            stage.deserialize_ms += metrics.get("Executor Deserialize Time", 0)
            stage.result_serialization_ms += metrics.get("Result Serialization Time", 0)
            stage.gc_ms += metrics.get("JVM GC Time", 0)
            shuffle_write = metrics.get("Shuffle Write Metrics") or {}
            stage.shuffle_write_ms += shuffle_write.get("Shuffle Write Time", 0) / 1e6  # nanoseconds
            stage.fetch_wait_ms += (metrics.get("Shuffle Read Metrics") or {}).get("Fetch Wait Time", 0)
    return sorted(stages.values(), key=lambda s: (s.submitted_ms, s.stage))


def report(stages: list[StageTimes], slots: int) -> list[str]:
    """One line per stage: wall time, its tasks' summed times, and what the slots leave unexplained."""
    lines = [
        f"{'stage':<8}{'tasks':>6}{'wall s':>8}{'sched s':>8}{'run s':>8}{'run/slots':>10}{'deser s':>8}"
        f"{'shuf w s':>9}{'fetch s':>8}{'gc s':>6}{'other s':>8}"
    ]
    for stage in stages:
        if not stage.tasks or not stage.completed_ms:
            continue
        delay = ((stage.first_launch_ms or stage.submitted_ms) - stage.submitted_ms) / 1000
        per_slot = stage.run_ms / 1000 / slots
        other = stage.wall_ms / 1000 - delay - per_slot
        seconds = [
            (stage.wall_ms / 1000, 8),
            (delay, 8),
            (stage.run_ms / 1000, 8),
            (per_slot, 10),
            (stage.deserialize_ms / 1000, 8),
            (stage.shuffle_write_ms / 1000, 9),
            (stage.fetch_wait_ms / 1000, 8),
            (stage.gc_ms / 1000, 6),
            (other, 8),
        ]
        lines.append(f"{stage.stage:<8}{stage.tasks:>6}" + "".join(f"{v:>{w}.2f}" for v, w in seconds))
    return lines


@dataclass
class TaskSpan:
    stage: int
    task: int
    launch_ms: int
    finish_ms: int
    run_ms: int


def read_tasks(event_log: Path) -> tuple[list[TaskSpan], list[tuple[int, int, int]]]:
    """Every task's launch and finish, and every job's (id, submitted, completed) ms, from an event log."""
    tasks: list[TaskSpan] = []
    jobs: dict[int, list[int]] = {}
    for line in event_lines(event_log):
        event: dict[str, Any] = json.loads(line)
        kind = event.get("Event")
        if kind == "SparkListenerTaskEnd":
            info, metrics = event["Task Info"], event.get("Task Metrics") or {}
            tasks.append(
                TaskSpan(
                    event["Stage ID"],
                    info["Task ID"],
                    info["Launch Time"],
                    info["Finish Time"],
                    metrics.get("Executor Run Time", 0),
                )
            )
        elif kind == "SparkListenerJobStart":
            jobs.setdefault(event["Job ID"], [0, 0])[0] = event["Submission Time"]
        elif kind == "SparkListenerJobEnd":
            jobs.setdefault(event["Job ID"], [0, 0])[1] = event["Completion Time"]
    return sorted(tasks, key=lambda t: t.launch_ms), [(j, s, e) for j, (s, e) in sorted(jobs.items())]


def occupancy(tasks: list[TaskSpan], slots: int, start_ms: int, end_ms: int) -> list[tuple[int, int, int]]:
    """(from, to, busy slots) intervals over [start, end): where fewer than `slots` ran, a core idled."""
    edges = sorted({start_ms, end_ms, *(t.launch_ms for t in tasks), *(t.finish_ms for t in tasks)})
    spans = []
    for lo, hi in itertools.pairwise(edges):
        if lo < start_ms or hi > end_ms:
            continue
        busy = sum(1 for t in tasks if t.launch_ms <= lo and t.finish_ms >= hi)
        if spans and spans[-1][2] == min(busy, slots) and spans[-1][1] == lo:
            spans[-1] = (spans[-1][0], hi, spans[-1][2])
        else:
            spans.append((lo, hi, min(busy, slots)))
    return spans


def task_report(event_log: Path, slots: int) -> list[str]:
    """Each job and task against the first job's submission, then the seconds at each number of busy
    slots: the time some core idled, and in which gaps."""
    tasks, jobs = read_tasks(event_log)
    if not tasks or not jobs:
        return []
    origin = min(s for _j, s, _e in jobs if s) if any(s for _j, s, _e in jobs) else tasks[0].launch_ms
    end = max(max(e for _j, _s, e in jobs), max(t.finish_ms for t in tasks))
    lines = [f"job {j}: {(s - origin) / 1000:7.2f} - {(e - origin) / 1000:7.2f} s" for j, s, e in jobs]
    for t in tasks:
        lines.append(
            f"  stage {t.stage:>3} task {t.task:>3}: {(t.launch_ms - origin) / 1000:7.2f} - "
            f"{(t.finish_ms - origin) / 1000:7.2f} s (run {t.run_ms / 1000:.2f})"
        )
    spans = occupancy(tasks, slots, origin, end)
    totals: dict[int, float] = {}
    for lo, hi, busy in spans:
        totals[busy] = totals.get(busy, 0.0) + (hi - lo) / 1000
    lines.append(
        "busy slots: "
        + ", ".join(f"{b}: {s:.2f} s" for b, s in sorted(totals.items()))
        + f" of {(end - origin) / 1000:.2f} s"
    )
    for lo, hi, busy in spans:
        if busy < slots and hi - lo >= 50:
            lines.append(f"  {busy} busy {(lo - origin) / 1000:7.2f} - {(hi - origin) / 1000:7.2f} s")
    return lines


if __name__ == "__main__":
    import sys

    for log_path in sys.argv[2:]:
        print("\n".join(task_report(Path(log_path), int(sys.argv[1]))))
