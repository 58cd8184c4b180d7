"""Metrics sampled on an interval by the stream thread, never per record: the OS process's CPU time and
resident memory, and the bytes each task's RocksDB stores hold on disk.

Kafka Streams users read these from the JVM's and RocksDB's own metrics (`process_cpu_seconds_total`,
`jvm_memory_*`, `total-sst-files-size`); a Python process has neither exporter, so the stream thread
samples them every `SAMPLE_INTERVAL_S` into the same registry as the rest. With worker processes
(`num.stream.threads` > 1) each worker samples itself and its series carry the worker's `thread_id`.
A store's size is the size of its directory under `<task dir>/rocksdb/` (SST files, write-ahead log,
manifest): what the state volume has to hold, for key-value, window and session stores alike.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterable
from pathlib import Path

from kappaflow.api.metrics import Metrics

SAMPLE_INTERVAL_S = 5.0
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_memory_bytes() -> float:
    """The process's resident set size now (/proc/self/statm on Linux; elsewhere the peak, which is what
    getrusage offers)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return float(int(statm.read().split()[1]) * _PAGE_SIZE)
    except (OSError, IndexError, ValueError):
        return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)


def sample_process(metrics: Metrics) -> None:
    """CPU seconds (user + system, every thread of the process: librdkafka's too) and resident memory."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    metrics.set_counter("process-cpu-seconds-total", usage.ru_utime + usage.ru_stime)
    metrics.set_gauge("process-resident-memory-bytes", resident_memory_bytes())


def directory_bytes(path: Path) -> int:
    """Bytes of the regular files under `path` (0 when it does not exist, as while a store is reset)."""
    total = 0
    try:
        entries = list(os.scandir(path))
    except OSError:
        return 0
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                total += directory_bytes(Path(entry.path))
            elif entry.is_file(follow_symlinks=False):
                total += entry.stat(follow_symlinks=False).st_size
        except OSError:  # compaction deleted it between the listing and the stat
            continue
    return total


def sample_rocksdb_sizes(metrics: Metrics, task_dirs: Iterable[tuple[str, Path]]) -> None:
    """`rocksdb-size-bytes` per (task, store) for the tasks this thread holds (active and standby).
    A task that moved away keeps no series: its gauges are removed, not left frozen on the old owner."""
    seen: set[tuple[str, str]] = set()
    for task, task_dir in task_dirs:
        root = task_dir / "rocksdb"
        try:
            stores = [entry for entry in os.scandir(root) if entry.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        for store in stores:
            seen.add((task, store.name))
            metrics.set_gauge(
                "rocksdb-size-bytes", float(directory_bytes(Path(store.path))), task=task, store=store.name
            )
    metrics.retain_gauge(
        "rocksdb-size-bytes", lambda labels: (labels.get("task", ""), labels.get("store", "")) in seen
    )
