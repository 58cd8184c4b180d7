"""Rebuilding word count from the retained log: Spark local[N] reprocessing vs replay through the runtime.

Not a test: it prints input lines/s of both, and their ratio, measured in the same run on the same broker
and the same input topic, so machine speed cancels out. Both do the whole job: the replay is a fresh
kappaflow application (at_least_once) reading the topic from the beginning until every line and every
repartitioned word is processed and committed; the reprocessing is `kappaflow.spark.reprocess` into a
fresh application id (outputs, compacted changelogs, RocksDB state, committed offsets), once with each
reader: Spark's Kafka source (`spark`) and librdkafka inside the Spark tasks (`kafka-client`), at each
master (local[1], local[2], local[4] by default: Spark task slots, whatever the machine's cores). Times
are wall clock from start to done; Spark's session start-up (a JVM) is reported apart, since one session
serves many runs (the first reader of a session still pays for starting its Python workers, so the default
reader, `kafka-client`, runs first). `--rounds N` repeats everything N times interleaved (replay, then each
master's runs) and reports each row's best and median, and ratios of both to replay's, since a shared
machine is noisy. `--warm` starts each session's Python workers before its timed runs and reports that
apart too, as a long-lived session (or a second run in one) would not pay it again. `--splits 1` turns
offset-range splits of stateless stages off (the "before" of that feature); by default the reprocessor
chooses. `--timeline` has each session write Spark's event log and prints, per stage, its wall time
against its tasks' run, deserialization, shuffle and GC times (bench/spark_timeline.py).

    python bench/reprocess.py [--lines 200000] [--partitions 4] [--masters local[1],local[2],local[4]]
                              [--readers kafka-client,spark] [--rounds 1] [--splits N] [--warm]
                              [--timeline] [--bootstrap host:port]

Without --bootstrap it starts the project's broker (tests/harness/kafka_broker.py) on a free port and
stops it at the end.
"""

from __future__ import annotations

import argparse
import importlib
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.local_broker import bench_broker  # noqa: E402
from bench.throughput import WORDS, create_topic  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]  # noqa: E402
from tests.kafka.streams_support import wordcount_topology  # noqa: E402

from kappaflow.runner import KafkaStreams, State, tune_gc_for_streaming  # noqa: E402
from kappaflow.spark import reprocess  # noqa: E402
from kappaflow.spark.session import create_session  # noqa: E402


