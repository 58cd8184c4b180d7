"""A small in-process metrics registry.

Processors, stores and tasks count events here (records processed, dropped records, restored records);
the runner exports the same numbers to Prometheus and the test driver exposes them through `metrics()`,
so the layers below the runner never import a metrics library.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping


def _labels_key(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    if not labels:  # most series the stream thread updates every loop have none: no sort for them
        return ()
    return tuple(sorted(labels.items()))


class Metrics:
    """Counters and gauges keyed by name and labels, e.g. ("dropped-records-total", task="0_0")."""

    def __init__(self) -> None:
        self._counters: dict[str, dict[tuple[tuple[str, str], ...], float]] = defaultdict(dict)
        self._gauges: dict[str, dict[tuple[tuple[str, str], ...], float]] = defaultdict(dict)
        self._sources: dict[str, Callable[[], Mapping[str, float]]] = {}

    def increment(self, name: str, amount: float = 1.0, /, **labels: str) -> None:
        series = self._counters[name]
        key = _labels_key(labels)
        series[key] = series.get(key, 0.0) + amount

    def set_gauge(self, name: str, value: float, **labels: str) -> None:
        self._gauges[name][_labels_key(labels)] = value

    def set_gauge_source(self, name: str, source: Callable[[], Mapping[str, float]]) -> None:
        """Gauges without labels computed when read (`gauge`, `gauges`: every export reads through them)
        rather than set: for values that change far more often than anyone reads them - the stream
        thread's loop ratios, which change every loop iteration. A source set again under the same
        `name` replaces the earlier one (a thread replaced by a new one)."""
        self._sources[name] = source

    def _read_sources(self) -> None:
        gauges = self._gauges
        for source in list(self._sources.values()):
            for name, value in source().items():
                gauges[name][()] = value

    def set_counter(self, name: str, value: float, **labels: str) -> None:
        """Set a counter to a cumulative total counted elsewhere (a store's own operation count, the
        process's CPU seconds): exported as a counter, which a gauge holding a total must not be."""
        self._counters[name][_labels_key(labels)] = value

    def retain_gauge(self, name: str, keep: Callable[[dict[str, str]], bool]) -> None:
        """Drop the series of gauge `name` whose labels `keep` rejects (a task this instance no longer
        holds), so a scrape does not show a frozen value for something that moved elsewhere."""
        series = self._gauges.get(name, {})
        for key in [k for k in series if not keep(dict(k))]:
            del series[key]

    def record_processing(self, records: int, seconds: float) -> None:
        """One poll loop's processing: records, time spent and the average latency per record."""
        self.increment("process-records-total", records)
        self.increment("process-seconds-total", seconds)
        self.set_gauge("process-latency-avg-ms", seconds * 1000.0 / records)
        self.increment("poll-loops-total")

    def counter(self, name: str, **labels: str) -> float:
        """The counter's value summed over every series whose labels include the given ones."""
        wanted = set(labels.items())
        return sum(v for k, v in self._counters.get(name, {}).items() if wanted <= set(k))

    def gauge(self, name: str, **labels: str) -> float | None:
        self._read_sources()
        wanted = set(labels.items())
        values = [v for k, v in self._gauges.get(name, {}).items() if wanted <= set(k)]
        return sum(values) if values else None

    def merge_snapshot(
        self,
        counters: Mapping[str, Mapping[tuple[tuple[str, str], ...], float]],
        gauges: Mapping[str, Mapping[tuple[tuple[str, str], ...], float]],
        **labels: str,
    ) -> None:
        """Take over another registry's snapshot (a worker process's), every series with `labels` added:
        values are set, not added, as a snapshot is cumulative."""
        for target, source in ((self._counters, counters), (self._gauges, gauges)):
            for name, series in source.items():
                for key, value in series.items():
                    target[name][_labels_key({**dict(key), **labels})] = value

    def counters(self) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
        return {name: dict(series) for name, series in self._counters.items()}

    def gauges(self) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
        self._read_sources()
        return {name: dict(series) for name, series in self._gauges.items()}
