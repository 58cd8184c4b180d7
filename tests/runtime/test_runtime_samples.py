"""The metrics the stream thread samples on an interval (runner/samples.py): process CPU and memory, and
RocksDB directory sizes per task and store, exported with the right Prometheus types."""

from __future__ import annotations

import os
from pathlib import Path

from kappaflow.api.metrics import Metrics
from kappaflow.runner.http import prometheus_text
from kappaflow.runner.samples import directory_bytes, sample_process, sample_rocksdb_sizes


def _write(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)


def test_rocksdb_sizes_per_task_and_store_and_a_task_that_left_loses_its_series(tmp_path: Path) -> None:
    _write(tmp_path / "0_0" / "rocksdb" / "counts" / "000012.sst", 1000)
    _write(tmp_path / "0_0" / "rocksdb" / "counts" / "000013.log", 24)
    _write(tmp_path / "0_0" / "rocksdb" / "windows" / "seg.1" / "000001.sst", 500)  # nested segments
    _write(tmp_path / "0_0" / ".checkpoint", 7)  # not a store
    _write(tmp_path / "1_0" / "rocksdb" / "counts" / "000001.sst", 300)
    metrics = Metrics()
    tasks = [("0_0", tmp_path / "0_0"), ("1_0", tmp_path / "1_0"), ("2_0", tmp_path / "2_0")]
    sample_rocksdb_sizes(metrics, tasks)
    assert metrics.gauge("rocksdb-size-bytes", task="0_0", store="counts") == 1024
    assert metrics.gauge("rocksdb-size-bytes", task="0_0", store="windows") == 500
    assert metrics.gauge("rocksdb-size-bytes", task="1_0") == 300
    assert metrics.gauge("rocksdb-size-bytes", task="2_0") is None  # no state directory yet
    sample_rocksdb_sizes(metrics, tasks[:1])  # task 1_0 moved to another instance
    assert metrics.gauge("rocksdb-size-bytes", task="1_0") is None
    assert metrics.gauge("rocksdb-size-bytes") == 1524
    text = prometheus_text(metrics)
    assert "# TYPE kappaflow_rocksdb_size_bytes gauge" in text
    assert 'kappaflow_rocksdb_size_bytes{store="counts",task="0_0"} 1024.0' in text


def test_directory_bytes_of_a_missing_directory_is_zero(tmp_path: Path) -> None:
    assert directory_bytes(tmp_path / "gone") == 0


def test_process_cpu_is_a_counter_that_grows_and_memory_a_gauge() -> None:
    metrics = Metrics()
    sample_process(metrics)
    first = metrics.counter("process-cpu-seconds-total")
    sum(i * i for i in range(300_000))  # burn some CPU
    sample_process(metrics)
    assert metrics.counter("process-cpu-seconds-total") > first > 0
    rss = metrics.gauge("process-resident-memory-bytes")
    assert rss is not None and 10 * 2**20 < rss < 64 * 2**30
    with open(f"/proc/{os.getpid()}/status", encoding="ascii") as status:
        vm_rss_kb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    assert abs(rss - vm_rss_kb * 1024) < 0.2 * vm_rss_kb * 1024
    text = prometheus_text(metrics)
    assert "# TYPE kappaflow_process_cpu_seconds_total counter" in text
    assert "# TYPE kappaflow_process_resident_memory_bytes gauge" in text
    assert "# HELP kappaflow_process_cpu_seconds_total CPU time" in text


def test_store_operation_totals_are_exported_as_counters() -> None:
    metrics = Metrics()
    metrics.set_counter("state-store-get-total", 5, task="0_0", store="counts")
    metrics.set_counter("state-store-get-total", 7, task="0_0", store="counts")  # a cumulative total
    text = prometheus_text(metrics)
    assert "# TYPE kappaflow_state_store_get_total counter" in text
    assert 'kappaflow_state_store_get_total{store="counts",task="0_0"} 7.0' in text
