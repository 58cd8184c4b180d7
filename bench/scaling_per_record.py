"""The count task's work per record as distinct keys grow, without a broker (issue 31 target 3).

`bench/scaling_cost.py` shows records/s falling ~4x from 1k to 1M distinct keys. This isolates why: the
second sub-topology of its topology (repartition source -> cached, changelogged RocksDB count -> sink)
runs in one `StreamTask` with an in-memory collector, fed `records` confluent-kafka `Message`s whose keys
cycle over `keys` distinct keys (scaling_cost.key_name), committing every `--commit-every` records as the
stream thread would. With few keys every update is a record-cache hit; with as many keys as records every
update misses the cache and RocksDB (the key is new), and evicts: a dirty eviction flushes the named
cache (a RocksDB put, a changelog record and a downstream record per entry).

Prints CPU µs per record and the record cache's hits, misses and evictions, and the collector's sends per
record. For deterministic per-record figures run it under callgrind at two sizes and divide the difference
(as the performance history does), e.g.

    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.%p \
        .venv/bin/python bench/scaling_per_record.py --records 20000 --keys 20000

`--profile` prints cProfile's top functions by own time instead.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.core_per_record import ListCollector, add, messages
from bench.scaling_cost import key_name, topology

from kappaflow.api.config import StreamsConfig
from kappaflow.api.metrics import Metrics
from kappaflow.api.processor import TaskId
from kappaflow.runner import tune_gc_for_streaming
from kappaflow.runner.routing import router
from kappaflow.state.rocksdb_config import BoundedMemoryConfigSetter
from kappaflow.tasks.native import installed_core, new_thread_cache
from kappaflow.tasks.task import StreamTask

MIB = 1 << 20
REPARTITION = "bench-counts-repartition"


def run(records: int, keys: int, commit_every: int, cache_mib: float, profile: bool, python: bool) -> None:
    state_dir = tempfile.mkdtemp(prefix="kappaflow-scaling-bench-")
    config = StreamsConfig(
        {
            "application.id": "bench",
            "state.dir": state_dir,
            "rocksdb.config.setter": BoundedMemoryConfigSetter(32 * MIB, 16 * MIB),
            **({"kappaflow.native.enabled": False} if python else {}),
        }
    )
    collector, metrics, cache = ListCollector(), Metrics(), new_thread_cache(int(cache_mib * MIB))
    task = StreamTask(
        TaskId(1, 0), topology("bench-in", "bench-out"), config, collector, cache, metrics,
        Path(state_dir), lambda: 0,
    )  # fmt: skip
    task.initialize()
    task.complete_restoration()
    route = router(None if python else installed_core())
    consumed = messages(REPARTITION, [(key_name(i % keys), key_name(i % keys), i) for i in range(records)])
    profiler = cProfile.Profile() if profile else None
    cpu = time.process_time()
    if profiler is not None:
        profiler.enable()
    for start in range(0, records, commit_every):
        add(task, route, consumed[start : start + commit_every])
        while task.process_buffered(commit_every):
            pass
        task.prepare_commit()
        task.post_commit()
        collector.records.clear()  # sent, as the producer would have them
    if profiler is not None:
        profiler.disable()
    cpu = time.process_time() - cpu
    task.close()
    shutil.rmtree(state_dir, ignore_errors=True)
    print(
        f"records {records:,} keys {keys:,}: {cpu / records * 1e6:.2f} CPU us/record; cache hits "
        f"{cache.hits:,} misses {cache.misses:,} evictions {cache.evictions:,}"
    )
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


def main() -> None:
    tune_gc_for_streaming()  # as `kappaflow run` and scaling_cost's child do
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--commit-every", type=int, default=50_000)
    parser.add_argument("--cache-mib", type=float, default=10.0, help="statestore.cache.max.bytes")
    parser.add_argument("--profile", action="store_true", help="cProfile's top functions by own time")
    parser.add_argument("--python", action="store_true", help="the Python path: native core off")
    args = parser.parse_args()
    run(args.records, args.keys, args.commit_every, args.cache_mib, args.profile, args.python)


if __name__ == "__main__":
    main()
