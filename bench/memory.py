"""Memory of a 1M-key store: resident set size under kappaflow's memory settings.

Not a test: it prints the RSS of a process that counts N distinct keys (default 1,000,000) into a
changelogged, cached RocksDB store through the real task machinery (no broker: an in-memory collector
takes the changelog and output records), committing every 10,000 records as the runtime does. Each
configuration runs in a fresh process, so the numbers do not mix:

- the record cache (`statestore.cache.max.bytes`) at 10 MiB (the default) and at 100 MiB;
- RocksDB with its own default options per store, and with `BoundedMemoryConfigSetter` (one shared LRU
  cache of 64 MiB charging the memtables too: kappaflow.state.rocksdb_config).

Rows: the process RSS before the first record (interpreter, kappaflow, topology), the RSS after the last
commit and the peak, the growth over the baseline, the record cache's own accounted bytes and the store's
files on disk. The store's keys and values on disk are what grows with keys; RSS should not.

    python bench/memory.py [--keys 1000000] [--child CONFIG]   (--child is how the parent runs a row)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONFIGS: dict[str, tuple[int, bool]] = {  # name: (record cache bytes, bounded RocksDB memory)
    "cache 10 MiB, RocksDB defaults": (10 << 20, False),
    "cache 100 MiB, RocksDB defaults": (100 << 20, False),
    "cache 10 MiB, RocksDB bounded to 64 MiB": (10 << 20, True),
}
COMMIT_EVERY = 10_000
MIB = 1 << 20


def rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


class DiscardingCollector:
    """Takes what the task sends (changelog and output records) and keeps only a count."""

    def __init__(self) -> None:
        self.sent = 0

    def send(self, topic: str, key: Any, value: Any, headers: Any, timestamp: int, partition: Any) -> None:
        self.sent += 1

    def send_changelog(self, topic: str, key: Any, value: Any, timestamp: int, partition: int) -> None:
        self.send(topic, key, value, None, timestamp, partition)

    def partition_count(self, topic: str) -> int:
        return 1


def child(name: str, keys: int) -> dict[str, float]:
    """One row, in this process: build, measure the baseline, count `keys` distinct keys, measure."""
    from kappaflow import Materialized, StreamsBuilder, serdes
    from kappaflow.api.config import StreamsConfig
    from kappaflow.api.metrics import Metrics
    from kappaflow.api.processor import TaskId
    from kappaflow.api.record import Headers
    from kappaflow.state.rocksdb_config import BoundedMemoryConfigSetter
    from kappaflow.tasks.drain import RawRecord
    from kappaflow.tasks.native import new_thread_cache
    from kappaflow.tasks.task import StreamTask

    cache_bytes, bounded = CONFIGS[name]
    builder = StreamsBuilder()
    source = builder.stream("memory-in", key_serde=serdes.String(), value_serde=serdes.String())
    source.group_by_key().count(Materialized.as_("counts")).to_stream().to(
        "memory-out", key_serde=serdes.String(), value_serde=serdes.Long()
    )
    state_dir = Path(tempfile.mkdtemp(prefix="kappaflow-memory-"))
    values: dict[str, Any] = {"application.id": "memory", "state.dir": str(state_dir)}
    values["statestore.cache.max.bytes"] = cache_bytes
    setter = BoundedMemoryConfigSetter(64 * MIB, 16 * MIB) if bounded else None
    if setter is not None:
        values["rocksdb.config.setter"] = setter
    config = StreamsConfig(values)
    cache = new_thread_cache(cache_bytes)
    task = StreamTask(
        TaskId(0, 0), builder.build(), config, DiscardingCollector(), cache, Metrics(), state_dir, lambda: 0
    )
    task.initialize()
    task.complete_restoration()
    baseline = rss_bytes()
    started = time.perf_counter()
    batch = 50_000
    for first in range(0, keys, batch):
        records = [
            RawRecord(i, i, f"key-{i:09d}".encode(), b"x", Headers())
            for i in range(first, min(first + batch, keys))
        ]
        task.add_records("memory-in", 0, records)
        while task.process_buffered(COMMIT_EVERY):
            task.prepare_commit()
            task.post_commit()
        task.prepare_commit()
        task.post_commit()
    elapsed = time.perf_counter() - started
    after = rss_bytes()
    result = {
        "baseline": baseline,
        "after": after,
        "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "cache": cache.size_bytes,
        "disk": dir_bytes(state_dir),
        "records_per_s": keys / elapsed,
        "rocksdb_cache": setter.usage_bytes() if setter is not None else -1,
    }
    task.close()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--child", choices=list(CONFIGS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.keys)))
        return 0
    rows: dict[str, dict[str, float]] = {}
    for name in CONFIGS:
        print(f"==> {name}: counting {args.keys:,} distinct keys ...", flush=True)
        done = subprocess.run(
            [sys.executable, __file__, "--keys", str(args.keys), "--child", name],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        if done.returncode != 0:
            print(f"    failed:\n{done.stderr[-2000:]}", flush=True)
            continue
        rows[name] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"    {rows[name]['records_per_s']:,.0f} records/s", flush=True)
    print(f"\n{args.keys:,} distinct keys in one count store (RSS in MiB)")
    header = (
        f"{'configuration':<42}{'baseline':>9}{'after':>8}{'peak':>8}{'growth':>8}{'cache':>8}{'disk':>8}"
    )
    print(header)
    for name, row in rows.items():
        figures = (row["baseline"], row["after"], row["peak"], row["after"] - row["baseline"])
        cells = [f"{value / MIB:>9.0f}" for value in figures]
        cells += [f"{row['cache'] / MIB:>9.1f}", f"{row['disk'] / MIB:>9.0f}"]
        print(f"{name:<42}" + "".join(cells))
    return 0 if len(rows) == len(CONFIGS) else 1


if __name__ == "__main__":
    sys.exit(main())
