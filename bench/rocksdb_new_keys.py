"""RocksDB's own cost per new key as state outgrows a bounded cache (issue 31 target 3), no broker.

`bench/scaling_cost.py`'s 10M-key cells run several times slower than its 1M-key ones, more than the
Python work per record explains (`bench/scaling_per_record.py`). This isolates RocksDB: `--stores`
databases (one per task of a 4-partition count) share one `BoundedMemoryConfigSetter` (32 MiB, 16 MiB of
memtables charged into it, as scaling_cost's cells), and each new key costs what the count's store does
past the record cache: a `get` of an absent key, then a put in a write batch without the write-ahead
log (a flush of evicted entries). Keys are scaling_cost's scattered hex keys, values 16 bytes (a
timestamped count). Prints keys/s every 500k keys, the process CPU per key (RocksDB's background
flushes and compactions included), peak RSS, and the shared cache's use, for each `--table` in turn
(each in a fresh process):
`partitioned` (the setter's default) and `full` (one index and filter block per SST file, before).

    python bench/rocksdb_new_keys.py [--keys 4000000] [--stores 4] [--table partitioned,full]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import rocksdict
from bench.scaling_cost import key_name

from kappaflow.state.rocksdb_config import BoundedMemoryConfigSetter

MIB = 1 << 20
BATCH = 2000  # new keys between write batches, a flush of evictions' worth
REPORT_EVERY = 500_000
VALUE = bytes(16)


def run(table: str, keys: int, stores: int, cache_mib: int, write_buffer_mib: int) -> None:
    setter = BoundedMemoryConfigSetter(
        cache_mib * MIB, write_buffer_mib * MIB, partitioned_index_filters=table == "partitioned"
    )
    root = tempfile.mkdtemp(prefix="kappaflow-rocksdb-new-keys-")
    dbs = []
    for index in range(stores):
        options = rocksdict.Options(raw_mode=True)
        options.set_compression_type(rocksdict.DBCompressionType.none())  # as the stores open
        setter(f"store-{index}", options, {})
        options.create_if_missing(True)
        dbs.append(rocksdict.Rdict(f"{root}/{index}", options))
    unlogged = rocksdict.WriteOptions()
    unlogged.disable_wal = True  # type: ignore[method-assign, assignment]
    started = last = time.perf_counter()
    cpu = time.process_time()
    try:
        for start in range(0, keys, BATCH):
            batches = [rocksdict.WriteBatch(raw_mode=True) for _ in dbs]
            for i in range(start, min(keys, start + BATCH)):
                key = key_name(i)
                if dbs[i % stores].get(key) is not None:
                    raise RuntimeError(f"key {i} found before it was written")
                batches[i % stores].put(key, VALUE)
            for db, batch in zip(dbs, batches, strict=True):
                db.write(batch, unlogged)
            done = min(keys, start + BATCH)
            if done % REPORT_EVERY == 0:
                now = time.perf_counter()
                print(
                    f"  {table} {done:>11,} keys: {REPORT_EVERY / (now - last):>9,.0f} keys/s, cache "
                    f"{setter.usage_bytes() / MIB:.0f} MiB",
                    flush=True,
                )
                last = now
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    finally:
        for db in dbs:
            db.close()
        shutil.rmtree(root, ignore_errors=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{table}: {keys:,} new keys over {stores} stores: {keys / elapsed:,.0f} keys/s, "
        f"{cpu / keys * 1e6:.2f} CPU us/key, peak RSS {peak:.0f} MiB (load {os.getloadavg()[0]:.1f})",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=4_000_000)
    parser.add_argument("--stores", type=int, default=4)
    parser.add_argument("--table", default="partitioned,full", help="partitioned and/or full, in turn")
    parser.add_argument("--cache-mib", type=int, default=32)
    parser.add_argument("--write-buffer-mib", type=int, default=16)
    args = parser.parse_args()
    tables = args.table.split(",")
    if len(tables) == 1:
        run(tables[0], args.keys, args.stores, args.cache_mib, args.write_buffer_mib)
        return
    for table in tables:  # each in a process of its own, so that its peak RSS is its own
        argv = [f"--keys={args.keys}", f"--stores={args.stores}", f"--cache-mib={args.cache_mib}"]
        argv += [f"--write-buffer-mib={args.write_buffer_mib}", f"--table={table}"]
        subprocess.run([sys.executable, __file__, *argv], check=True)


if __name__ == "__main__":
    main()
