"""Python work per record, without a broker: kappaflow's word count tasks vs a hand-written loop.

ARCHITECTURE.md says the cost that matters is the Python work per record. This isolates it: the same
generated lines go through the real word count sub-topologies (source, flat_map_values, re-key,
repartition sink; then repartition source, cached RocksDB count, sink) with an in-memory collector, each
input a confluent-kafka `Message` read into the tasks' queues by the stream thread's routing (natively
from the messages' structs, or through their accessors with `--python-routing`), and
through a plain-Python split-and-count loop that serializes like a sink would. Prints µs per line and the
ratio kappaflow/hand-written, and each sub-topology's CPU time per line with operator fusion on and
off (`kappaflow.fusion.enabled`). Run: `.venv/bin/python bench/core_per_record.py [lines]
[--python-routing]`.
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import TIMESTAMP_CREATE_TIME, Message
from examples.wordcount import INPUT_TOPIC, build_topology, split_words

from kappaflow.api.config import StreamsConfig
from kappaflow.api.metrics import Metrics
from kappaflow.api.processor import TaskId
from kappaflow.runner.routing import Router, raw_records_by_partition, router
from kappaflow.tasks.native import installed_core, new_thread_cache
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


def messages(topic: str, records: list[tuple[bytes | None, bytes | None, int]]) -> list[Message]:
    """`(key, value, timestamp)`s as the consumer hands them over: one partition's `Message`s."""
    return [
        Message(topic=topic, partition=0, offset=i, key=k, value=v, timestamp=(TIMESTAMP_CREATE_TIME, ts))
        for i, (k, v, ts) in enumerate(records)
    ]


def add(task: StreamTask, route: Router, batch: list[Message]) -> None:
    """`batch` into `task`'s queue as the stream thread puts it there."""
    for (topic, partition), records in route(batch):
        task.add_records(topic, partition, records)


def run_kappaflow(
    lines: list[bytes], fused: bool = True, route: Router = raw_records_by_partition
) -> tuple[float, float, float]:
    """Seconds for both sub-topologies, then each one's process CPU seconds (the first: lines to the
    repartition sink; the second: the cached count, with its commits), each with its input's routing."""
    topology = build_topology()
    state_dir = tempfile.mkdtemp(prefix="kappaflow-bench-")
    config = StreamsConfig(
        {"application.id": "bench", "state.dir": state_dir, "kappaflow.fusion.enabled": fused}
    )
    collector, metrics, cache = ListCollector(), Metrics(), new_thread_cache(10 * 1024 * 1024)
    tasks = [
        StreamTask(TaskId(i, 0), topology, config, collector, cache, metrics, Path(state_dir), lambda: 0)
        for i in (0, 1)
    ]
    for task in tasks:
        task.initialize()
        task.complete_restoration()
    consumed = messages(INPUT_TOPIC, [(None, v, i) for i, v in enumerate(lines)])
    start = time.perf_counter()
    cpu = time.process_time()  # each sub-topology's own work: not the building of its input here
    add(tasks[0], route, consumed)
    tasks[0].process_buffered()
    first = time.process_time() - cpu
    consumed = messages("bench-counts-repartition", [(k, v, ts) for _, k, v, ts in collector.records])
    collector.records.clear()
    cpu = time.process_time()
    add(tasks[1], route, consumed)
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
    args = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
    count = int(args[0]) if args else 30_000
    core = None if "--python-routing" in sys.argv else installed_core()
    route = router(core)
    lines = make_lines(count)
    fused = [run_kappaflow(lines, route=route) for _ in range(3)]
    generic = [run_kappaflow(lines, fused=False, route=route) for _ in range(3)]
    kappa = min(run[0] for run in fused)
    hand = min(run_hand_written(lines) for _ in range(3))
    reading = "accessors" if route is raw_records_by_partition else "native, from the structs"
    print(f"lines: {count}, 3 words each (best of 3 runs); consumed messages read: {reading}")
    print(f"  hand-written loop : {hand / count * 1e6:7.2f} us/line  {count / hand:10.0f} lines/s")
    print(f"  kappaflow tasks   : {kappa / count * 1e6:7.2f} us/line  {count / kappa:10.0f} lines/s")
    for name, runs in (("fused", fused), ("generic", generic)):  # kappaflow.fusion.enabled on / off
        first, second = (min(run[i] for run in runs) / count * 1e6 for i in (1, 2))
        print(f"    {name:<8} sub-topology 1 {first:6.2f}, 2 {second:6.2f} CPU us/line")
    print(f"  ratio kappaflow / hand-written throughput: {hand / kappa:.3f}")


if __name__ == "__main__":
    main()
