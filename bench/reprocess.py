"""Rebuilding word count from the retained log: Spark local[N] reprocessing vs replay through the runtime.

Not a test: it prints input lines/s of each, and their ratios, measured in the same run on the same broker
and the same input topics, so machine speed cancels out. Every run does the whole job: a replay is a
fresh kappaflow application (at_least_once, `num.stream.threads` 1 and 2, each in a fresh process)
reading the topic from the beginning until every line and every repartitioned word is processed and
committed; a reprocessing is `kappaflow.spark.reprocess` into a fresh application id (outputs, compacted
changelogs, state, committed offsets) with each reader (`kafka-client`: librdkafka inside the Spark
tasks, the default; `spark`: Spark's Kafka source) at each master (Spark task slots, whatever the
machine's cores). One input topic per `--partitions` count (1 and 4 by default), the same lines in each.

It prints issue 31's targets for Spark beyond the partition count, per input, with met / NOT met: local[2]
against local[1] (the second core: >= 1.7x) and local[2] against replay with num.stream.threads=2 on the
same cores (the fair comparison: >= 1.0x). A 1-partition input reaches a second core only through splits:
the stateless first stage cut into offset ranges and the count cut into key slots
(runtime/kappaflow/spark/splits.py); `--splits 1` turns both off (the "before").

Times are wall clock from start to done; Spark's session start-up (a JVM) is reported apart, since one
session serves many runs (the first run of a session still pays for starting its Python workers and for
the JVM's first shuffle; `--warm` starts the workers and runs one small shuffle before the timed runs and
reports that apart). `--warm` also warms the broker first: one untimed reprocessing of each input, in a
session of its own at the widest master. A broker started for the bench is a JVM minutes old, still
compiling the paths a reprocessing takes (its C1 and C2 compiler threads took 0.2-0.5 CPU s of a 3.5 s
local[2] run, sampled per thread); a production broker did that long ago, and runs on other machines than
Spark's executors. On two shared cores that compiling comes out of the second task slot's share at
local[2], while at local[1] it runs on the idle core. `--rounds N` repeats everything N times
interleaved (the replays, then each master's runs) and reports each row's best and median, and ratios of
both to the single-threaded replay's, since a shared machine is noisy; the 1-minute load average is
printed with each run and its range with the results. `--timeline` has each session write Spark's event
log and prints, per stage, its wall time against its tasks' run, deserialization, shuffle and GC times
(bench/spark_timeline.py).

    python bench/reprocess.py [--lines 200000] [--partitions 1,4] [--masters local[1],local[2]]
                              [--readers kafka-client] [--threads 1,2] [--rounds 1] [--splits N] [--warm]
                              [--timeline] [--cpu] [--bootstrap host:port]

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
import subprocess
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

from bench import process_cpu  # noqa: E402
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


def replay(
    bootstrap: str, source: str, sink: str, lines: int, words: int, state_dir: str, threads: int = 1
) -> float:
    """Seconds for a fresh runtime application to process the whole log (both sub-topologies).

    With num.stream.threads > 1 the workers report their counts to this process every 0.5 s, so the end
    is seen up to that late."""
    expected = lines + lines * words
    config: dict[str, Any] = {
        "application.id": f"bench-replay-{uuid.uuid4().hex[:6]}",
        "bootstrap.servers": bootstrap,
        "state.dir": state_dir,
        "metrics.port": -1,
        "num.stream.threads": threads,
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
        progress=lambda t: print(f"    [{time.perf_counter() - started:5.2f}s] {t}"),  # driver steps' times
        **options,
    )
    for stats in result.task_stats:
        print(
            f"    task {stats['task']} (slice {stats.get('key_slice', '0/1')}): {stats['records']} records, "
            f"input {stats['read_seconds']}s, "
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


def _payloads(index: int, _rows: Any) -> Any:
    for slot in range(4):
        yield slot, bytes([index]) * (2 << 20)


def warm_broker(
    bootstrap: str, sources: dict[int, str], master: str, state_dir: str, reader: str, admin: AdminClient
) -> float:
    """One untimed reprocessing of each input in a session of its own (module docstring: `--warm`)."""
    started = time.perf_counter()
    spark = create_session(master, "kappaflow-bench-warm-broker", {"spark.sql.shuffle.partitions": "4"})
    try:
        for partitions, source in sources.items():
            sink = f"bench-rp-out-warm-{uuid.uuid4().hex[:6]}"
            create_topic(admin, sink, partitions)
            reprocess(
                wordcount_topology(source, sink),
                {
                    "application.id": f"bench-warm-{uuid.uuid4().hex[:6]}",
                    "bootstrap.servers": bootstrap,
                    "state.dir": state_dir,
                },
                spark=spark,
                reader=reader,
                progress=lambda _text: None,
            )
    finally:
        spark.stop()
    return time.perf_counter() - started


def start_workers(spark: Any) -> None:
    """One task per slot at once: Spark starts its Python daemon and forks a worker for each, which
    later tasks reuse. Without it the first reprocessing of a session pays for that (about 2 s here).
    Then one small shuffle of byte payloads, as a reprocessing's stages shuffle: the JVM's first shuffle
    write loads and compiles its path, which held the first stage's first tasks ~0.35 s after their
    Python side had finished (a session's cost, as its start-up is, not a run's)."""
    from kappaflow.spark.reprocess import task_slots

    context = spark.sparkContext
    slots = task_slots(str(context.master), context.defaultParallelism)
    context.parallelize(range(slots), slots).map(_import_executor).collect()
    context.parallelize(range(slots), slots).mapPartitionsWithIndex(_payloads).partitionBy(4).count()


def replay_in_child(bootstrap: str, source: str, sink: str, args: argparse.Namespace, threads: int) -> float:
    """A replay in a fresh process (this script with --replay-one): num.stream.threads > 1 forks worker
    processes, which a process that ran RocksDB stores or a Spark driver before cannot do safely; and
    every replay row then starts alike, with `kappaflow run`'s collector settings."""
    command = [sys.executable, __file__, "--replay-one", str(threads), "--bootstrap", bootstrap]
    command += ["--source", source, "--sink", sink, "--lines", str(args.lines), "--words", str(args.words)]
    output = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True).stdout
    return float(next(line for line in output.splitlines() if line.startswith("RESULT ")).split()[1])


