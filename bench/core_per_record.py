"""Python work per record, without a broker: kappaflow's word count tasks vs a hand-written loop.

ARCHITECTURE.md says the cost that matters is the Python work per record. This isolates it: the same
generated lines go through the real word count sub-topologies (source, flat_map_values, re-key,
repartition sink; then repartition source, cached RocksDB count, sink) with an in-memory collector, and
through a plain-Python split-and-count loop that serializes like a sink would. Prints µs per line and the
ratio kappaflow/hand-written, and each sub-topology's CPU time per line with operator fusion on and
off (`kappaflow.fusion.enabled`). Run: `.venv/bin/python bench/core_per_record.py [lines]`.
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from examples.wordcount import INPUT_TOPIC, build_topology, split_words

from kappaflow.api.config import StreamsConfig
from kappaflow.api.metrics import Metrics
from kappaflow.api.processor import TaskId
from kappaflow.api.record import Headers
from kappaflow.state.cache import ThreadCache
from kappaflow.tasks.drain import RawRecord
from kappaflow.tasks.task import StreamTask

COMMIT_EVERY = 10_000


class ListCollector:
    def __init__(self) -> None:
        self.records: list[tuple[str, bytes | None, bytes | None, int]] = []

    def send(self, topic: str, key: Any, value: Any, headers: Any, timestamp: int, partition: Any) -> None:
        self.records.append((topic, key, value, timestamp))

    def send_changelog(self, topic: str, key: Any, value: Any, timestamp: int, partition: int) -> None:
        self.send(topic, key, value, None, timestamp, partition)

    def partition_count(self, topic: str) -> int:
        return 1


def make_lines(count: int) -> list[bytes]:
    rng = random.Random(7)
    words = [f"word{i}" for i in range(1000)]
    return [" ".join(rng.choice(words) for _ in range(3)).encode() for _ in range(count)]


def run_kappaflow(lines: list[bytes], fused: bool = True) -> tuple[float, float, float]:
    """Seconds for both sub-topologies, then each one's process CPU seconds (the first: lines to the
    repartition sink; the second: the cached count, with its commits)."""
    topology = build_topology()
    state_dir = tempfile.mkdtemp(prefix="kappaflow-bench-")
    config = StreamsConfig(
        {"application.id": "bench", "state.dir": state_dir, "kappaflow.fusion.enabled": fused}
    )
    collector, metrics, cache = ListCollector(), Metrics(), ThreadCache(10 * 1024 * 1024)
    tasks = [
        StreamTask(TaskId(i, 0), topology, config, collector, cache, metrics, Path(state_dir), lambda: 0)
        for i in (0, 1)
    ]
    for task in tasks:
        task.initialize()
        task.complete_restoration()
    start = time.perf_counter()
    tasks[0].add_records(INPUT_TOPIC, 0, [RawRecord(i, i, None, v, Headers()) for i, v in enumerate(lines)])
    cpu = time.process_time()  # each sub-topology's own work: not the building of its input here
    tasks[0].process_buffered()
    first = time.process_time() - cpu
    repartitioned = [RawRecord(i, ts, k, v, Headers()) for i, (_, k, v, ts) in enumerate(collector.records)]
    collector.records.clear()
    tasks[1].add_records("bench-counts-repartition", 0, repartitioned)
    cpu = time.process_time()
    while tasks[1].process_buffered(COMMIT_EVERY):
        tasks[1].prepare_commit()
        tasks[1].post_commit()
    tasks[1].prepare_commit()
    second = time.process_time() - cpu
    elapsed = time.perf_counter() - start
    for task in tasks:
        task.close()
    return elapsed, first, second


def run_hand_written(lines: list[bytes]) -> float:
    counts: dict[str, int] = {}
    out: list[tuple[bytes, bytes]] = []
    start = time.perf_counter()
    for raw in lines:
        for word in split_words(raw.decode()):
            counts[word] = counts.get(word, 0) + 1
            out.append((word.encode(), counts[word].to_bytes(8, "big")))
    return time.perf_counter() - start


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 30_000
    lines = make_lines(count)
    fused = [run_kappaflow(lines) for _ in range(3)]
    generic = [run_kappaflow(lines, fused=False) for _ in range(3)]
    kappa = min(run[0] for run in fused)
    hand = min(run_hand_written(lines) for _ in range(3))
    print(f"lines: {count}, 3 words each (best of 3 runs)")
    print(f"  hand-written loop : {hand / count * 1e6:7.2f} us/line  {count / hand:10.0f} lines/s")
    print(f"  kappaflow tasks   : {kappa / count * 1e6:7.2f} us/line  {count / kappa:10.0f} lines/s")
    for name, runs in (("fused", fused), ("generic", generic)):  # kappaflow.fusion.enabled on / off
        first, second = (min(run[i] for run in runs) / count * 1e6 for i in (1, 2))
        print(f"    {name:<8} sub-topology 1 {first:6.2f}, 2 {second:6.2f} CPU us/line")
    print(f"  ratio kappaflow / hand-written throughput: {hand / kappa:.3f}")


if __name__ == "__main__":
    main()
