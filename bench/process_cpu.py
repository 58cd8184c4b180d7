"""CPU seconds of the processes under this one, by role and by main or other threads, read from /proc.

A benchmark's wall time on two shared cores depends on who else uses them: Spark's JVM, its Python
workers, the broker. `snapshot()` before and after a run and `difference()` say how much CPU each took in
between, each split into its main thread and the rest (in a Python worker: librdkafka's threads, which
fetch and parse what a range reader reads). Linux only; a process that ended between the two snapshots
is missing from the second (its CPU is then not counted: Spark's workers live as long as the session,
the broker as long as the bench).
"""

from __future__ import annotations

import os
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def _stat_fields(path: Path) -> list[str] | None:
    try:
        text = path.read_text()
    except OSError:
        return None
    # comm may hold spaces and parentheses: the fields after it follow the last ')'.
    return text[text.rindex(")") + 2 :].split()


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _role(pid: int) -> str:
    command = _cmdline(pid)
    if "org.apache.spark" in command:
        return "spark jvm"
    if "kafka.Kafka" in command or "kafka_broker" in command or "kafka.server" in command:
        return "broker"
    if "daemon" in command and ("pyspark" in command or "kappaflow.spark" in command):
        return "python workers"
    if pid == os.getpid():
        return "this process"
    return "other"


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(entry / "stat")
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


def _cpu_seconds(stat: list[str]) -> float:
    return (int(stat[11]) + int(stat[12])) / _TICK  # utime, stime


def cpu_seconds_of(pid: int) -> float | None:
    """CPU seconds `pid` has taken so far (every thread, user and system); None once it is gone."""
    stat = _stat_fields(Path(f"/proc/{pid}/stat"))
    return None if stat is None else _cpu_seconds(stat)


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """CPU seconds so far of each live thread of `pid`: thread id -> (its name, seconds)."""
    found: dict[int, tuple[str, float]] = {}
    for entry in Path(f"/proc/{pid}/task").iterdir():
        try:
            text = (entry / "stat").read_text()
        except OSError:  # it ended between the listing and the read
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        found[int(entry.name)] = (name, _cpu_seconds(text[text.rindex(")") + 2 :].split()))
    return found


def thread_kind(name: str) -> str:
    """What a thread of a kappaflow process is, from the name its library gave it (Python's threads keep
    the process's name)."""
    if name.startswith("rdk:"):
        return "librdkafka"
    if name.startswith("rocksdb"):
        return "RocksDB"
    return "Python"


def snapshot(root: int | None = None) -> dict[tuple[str, str], float]:
    """CPU seconds so far per (role, thread) over `root` (this process) and its descendants.

    Thread is `main thread` or `other threads`: a process's total (which keeps the time of threads that
    have ended, such as a closed consumer's librdkafka threads) less its main thread's. A Python worker's
    role is inherited from the Spark daemon that forked it.
    """
    totals: dict[tuple[str, str], float] = {}
    roles: dict[int, str] = {}
    for pid in _descendants(root or os.getpid()):
        role = _role(pid)
        process = _stat_fields(Path(f"/proc/{pid}/stat"))
        main = _stat_fields(Path(f"/proc/{pid}/task/{pid}/stat"))
        if process is None or main is None:
            continue
        if role == "other":
            role = roles.get(int(process[1]), "other")  # a forked worker: its parent's role
        roles[pid] = role
        main_seconds = _cpu_seconds(main)
        for thread, seconds in (
            ("main thread", main_seconds),
            ("other threads", _cpu_seconds(process) - main_seconds),
        ):
            totals[(role, thread)] = totals.get((role, thread), 0.0) + seconds
    return totals


def difference(before: dict[tuple[str, str], float], after: dict[tuple[str, str], float]) -> list[str]:
    """Lines `role / thread kind: N.NN s` of the CPU taken between two snapshots, largest first."""
    spent = {key: after[key] - before.get(key, 0.0) for key in after}
    lines = [
        f"{role} / {kind}: {seconds:.2f} s"
        for (role, kind), seconds in sorted(spent.items(), key=lambda item: -item[1])
        if seconds >= 0.005
    ]
    lines.append(f"total: {sum(max(0.0, s) for s in spent.values()):.2f} s")
    return lines
