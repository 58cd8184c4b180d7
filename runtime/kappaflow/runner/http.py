"""Health and metrics over HTTP: GET /health/live, /health/ready and /metrics (Prometheus text format).

Liveness is "the stream thread has not died" and readiness is "every active task is restored and
running" (state RUNNING), which is what Kubernetes probes and rolling upgrades need. The exposition is
written from the in-process Metrics registry directly, so tasks and stores never import a metrics
library and the format stays a few lines of code (counters end in `_total`, labels are escaped).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kappaflow.api.metrics import Metrics


def _metric_name(name: str) -> str:
    cleaned = "".join(c if c.isalnum() else "_" for c in name)
    return f"kappaflow_{cleaned}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _series(name: str, labels: tuple[tuple[str, str], ...], value: float) -> str:
    if labels:
        inner = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels)
        return f"{name}{{{inner}}} {float(value)!r}"
    return f"{name} {float(value)!r}"


# `# HELP` text per metric (docs/operations.md has the same table); others get a generic line.
HELP: dict[str, str] = {
    "process-records-total": "Records processed by this instance",
    "records-processed-total": "Records processed per task",
    "process-seconds-total": "Time spent processing records, in seconds",
    "process-latency-avg-ms": "Average processing time per record in the last batch, in milliseconds",
    "poll-loops-total": "Poll loops that processed records",
    "records-sent-total": "Records sent to Kafka: output, repartition, changelog and dead-letter topics",
    "enforced-processing-total": "Records processed while an input partition was empty (max.task.idle.ms)",
    "commit-total": "Commits",
    "commit-seconds-total": "Time spent committing, in seconds",
    "commit-latency-ms": "Duration of the last commit, in milliseconds",
    "consumer-lag": "Records between the position and the end of an assigned input partition",
    "restore-remaining-records": "Changelog records an active task has left to restore (0 once restored)",
    "restored-records-total": "Changelog records restored into active tasks' stores",
    "standby-updated-records-total": "Changelog records applied to standby tasks' stores",
    "bootstrap-records-total": "Changelog offsets a store fetched from a peer's standby did not replay",
    "bootstrap-bytes-total": "Bytes of store snapshots fetched from peers' standbys",
    "bootstrap-seconds-total": "Time spent fetching and installing store snapshots from peers, in seconds",
    "bootstrap-failures-total": "Stores no peer gave a snapshot of (then restored from the whole changelog)",
    "global-restored-records-total": "Records loaded into global stores",
    "active-tasks": "Active tasks by state",
    "standby-tasks": "Standby tasks",
    "task-lag-records": "Changelog records a task held here lags, by role: active (0), restoring, standby",
    "warmup-tasks": "Warm-up replicas still behind acceptable.recovery.lag before this member joins",
    "warmup-lag-records": "Changelog records a warm-up replica lags while this member waits to join",
    "streams-state": "The instance's state as the index of kappaflow.runner.State (2 is RUNNING)",
    "dropped-records-total": "Records skipped (handler continued, late, invalid timestamp), by reason",
    "expired-window-record-drop-total": "Records dropped because their window had closed",
    "dead-letter-records-total": "Records written to the dead-letter topic (counted once committed)",
    "transaction-aborts-total": "Aborted transactions, work redone from the last commit (exactly-once)",
    "hanging-transaction-partitions": "Partitions a hanging transaction holds (reader: restore or input)",
    "task-rewinds-total": "Tasks closed dirty and resumed from the committed offsets (at-least-once)",
    "async-backpressure-pauses-total": "Input pauses of tasks whose asynchronous operations were full",
    "consumer-rejoins-total": "Group consumers replaced after a fatal error",
    "worker-replacements-total": "Worker processes replaced after they died",
    "rebalances-total": "Partition assignments this member received (one per completed rebalance)",
    "poll-seconds-total": "Time the stream thread spent polling the consumer, in seconds",
    "record-e2e-latency-ms": (
        "Wall-clock time minus the record timestamp of the last record of the last processed batch, in ms"
    ),
    "process-cpu-seconds-total": "CPU time (user and system) of this OS process, in seconds",
    "process-resident-memory-bytes": "Resident memory of this OS process, in bytes",
    "rocksdb-size-bytes": "Bytes on disk of a task's RocksDB store directory (SST files, WAL, manifest)",
    "state-store-get-total": "Reads of a key-value store, per task and store",
    "state-store-put-total": "Writes to a key-value store, per task and store",
    "state-store-delete-total": "Deletes from a key-value store, per task and store",
    "state-store-scan-total": "Range, prefix and full scans of a key-value store, per task and store",
    "poll-ratio": "Share of the stream thread's last loop iteration spent polling the consumer (0-1)",
    "restore-ratio": "Share of the stream thread's last loop iteration spent restoring state (0-1)",
    "process-ratio": "Share of the stream thread's last loop iteration spent processing records (0-1)",
    "punctuate-ratio": "Share of the stream thread's last loop iteration spent punctuating (0-1)",
    "commit-ratio": "Share of the stream thread's last loop iteration spent committing (0-1)",
}


def _help(raw_name: str) -> str:
    text = HELP.get(raw_name) or f"kappaflow {raw_name}"
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def prometheus_text(metrics: Metrics, extra_labels: dict[str, str] | None = None) -> str:
    extra = tuple(sorted((extra_labels or {}).items()))
    lines: list[str] = []
    for kind, families in (("counter", metrics.counters()), ("gauge", metrics.gauges())):
        for raw_name, series in sorted(families.items()):
            name = _metric_name(raw_name)
            if kind == "counter" and not name.endswith("_total"):
                name += "_total"
            lines.append(f"# HELP {name} {_help(raw_name)}")
            lines.append(f"# TYPE {name} {kind}")
            lines.extend(
                _series(name, tuple(sorted(labels + extra)), value) for labels, value in series.items()
            )
    return "\n".join(lines) + "\n"


class HealthServer:
    """A small threaded HTTP server; `port=0` lets the OS choose (see `.port`)."""

    def __init__(
        self,
        host: str,
        port: int,
        metrics: Metrics,
        live: Callable[[], bool],
        ready: Callable[[], bool],
        describe: Callable[[], dict[str, Any]],
    ) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    body = prometheus_text(metrics).encode()
                    self._reply(200, body, "text/plain; version=0.0.4")
                elif path in ("/health/live", "/health/ready"):
                    ok = live() if path == "/health/live" else ready()
                    body = json.dumps({"status": "UP" if ok else "DOWN", **describe()}).encode()
                    self._reply(200 if ok else 503, body, "application/json")
                else:
                    self._reply(404, b'{"error": "not found"}', "application/json")

            def _reply(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return None  # probes every few seconds would flood the logs

        self._httpd = ThreadingHTTPServer((host, port), Handler)
        self._httpd.daemon_threads = True
        self.port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="kappaflow-http", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
