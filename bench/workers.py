"""Workers scaling: kappaflow's word count with num.stream.threads=1 and =N on one broker, same input.

Not a test: it prints input lines/s of each run, the ratio N workers / 1 worker, and where the CPU went
during each timed window (CPU seconds of the broker's JVM, of the stream workers, and the machine's idle
share), read from /proc, so a ratio limited by the machine rather than by kappaflow shows as such: on a
2-core machine with the broker on it, the broker's own CPU competes with the second worker.

    python bench/workers.py [--lines 100000] [--threads 2] [--partitions 4] [--guarantee at_least_once]
        [--repeat 2] [--bootstrap host:port]

Rounds interleave 1 and N workers (best of each is reported). Each run is a fresh process (this script
with --one): workers are forked, and a process that ran RocksDB stores before cannot fork them safely.
Without --bootstrap it starts the project's broker on a free port (then its JVM's CPU is accounted;
with --bootstrap it is not known).
lines/s is timed as bench/throughput.py times kappaflow: from the first record processed to the last
(both sub-topologies), on the instance's records-processed counter (with workers, their reports reach
the parent every 0.5 s, so short runs are rounded: use enough --lines for a few seconds per run).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.local_broker import bench_broker  # noqa: E402
from bench.throughput import create_topic, fill, wait_processed  # noqa: E402
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]  # noqa: E402
from tests.kafka.streams_support import wordcount_topology  # noqa: E402

from kappaflow.runner import KafkaStreams, tune_gc_for_streaming  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of one process so far (0 when it is gone or unknown)."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def idle_seconds() -> float:
    """The machine's idle CPU seconds so far, summed over its cores."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()
    return (int(fields[4]) + int(fields[5])) / TICKS


@dataclass
class Run:
    lines_per_s: float
    seconds: float
    broker_cpu: float
    workers_cpu: float
    idle_cpu: float

    def text(self) -> str:
        return (
            f"{self.lines_per_s:,.0f} lines/s in {self.seconds:.1f}s; CPU s: broker {self.broker_cpu:.1f}, "
            f"workers {self.workers_cpu:.1f}, idle {self.idle_cpu:.1f} of {self.seconds * os.cpu_count():.1f}"
        )


def run(args: argparse.Namespace, bootstrap: str, source: str, threads: int, broker_pid: int | None) -> Run:
    expected = args.lines + args.lines * args.words  # both sub-topologies process: lines, then words
    config: dict[str, Any] = {
        "application.id": f"bench-workers-{threads}-{uuid.uuid4().hex[:6]}",
        "bootstrap.servers": bootstrap,
        "state.dir": tempfile.mkdtemp(prefix="kappaflow-bench-"),
        "processing.guarantee": args.guarantee,
        "num.stream.threads": threads,
        "metrics.port": -1,
    }
    sink = f"bench-out-workers-{uuid.uuid4().hex[:6]}"
    create_topic(AdminClient({"bootstrap.servers": bootstrap}), sink, args.partitions)
    app = KafkaStreams(wordcount_topology(source, sink), config)
    app.start()

    def pids() -> list[int | None]:
        return [t.pid for t in app.local_threads_metadata()]

    try:
        before: list[float] = [0.0, 0.0, 0.0]

        def read_before() -> None:
            before[:] = [cpu_seconds(broker_pid), sum(map(cpu_seconds, pids())), idle_seconds()]

        elapsed = wait_processed(app, expected, 900.0, read_before)
        after = (cpu_seconds(broker_pid), sum(map(cpu_seconds, pids())), idle_seconds())
    finally:
        app.close(60)
    broker, workers, idle = (b - a for a, b in zip(before, after, strict=True))
    return Run(args.lines / elapsed, elapsed, broker if broker_pid else float("nan"), workers, idle)


def run_in_child(
    args: argparse.Namespace, bootstrap: str, source: str, threads: int, broker: int | None
) -> Run:
    command = [sys.executable, __file__, "--one", str(threads), "--bootstrap", bootstrap, "--source", source]
    command += ["--lines", str(args.lines), "--words", str(args.words), "--partitions", str(args.partitions)]
    command += ["--guarantee", args.guarantee, "--broker-pid", str(broker or 0)]
    output = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True).stdout
    result = next(line for line in output.splitlines() if line.startswith("RESULT "))
    return Run(**json.loads(result[len("RESULT ") :]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100000)
    parser.add_argument("--words", type=int, default=3, help="words per line")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2, help="workers of the scaled run")
    parser.add_argument("--guarantee", default="at_least_once", choices=["at_least_once", "exactly_once_v2"])
    parser.add_argument("--repeat", type=int, default=2, help="interleaved rounds; the best of each is kept")
    parser.add_argument("--bootstrap", default="")
    parser.add_argument("--one", type=int, default=0, help=argparse.SUPPRESS)  # one run, in this process
    parser.add_argument("--source", default="", help=argparse.SUPPRESS)
    parser.add_argument("--broker-pid", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # the measured run's own process, as `kappaflow run`'s with its collector settings
        tune_gc_for_streaming()
        one_run = run(args, args.bootstrap, args.source, args.one, args.broker_pid or None)
        print("RESULT " + json.dumps(dataclasses.asdict(one_run)), flush=True)
        return 0
    with bench_broker(args.bootstrap) as (bootstrap, broker):
        source = f"bench-in-{uuid.uuid4().hex[:6]}"
        create_topic(AdminClient({"bootstrap.servers": bootstrap}), source, args.partitions)
        print(f"==> writing {args.lines} lines of {args.words} words to {source}", flush=True)
        fill(bootstrap, source, args.lines, args.words)
        best: dict[int, Run] = {}
        for round_number in range(1, max(args.repeat, 1) + 1):
            for threads in (1, args.threads):
                print(f"==> round {round_number}: {threads} worker(s), {args.guarantee} ...", flush=True)
                result = run_in_child(args, bootstrap, source, threads, broker.pid if broker else None)
                print(f"    {result.text()}", flush=True)
                if threads not in best or result.lines_per_s > best[threads].lines_per_s:
                    best[threads] = result
        one, many = best[1], best[args.threads]
        print(f"\n{'run (best of ' + str(args.repeat) + ')':<28} {'lines/s':>10}")
        print(f"{'1 worker':<28} {one.lines_per_s:>10,.0f}")
        print(f"{str(args.threads) + ' workers':<28} {many.lines_per_s:>10,.0f}")
        print(f"ratio {args.threads} workers / 1 worker: {many.lines_per_s / one.lines_per_s:.2f}x")
        print(f"  1 worker:  {one.text()}")
        print(f"  {args.threads} workers: {many.text()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