def load() -> str:
    return "load {:.1f}/{:.1f}/{:.1f}".format(*os.getloadavg())


def verdicts(times: dict[str, list[float]], partitions: int, readers: list[str], warmth: str) -> list[str]:
    """The targets of issue 31 item 6 for one input: the second core, and the fair comparison with replay."""
    lines = []
    fair = times.get(f"{partitions}p replay, num.stream.threads=2")
    for reader in readers:
        one = times.get(f"{partitions}p Spark local[1], reader {reader}{warmth}")
        two = times.get(f"{partitions}p Spark local[2], reader {reader}{warmth}")
        if one and two:
            ratio, median = min(one) / min(two), statistics.median(one) / statistics.median(two)
            met = "met" if ratio >= 1.7 else "NOT met"
            lines.append(
                f"{partitions} partition(s), {reader}: local[2] / local[1] {ratio:.2f}x best, {median:.2f}x "
                f"median (target >= 1.7x): {met}"
            )
        if fair and two:
            ratio, median = min(fair) / min(two), statistics.median(fair) / statistics.median(two)
            met = "met" if ratio >= 1.0 else "NOT met"
            lines.append(
                f"{partitions} partition(s), {reader}: local[2] / replay with num.stream.threads=2 "
                f"{ratio:.2f}x best, {median:.2f}x median (target >= 1.0x): {met}"
            )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--words", type=int, default=3, help="words per line")
    parser.add_argument("--partitions", default="1,4", help="input partition counts, one topic each")
    parser.add_argument("--masters", default="local[1],local[2]")
    parser.add_argument("--readers", default="kafka-client")
    parser.add_argument("--threads", default="1,2", help="num.stream.threads of the replays")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--splits", type=int, default=None, help="splits per partition (1: no split)")
    parser.add_argument(
        "--warm",
        action="store_true",
        help="start each session's Python workers and run one shuffle before the timed runs (reported apart)",
    )
    parser.add_argument(
        "--timeline",
        action="store_true",
        help="write Spark's event log and print where each stage's wall time went (bench/spark_timeline.py)",
    )
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="print each Spark run's CPU seconds per process: JVM, workers, broker (bench/process_cpu.py)",
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for the sessions (repeatable): A/B a session option against the defaults",
    )
    parser.add_argument("--bootstrap", default="")
    parser.add_argument("--replay-one", type=int, default=0, help=argparse.SUPPRESS)  # threads, in a child
    parser.add_argument("--source", default="", help=argparse.SUPPRESS)
    parser.add_argument("--sink", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.replay_one:
        tune_gc_for_streaming()  # the collector `kappaflow run` sets (runner/gc_tuning.py)
        state_dir = tempfile.mkdtemp(prefix="kappaflow-bench-replay-")
        try:
            seconds = replay(
                args.bootstrap, args.source, args.sink, args.lines, args.words, state_dir, args.replay_one
            )
        finally:
            shutil.rmtree(state_dir, ignore_errors=True)
        print(f"RESULT {seconds}", flush=True)
        return 0
    masters = [m.strip() for m in args.masters.split(",") if m.strip()]
    readers = [r.strip() for r in args.readers.split(",") if r.strip()]
    partition_counts = [int(p) for p in args.partitions.split(",") if p.strip()]
    thread_counts = [int(t) for t in args.threads.split(",") if t.strip()]
    state_dir = tempfile.mkdtemp(prefix="kappaflow-bench-reprocess-")
    times: dict[str, list[float]] = {}
    loads: list[float] = []

    def record(label: str, seconds: float) -> None:
        times.setdefault(label, []).append(seconds)
        loads.append(os.getloadavg()[0])

    with bench_broker(args.bootstrap) as (bootstrap, _broker):
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            sources: dict[int, str] = {}
            for partitions in partition_counts:
                source = sources[partitions] = f"bench-rp-in{partitions}-{uuid.uuid4().hex[:6]}"
                create_topic(admin, source, partitions)
                print(f"==> writing {args.lines} lines of {args.words} words to {source}", flush=True)
                fill(bootstrap, source, args.lines, args.words)
            if args.warm:
                print(f"==> warming the broker: each input reprocessed untimed on {masters[-1]}", flush=True)
                warm_s = warm_broker(bootstrap, sources, masters[-1], state_dir, readers[0], admin)
                print(f"    {warm_s:.1f}s", flush=True)
                record("broker warm-up, each input reprocessed untimed (--warm)", warm_s)
            for round_no in range(1, args.rounds + 1):
                for partitions, source in sources.items():
                    for threads in thread_counts:
                        sink = f"bench-rp-out-replay-{uuid.uuid4().hex[:6]}"
                        create_topic(admin, sink, partitions)
                        print(
                            f"==> round {round_no}, {partitions} partition(s): replay through the runtime, "
                            f"num.stream.threads={threads} ({load()}) ...",
                            flush=True,
                        )
                        replay_s = replay_in_child(bootstrap, source, sink, args, threads)
                        print(f"    {replay_s:.1f}s", flush=True)
                        record(f"{partitions}p replay, num.stream.threads={threads}", replay_s)
                for master in masters:
                    print(f"==> round {round_no}: Spark session {master} ({load()}) ...", flush=True)
                    started = time.perf_counter()
                    conf = {"spark.sql.shuffle.partitions": "4"}
                    conf.update(dict(item.split("=", 1) for item in args.conf))
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
                            print(f"    workers started, one shuffle run: {warm_s:.1f}s", flush=True)
                            record(f"Spark {master} workers start, first shuffle (--warm)", warm_s)
                        # Alternate which input goes first: a session's first run meets its workers cold.
                        inputs = list(sources.items())[:: 1 if round_no % 2 else -1]
                        for partitions, source in inputs:
                            for reader in readers:
                                sink = f"bench-rp-out-{reader}-{uuid.uuid4().hex[:6]}"
                                create_topic(admin, sink, partitions)
                                print(
                                    f"==> reprocess {partitions} partition(s) on Spark {master}, reader "
                                    f"{reader} ({load()}) ...",
                                    flush=True,
                                )
                                cpu_before = process_cpu.snapshot() if args.cpu else {}
                                seconds, processed = spark_run(
                                    spark, bootstrap, source, sink, state_dir, reader, args.splits
                                )
                                if args.cpu:
                                    spent = process_cpu.difference(cpu_before, process_cpu.snapshot())
                                    print("    CPU: " + "; ".join(spent), flush=True)
                                print(
                                    f"    {seconds:.1f}s ({processed} records through both sub-topologies)",
                                    flush=True,
                                )
                                warmth = ", warm" if args.warm else ""
                                record(f"{partitions}p Spark {master}, reader {reader}{warmth}", seconds)
                    finally:
                        from kappaflow.spark.reprocess import task_slots

                        # the master's slots: the session pins spark.default.parallelism for its shuffles
                        slots = task_slots(master, spark.sparkContext.defaultParallelism)
                        spark.stop()
                    if args.timeline:
                        print_timeline(event_logs, master, slots)
                    keep = os.environ.get("KAPPAFLOW_BENCH_KEEP_EVENTS")
                    if args.timeline and keep:  # for a per-task timeline (bench/spark_timeline.py --tasks)
                        kept = Path(keep) / f"round{round_no}-{master}"
                        shutil.copytree(event_logs, kept, dirs_exist_ok=True)
                    shutil.rmtree(event_logs, ignore_errors=True)
            print()
            splits = "auto" if args.splits is None else str(args.splits)
            print(
                f"best and median of {args.rounds} round(s); {args.lines} lines, splits {splits}; 1-minute "
                f"load average {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores during the runs"
            )
            for partitions in partition_counts:
                print(f"\n{partitions} partition(s)")
                print(f"{'run':<58}{'best s':>8}{'median s':>10}{'lines/s':>10}{'/ replay':>10}{'median':>8}")
                replay_label = f"{partitions}p replay, num.stream.threads={thread_counts[0]}"
                replay_best = min(times[replay_label])
                replay_median = statistics.median(times[replay_label])
                for label, samples in times.items():
                    if not label.startswith(f"{partitions}p "):
                        continue
                    fastest, median = min(samples), statistics.median(samples)
                    print(
                        f"{label.split(' ', 1)[1]:<58}{fastest:>8.1f}{median:>10.1f}"
                        f"{args.lines / fastest:>10,.0f}{replay_best / fastest:>10.2f}"
                        f"{replay_median / median:>8.2f}"
                    )
            for label, samples in times.items():
                if not label[0].isdigit():  # not one input's run: session and warm-up costs
                    print(f"{label:<58}{min(samples):>8.1f}{statistics.median(samples):>10.1f}")
            print()
            for partitions in partition_counts:
                for line in verdicts(times, partitions, readers, ", warm" if args.warm else ""):
                    print(line)
        finally:
            shutil.rmtree(state_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
