"""Prometheus metrics of the operator itself: passes by outcome, errors, and how long passes take.

Served by `start(port)` from the startup handler (the chart exposes the port as `metrics`). A pass ends
in one outcome: `ok`, `waiting` (kopf retries soon: a Job, Spark or topics are not there yet), `error`
(an exception: API refusals, bugs) or `skipped` (the app was gone or being deleted).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import Counter, Histogram, start_http_server

RECONCILES = Counter("kappaflow_operator_reconciles_total", "Reconcile passes by outcome", ["outcome"])
ERRORS = Counter("kappaflow_operator_reconcile_errors_total", "Reconcile passes that raised an error")
DURATION = Histogram(
    "kappaflow_operator_reconcile_duration_seconds",
    "Wall time of one reconcile pass",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)


class Outcome:
    """How a pass ended; `timed` records it (an exception that escapes counts as `error`)."""

    def __init__(self) -> None:
        self.value = "ok"

    def set(self, value: str) -> None:
        self.value = value


@contextmanager
def timed() -> Iterator[Outcome]:
    outcome = Outcome()
    started = time.monotonic()
    try:
        yield outcome
    except Exception:
        if outcome.value == "ok":
            outcome.value = "error"
        raise
    finally:
        DURATION.observe(time.monotonic() - started)
        RECONCILES.labels(outcome.value).inc()
        if outcome.value == "error":
            ERRORS.inc()


def start(port: int) -> None:
    """Serve /metrics on `port` (0 disables)."""
    if port > 0:
        start_http_server(port)
