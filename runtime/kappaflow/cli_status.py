"""What `kappaflow run` says about the instance it runs: a start-up banner and a periodic summary line.

A Kafka Streams user starting an app wants to see at once which version runs, against which cluster,
with which settings they changed, and where to look (metrics, health, interactive queries); then, while
it runs, one line now and then saying whether it keeps up (records in and out, lag, rate, state),
instead of silence between rebalances. Both are per interval, never per record: the summary reads the
metrics registry the stream thread already keeps. The text is decided by pure functions here; the CLI
logs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kappaflow.api.config import DEFAULTS

# keys whose values are never printed
_SECRET_WORDS = ("password", "secret", "jaas", "token", "credentials")
DEFAULT_SUMMARY_INTERVAL_S = 60.0


def is_secret(key: str) -> bool:
    return any(word in key.lower() for word in _SECRET_WORDS)


def non_default_settings(values: Mapping[str, Any]) -> dict[str, str]:
    """The settings that differ from kappaflow's defaults (secrets masked), sorted by key."""
    result: dict[str, str] = {}
    for key in sorted(values):
        value = values[key]
        if value is None or (key in DEFAULTS and str(DEFAULTS[key]) == str(value)):
            continue
        result[key] = "********" if is_secret(key) else str(value)
    return result


def banner_lines(
    version: str,
    values: Mapping[str, Any],
    metrics_url: str | None,
    query_url: str | None,
) -> list[str]:
    """The start-up banner: version and identity, the effective non-default settings, the URLs."""
    settings = non_default_settings(values)
    shown = {k: v for k, v in settings.items() if k not in ("application.id", "bootstrap.servers")}
    lines = [
        f"kappaflow {version}: application.id={values.get('application.id')} "
        f"bootstrap.servers={values.get('bootstrap.servers')}",
        "config (not default): " + (", ".join(f"{k}={v}" for k, v in shown.items()) or "-"),
    ]
    urls = []
    if metrics_url:
        urls.append(f"metrics {metrics_url}/metrics, health {metrics_url}/health/ready")
    else:
        urls.append("metrics and health off (metrics.port=-1)")
    urls.append(f"interactive queries {query_url}" if query_url else "interactive queries off")
    lines.append("; ".join(urls))
    return lines


@dataclass(frozen=True)
class Snapshot:
    """What the summary line compares between two intervals, read from the metrics registry."""

    at: float  # monotonic seconds
    records_in: float
    records_out: float
    lag: float | None
    state: str
    active_tasks: float | None


def snapshot(at: float, state: str, counters: Mapping[str, Mapping[Any, float]],
             gauges: Mapping[str, Mapping[Any, float]]) -> Snapshot:  # fmt: skip
    """Totals over every label set: records processed (in), sent (out), the summed consumer lag."""
    lag = gauges.get("consumer-lag")
    tasks = gauges.get("active-tasks")
    return Snapshot(
        at,
        sum(counters.get("records-processed-total", {}).values()),
        sum(counters.get("records-sent-total", {}).values()),
        sum(lag.values()) if lag else None,
        state,
        sum(tasks.values()) if tasks else None,
    )


def summary_line(previous: Snapshot, current: Snapshot) -> str:
    """One line: state, tasks, records in/out with their increase, the input rate, and the lag."""
    seconds = max(current.at - previous.at, 1e-9)
    new_in = current.records_in - previous.records_in
    new_out = current.records_out - previous.records_out
    tasks = f", {current.active_tasks:.0f} active tasks" if current.active_tasks is not None else ""
    lag = f"{current.lag:,.0f}" if current.lag is not None else "n/a"
    return (
        f"summary: {current.state}{tasks}; in {current.records_in:,.0f} (+{new_in:,.0f}, "
        f"{new_in / seconds:,.1f}/s), out {current.records_out:,.0f} (+{new_out:,.0f}); lag {lag}"
    )