def fill(bootstrap: str, topic: str, lines: int, words: int) -> None:
    """Keyed lines (key = line number), so murmur2 spreads them evenly: skew would hide parallelism."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "partitioner": "murmur2_random"})
    rng = random.Random(7)
    for i in range(lines):
        line = " ".join(rng.choice(WORDS) for _ in range(words))
        while True:
            try:
                producer.produce(topic, key=str(i).encode(), value=line.encode())
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10000 == 0:
            producer.poll(0)
    producer.flush(60)


def replay(bootstrap: str, source: str, sink: str, lines: int, words: int, state_dir: str) -> float:
    """Seconds for a fresh runtime application to process the whole log (both sub-topologies)."""
    expected = lines + lines * words
    config: dict[str, Any] = {
        "application.id": f"bench-replay-{uuid.uuid4().hex[:6]}",
        "bootstrap.servers": bootstrap,
        "state.dir": state_dir,
        "metrics.port": -1,
    }
    app = KafkaStreams(wordcount_topology(source, sink), config)
    started = time.perf_counter()
    app.start()
    try:
        deadline = time.monotonic() + 1800
        while app.metrics.counter("records-processed-total") < expected:
            if app.state is State.ERROR:
                raise RuntimeError(f"kappaflow failed: {app.error}")
            if time.monotonic() > deadline:
                raise RuntimeError("replay did not finish in 30 minutes")
            time.sleep(0.02)
    finally:
        app.close(60)
    return time.perf_counter() - started


def spark_run(
    spark: Any, bootstrap: str, source: str, sink: str, state_dir: str, reader: str, splits: int | None
) -> tuple[float, int]:
    config = {
        "application.id": f"bench-spark-{uuid.uuid4().hex[:6]}",
        "bootstrap.servers": bootstrap,
        "state.dir": state_dir,
    }
    started = time.perf_counter()
    options: dict[str, Any] = {"reader": reader}
    if splits is not None:  # passed only when asked, so the bench also runs against older code
        options["splits"] = splits
    result = reprocess(
        wordcount_topology(source, sink),
        config,
        spark=spark,
        progress=lambda t: print("    " + t),
        **options,
    )
    for stats in result.task_stats:
        print(
            f"    task {stats['task']}: {stats['records']} records, input {stats['read_seconds']}s, "
            f"task {stats['seconds']}s (CPU {stats.get('cpu_seconds', '?')}s)"
        )
    return time.perf_counter() - started, result.records_processed


def print_timeline(event_logs: Path, master: str, slots: int) -> None:
    """Each stage of the session's jobs: its wall time against its tasks' times (spark_timeline)."""
    from bench.spark_timeline import read_stages, report

    for log_file in sorted(event_logs.iterdir()):
        print(f"    Spark's event log, {master} ({slots} task slots): stages in submission order")
        for line in report(read_stages(log_file), slots):
            print("    " + line)


def _import_executor(_index: int) -> int:
    importlib.import_module("kappaflow.spark.executor")
    return os.getpid()


def start_workers(spark: Any) -> None:
    """One task per slot at once: Spark starts its Python daemon and forks a worker for each, which
    later tasks reuse. Without it the first reprocessing of a session pays for that (about 2 s here)."""
    from kappaflow.spark.reprocess import task_slots

    context = spark.sparkContext
    slots = task_slots(str(context.master), context.defaultParallelism)
    context.parallelize(range(slots), slots).map(_import_executor).collect()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--words", type=int, default=3, help="words per line")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--masters", default="local[1],local[2],local[4]")
    parser.add_argument("--readers", default="kafka-client,spark")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--splits", type=int, default=None, help="chunks per input partition (1: no split)")
    parser.add_argument(
        "--warm",
        action="store_true",
        help="start each session's Python workers before the timed runs (reported apart)",
    )
    parser.add_argument(
        "--timeline",
        action="store_true",
        help="write Spark's event log and print where each stage's wall time went (bench/spark_timeline.py)",
    )
    parser.add_argument("--bootstrap", default="")
    args = parser.parse_args()
    masters = [m.strip() for m in args.masters.split(",") if m.strip()]
    readers = [r.strip() for r in args.readers.split(",") if r.strip()]
    state_dir = tempfile.mkdtemp(prefix="kappaflow-bench-reprocess-")
    times: dict[str, list[float]] = {}

    def record(label: str, seconds: float) -> None:
        times.setdefault(label, []).append(seconds)

    replay_label = "replay through the runtime (at_least_once)"
    tune_gc_for_streaming()  # the collector `kappaflow run` sets (runner/gc_tuning.py)
    with bench_broker(args.bootstrap) as (bootstrap, _broker):
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            source = f"bench-rp-in-{uuid.uuid4().hex[:6]}"
            create_topic(admin, source, args.partitions)
            print(f"==> writing {args.lines} lines of {args.words} words to {source}", flush=True)
            fill(bootstrap, source, args.lines, args.words)
            for round_no in range(1, args.rounds + 1):
                sink = f"bench-rp-out-replay-{uuid.uuid4().hex[:6]}"
                create_topic(admin, sink, args.partitions)
                print(f"==> round {round_no}: replay through the runtime ...", flush=True)
                replay_s = replay(bootstrap, source, sink, args.lines, args.words, state_dir)
                print(f"    {replay_s:.1f}s", flush=True)
                record(replay_label, replay_s)
                for master in masters:
                    print(f"==> round {round_no}: Spark session {master} ...", flush=True)
                    started = time.perf_counter()
                    conf = {"spark.sql.shuffle.partitions": "4"}
                    event_logs = Path(tempfile.mkdtemp(prefix="kappaflow-bench-events-"))
                    if args.timeline:
                        conf.update(
                            {
                                "spark.eventLog.enabled": "true",
                                "spark.eventLog.dir": str(event_logs),
                                "spark.eventLog.compress": "false",  # plain JSON lines
                            }
                        )
                    spark = create_session(master, "kappaflow-bench", conf)
                    print(f"    {time.perf_counter() - started:.1f}s", flush=True)
                    record(f"Spark {master} session start (JVM)", time.perf_counter() - started)
                    try:
                        if args.warm:
                            started = time.perf_counter()
                            start_workers(spark)
                            warm_s = time.perf_counter() - started
                            print(f"    Python workers started in {warm_s:.1f}s", flush=True)
                            record(f"Spark {master} Python workers start (--warm)", warm_s)
                        for reader in readers:
                            sink = f"bench-rp-out-{reader}-{uuid.uuid4().hex[:6]}"
                            create_topic(admin, sink, args.partitions)
                            print(f"==> reprocess on Spark {master}, reader {reader} ...", flush=True)
                            seconds, processed = spark_run(
                                spark, bootstrap, source, sink, state_dir, reader, args.splits
                            )
                            print(
                                f"    {seconds:.1f}s ({processed} records through both sub-topologies)",
                                flush=True,
                            )
                            warmth = ", warm" if args.warm else ""
                            record(f"Spark {master} reprocess, reader {reader}{warmth}", seconds)
                    finally:
                        slots = spark.sparkContext.defaultParallelism
                        spark.stop()
                    if args.timeline:
                        print_timeline(event_logs, master, slots)
                    shutil.rmtree(event_logs, ignore_errors=True)
            print()
            splits = "auto" if args.splits is None else str(args.splits)
            print(
                f"best and median of {args.rounds} round(s); {args.lines} lines, {args.partitions} "
                f"partitions, splits {splits}"
            )
            print(f"{'run':<58}{'best s':>8}{'median s':>10}{'lines/s':>10}{'/ replay':>10}{'median':>8}")
            replay_best, replay_median = min(times[replay_label]), statistics.median(times[replay_label])
            for label, samples in times.items():
                fastest, median = min(samples), statistics.median(samples)
                if " start" in label:
                    print(f"{label:<58}{fastest:>8.1f}{median:>10.1f}")
                    continue
                print(
                    f"{label:<58}{fastest:>8.1f}{median:>10.1f}{args.lines / fastest:>10,.0f}"
                    f"{replay_best / fastest:>10.2f}{replay_median / median:>8.2f}"
                )
        finally:
            shutil.rmtree(state_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
