"""Long aggregates the native aggregation keeps unboxed in the record cache (`cache.rs`'s `Stored::Long`:
no bytes and no `ValueAndTimestamp` per update, built when Python reads the entry) against the Python
path: the same records sent (changelog and downstream bytes, in flush order), interactive reads and
ranges between commits, cache sizes and counters, and a count that overflows a Long while unboxed."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

from kappaflow import Materialized, StreamsBuilder, serdes
from kappaflow.api.config import StreamsConfig
from kappaflow.api.metrics import Metrics
from kappaflow.api.processor import TaskId
from kappaflow.api.record import Headers
from kappaflow.state.timestamped import ValueAndTimestamp
from kappaflow.tasks.drain import RawRecord
from kappaflow.tasks.native import new_thread_cache
from kappaflow.tasks.task import StreamTask
from tests.native_support import require_native_core

pytestmark = pytest.mark.native_core  # compares the native core with the Python paths

S, L = serdes.String(), serdes.Long()
LONG_MAX = 2**63 - 1


class Collector:
    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []

    def send(self, topic: str, key: Any, value: Any, headers: Any, timestamp: int, partition: Any) -> None:
        self.sent.append((topic, key, value, timestamp))

    def send_changelog(self, topic: str, key: Any, value: Any, timestamp: int, partition: int) -> None:
        self.sent.append(("changelog", topic, key, value, timestamp))

    def partition_count(self, topic: str) -> int:
        return 1


def run(native: bool, bound: int) -> tuple[dict[str, Any], list[str]]:
    """A count, a Long sum through a Python aggregator (reading the unboxed Long back as an int) and a
    Long reduce, over keys already grouped (one task); "big" seeded one below a Long's maximum so its
    second update overflows while unboxed. Between batches: point reads and ranges through the cache."""
    builder = StreamsBuilder()
    grouped = builder.stream("in", key_serde=S, value_serde=L).group_by_key()
    grouped.count(Materialized.as_("counts")).to_stream().to("counted", value_serde=L)
    grouped.aggregate(lambda: 0, lambda k, v, total: total + v, Materialized.as_("sums").with_value_serde(L))
    grouped.reduce(lambda a, b: max(a, b), Materialized.as_("maxes").with_value_serde(L))
    state_dir = tempfile.mkdtemp(prefix="kappaflow-unboxed-")
    config = StreamsConfig(
        {
            "application.id": "unboxed",
            "state.dir": state_dir,
            "kappaflow.native.enabled": native,
            "processing.exception.handler": "log_and_continue",
        }
    )
    collector, metrics, cache = Collector(), Metrics(), new_thread_cache(bound, native)
    task = StreamTask(
        TaskId(0, 0), builder.build(), config, collector, cache, metrics, Path(state_dir), lambda: 0
    )  # type: ignore[arg-type]
    task.initialize()
    task.complete_restoration()
    stores = task.context.stores
    stores["counts"].put("big", ValueAndTimestamp(LONG_MAX - 2, 5))
    stages = sorted(type(node.fused).__name__ for node in task.nodes if node.fused is not None)
    keys = ["a", "bb", "a", "big", "a", "c", "big", "bb", "a", "big", "d", "a"]
    reads: list[Any] = []
    offset = 0
    for batch in range(6):
        records = []
        for i, key in enumerate(keys):
            stamp = 1000 + 10 * offset - (40 if i % 4 == 3 else 0)  # out of order: the max timestamp kept
            value = L.serialize("in", batch * 7 - i)
            records.append(RawRecord(offset, stamp, key.encode(), value, Headers()))
            offset += 1
        task.add_records("in", 0, records)
        task.process_buffered()
        reads.append(("cache", cache.size_bytes, cache.evictions, cache.hits, cache.misses))
        for name in ("counts", "sums", "maxes"):
            reads.append((name, stores[name].get("a"), stores[name].get("big"), sorted(stores[name].all())))
            reads.append((name, sorted(stores[name].range("b", "c"))))
        if batch % 2:
            task.prepare_commit()
            task.post_commit()
    task.prepare_commit()
    task.post_commit()
    task.close()
    observed = {
        "sent": collector.sent,
        "reads": reads,
        "counters": metrics.counters(),
        "gauges": metrics.gauges(),
        "cache": (cache.hits, cache.misses, cache.evictions, cache.size_bytes),
    }
    return observed, stages


def test_unboxed_long_aggregates_behave_as_the_python_path() -> None:
    require_native_core()
    for bound in (1 << 20, 300):  # all kept; evicting (flushes mid-batch, boxing entries as they go)
        native, stages = run(True, bound)
        python, python_stages = run(False, bound)
        assert stages.count("AggregateStage") == 3 and python_stages == []
        assert native == python
        maxed = ("changelog", "unboxed-counts-changelog", b"big", LONG_MAX.to_bytes(8, "big"))
        assert any(sent[:4] == maxed for sent in native["sent"]), (
            "the count reached a Long's maximum (kept unboxed), then overflowed"
        )
        assert native["counters"]["dropped-records-total"], "the overflow is the serde's error, handled"
        assert (native["cache"][2] > 0) == (bound == 300), "the small bound evicts: flushes mid-batch"
