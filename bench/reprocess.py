"""Rebuilding word count from the retained log: Spark local[N] reprocessing vs replay through the runtime.

Not a test: it prints input lines/s of both, and their ratio, measured in the same run on the same broker
and the same input topic, so machine speed cancels out. Both do the whole job: the replay is a fresh
kappaflow application (at_least_once) reading the topic from the beginning until every line and every
repartitioned word is processed and committed; the reprocessing is `kappaflow.spark.reprocess` into a
fresh application id (outputs, compacted changelogs, RocksDB state, committed offsets), once with each
reader: Spark's Kafka source (`spark`) and librdkafka inside the Spark tasks (`kafka-client`). Times are
wall clock from start to done; Spark's session start-up (a JVM) is reported apart, since one session
serves many runs, and added in the "+ session start" rows. The first run in a fresh session also pays
the JVM's warm-up of Spark's code paths.

    python bench/reprocess.py [--lines 200000] [--partitions 4] [--master local[2]] [--bootstrap host:port]

Without --bootstrap it starts the project's broker (tests/harness/kafka_broker.py) on a free port and
stops it at the end.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.throughput import WORDS, create_topic  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]  # noqa: E402
from tests.kafka.streams_support import wordcount_topology  # noqa: E402

from kappaflow.runner import KafkaStreams, State  # noqa: E402
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
    spark: Any, bootstrap: str, source: str, sink: str, state_dir: str, reader: str
) -> tuple[float, int]:
    config = {
        "application.id": f"bench-spark-{uuid.uuid4().hex[:6]}",
        "bootstrap.servers": bootstrap,
        "state.dir": state_dir,
    }
    started = time.perf_counter()
    result = reprocess(
        wordcount_topology(source, sink), config, spark=spark, progress=lambda t: print("    " + t)
    )
    for stats in result.task_stats:
        print(
            f"    task {stats['task']}: {stats['records']} records, input {stats['read_seconds']}s, "
            f"task {stats['seconds']}s"
        )
    return time.perf_counter() - started, result.records_processed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--words", type=int, default=3, help="words per line")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--bootstrap", default="")
    args = parser.parse_args()
    broker = None
    bootstrap = args.bootstrap
    state_dir = tempfile.mkdtemp(prefix="kappaflow-bench-reprocess-")
    if not bootstrap:
        from tests.harness.kafka_broker import LocalKafkaBroker
        from tests.harness.kafka_fixtures import free_port

        broker = LocalKafkaBroker(
            free_port(), Path(tempfile.mkdtemp(prefix="kafka-bench-")), controller_port=free_port()
        )
        print("==> starting the broker", flush=True)
        broker.start()
        bootstrap = broker.bootstrap_servers
    spark = None
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        source = f"bench-rp-in-{uuid.uuid4().hex[:6]}"
        create_topic(admin, source, args.partitions)
        print(f"==> writing {args.lines} lines of {args.words} words to {source}", flush=True)
        fill(bootstrap, source, args.lines, args.words)

        sink = f"bench-rp-out-replay-{uuid.uuid4().hex[:6]}"
        create_topic(admin, sink, args.partitions)
        print("==> replay through the runtime ...", flush=True)
        replay_s = replay(bootstrap, source, sink, args.lines, args.words, state_dir)
        print(f"    {replay_s:.1f}s", flush=True)

        print(f"==> Spark session {args.master} ...", flush=True)
        started = time.perf_counter()
        spark = create_session(args.master, "kappaflow-bench", {"spark.sql.shuffle.partitions": "4"})
        session_s = time.perf_counter() - started
        print(f"    {session_s:.1f}s", flush=True)
        timings: dict[str, float] = {}
        for reader in ("spark", "kafka-client"):
            sink = f"bench-rp-out-{reader}-{uuid.uuid4().hex[:6]}"
            create_topic(admin, sink, args.partitions)
            print(f"==> reprocess on Spark, reader {reader} ...", flush=True)
            timings[reader], processed = spark_run(spark, bootstrap, source, sink, state_dir, reader)
            print(f"    {timings[reader]:.1f}s ({processed} records through both sub-topologies)", flush=True)

        print()
        print(f"{'run':<64}{'seconds':>9}{'lines/s':>12}{'/ replay':>10}")
        rows = [("replay through the runtime (at_least_once)", replay_s)]
        for reader, seconds in timings.items():
            rows.append((f"Spark {args.master} reprocess, reader {reader}", seconds))
            rows.append(
                (f"Spark {args.master} reprocess, reader {reader}, + session start", seconds + session_s)
            )
        for label, seconds in rows:
            rate = args.lines / seconds
            print(f"{label:<64}{seconds:>9.1f}{rate:>12,.0f}{replay_s / seconds:>10.2f}")
    finally:
        if spark is not None:
            spark.stop()
        if broker is not None:
            broker.stop()
        shutil.rmtree(state_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
