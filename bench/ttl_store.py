"""Store size with and without a TTL: N distinct keys through a count, TTL a tenth of the input's span.

Kafka Streams has no TTL on key-value stores (KAFKA-4273): a count over ever-new keys grows without
bound. This runs the real count sub-topology (a cached RocksDB store, commits every `--commit-every`
records, no broker: an in-memory collector) over `--keys` distinct keys, one per millisecond of event
time, once with `Materialized.with_ttl(span / 10)` and once without, and prints each store's live
entries, RocksDB's estimated keys and bytes on disk, with the targets as met / NOT met:

- entries: the TTL store holds at most 1.2 x the keys of one TTL window (a tenth of the input, plus the
  commit batches not yet swept);
- disk: the TTL store takes at most half the bytes of the store without TTL.

Run: `.venv/bin/python bench/ttl_store.py [--keys 10000000] [--commit-every 10000]`.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from kappaflow import Materialized, StreamsBuilder, serdes
from kappaflow.api.config import StreamsConfig
from kappaflow.api.metrics import Metrics
from kappaflow.api.processor import TaskId
from kappaflow.api.record import Headers
from kappaflow.state.ttl import EXPIRED_METRIC
from kappaflow.tasks.drain import RawRecord
from kappaflow.tasks.native import new_thread_cache
from kappaflow.tasks.task import StreamTask

S = serdes.String()


class DiscardingCollector:
    """Counts what the task sends (sink and changelog records) and keeps nothing: 10M keys must not
    be held twice in memory by the benchmark itself."""

    def __init__(self) -> None:
        self.sent = 0
        self.tombstones = 0

    def send(self, topic: str, key: Any, value: Any, headers: Any, timestamp: int, partition: Any) -> None:
        self.sent += 1

    def send_changelog(self, topic: str, key: Any, value: Any, timestamp: int, partition: int) -> None:
        self.sent += 1
        self.tombstones += value is None

    def partition_count(self, topic: str) -> int:
        return 1


def disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def run(keys: int, commit_every: int, ttl_ms: int | None) -> dict[str, float]:
    """One run: the count over `keys` distinct keys; the store's size at the end."""
    builder = StreamsBuilder()
    materialized = Materialized.as_("counts")
    if ttl_ms is not None:
        materialized = materialized.with_ttl(ttl_ms, max_expired_per_commit=2 * commit_every)
    builder.stream("in", key_serde=S, value_serde=S).group_by_key().count(materialized)
    state_dir = Path(tempfile.mkdtemp(prefix="kappaflow-bench-ttl-"))
    config = StreamsConfig({"application.id": "bench-ttl", "state.dir": str(state_dir)})
    collector, metrics = DiscardingCollector(), Metrics()
    task = StreamTask(
        TaskId(0, 0),
        builder.build(),
        config,
        collector,
        new_thread_cache(10 * 1024 * 1024),
        metrics,
        state_dir,
        lambda: 0,
    )
    task.initialize()
    task.complete_restoration()
    start = time.perf_counter()
    value = b"v"
    for first in range(0, keys, commit_every):
        last = min(first + commit_every, keys)
        task.add_records("in", 0, [RawRecord(i, i, b"k%d" % i, value, Headers()) for i in range(first, last)])
        task.process_buffered()
        task.prepare_commit()
        task.post_commit()
    elapsed = time.perf_counter() - start
    store = task.store("counts")
    live = sum(1 for _ in store.all())
    estimated = store.approximate_num_entries()
    task.close()
    size = disk_bytes(state_dir)
    expired = metrics.counter(EXPIRED_METRIC, store="counts", task="0_0")
    shutil.rmtree(state_dir, ignore_errors=True)
    return {
        "seconds": elapsed,
        "live": live,
        "estimated": estimated,
        "disk": size,
        "expired": expired,
        "tombstones": collector.tombstones,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--keys", type=int, default=10_000_000, help="distinct keys (one per ms of event time)"
    )
    parser.add_argument("--commit-every", type=int, default=10_000, help="records between commits")
    args = parser.parse_args()
    if args.keys < 10 or args.commit_every < 1:
        parser.error("--keys must be at least 10 and --commit-every at least 1")
    ttl_ms = args.keys // 10  # a tenth of the input's time span
    with_ttl = run(args.keys, args.commit_every, ttl_ms)
    without = run(args.keys, args.commit_every, None)
    print(
        f"{args.keys:,} distinct keys, event time span {args.keys:,} ms, TTL {ttl_ms:,} ms, commit every "
        f"{args.commit_every:,} records"
    )
    print(f"{'store':<12}{'seconds':>9}{'live entries':>14}{'est. keys':>12}{'disk MiB':>10}{'expired':>12}")
    for label, row in (("with TTL", with_ttl), ("without TTL", without)):
        print(
            f"{label:<12}{row['seconds']:>9.1f}{row['live']:>14,.0f}{row['estimated']:>12,.0f}"
            f"{row['disk'] / 2**20:>10.1f}{row['expired']:>12,.0f}"
        )
    entries_bound = 1.2 * ttl_ms
    entries_met = with_ttl["live"] <= entries_bound and with_ttl["estimated"] <= entries_bound
    disk_met = with_ttl["disk"] <= 0.5 * without["disk"]
    verdict = "met" if entries_met else "NOT met"
    print(f"target entries <= {entries_bound:,.0f} (1.2 x one TTL window): {verdict}")
    ratio = with_ttl["disk"] / max(without["disk"], 1)
    print(f"target disk <= 0.5 x without TTL (measured {ratio:.2f}x): {'met' if disk_met else 'NOT met'}")


if __name__ == "__main__":
    main()
