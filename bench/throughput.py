"""Throughput on one local broker: kappaflow word count vs what it replaces, in the same run.

Not a test: it prints input lines/s of every run and ratios, measured in the same run on the same broker
and input, so machine speed cancels out. The input is N lines of W words in a P-partition topic, written
once; each run uses a fresh consumer group / application id and output topic. The rows:

- raw consume->produce loop: each line copied to the output with confluent-kafka, commits every 10k
  records; the ceiling for Python on this broker.
- hand-written word count (no repartition): split, count in a dict, produce each new count; no
  repartition topic, state store or changelog, so only correct with one consumer.
- hand-written word count via repartition: Kafka Streams' data flow by hand (lines -> words keyed by
  word through a repartition topic -> dict counts -> output every 30000 words, then flush and commit);
  each word makes the broker round trip, so this is the floor for any Python implementation of it.
- kappaflow at_least_once / exactly_once_v2: examples/wordcount.py's topology on ``KafkaStreams``, in
  a process whose garbage collector is set as `kappaflow run` sets its own (runner/gc_tuning.py); the
  bench sets it at start, so the hand-written Python rows run with the same collector.
- Java Kafka Streams at_least_once / exactly_once_v2: the same topology on Apache Kafka Streams at the
  broker's version (bench/peers/WordCountPeer.java, run as a JVM by bench/kafka_streams_peer.py, which
  fetches its pinned jars once); one stream thread, default caching and commit interval.
- Quix Streams at-least-once / exactly-once and Faust-streaming at-least-once: the same data flow in the
  other Python libraries (bench/peers/quix_wordcount.py, faust_wordcount.py), each in a cached virtualenv
  of its own (bench/python_peers.py). Faust reads only the first --faust-lines lines (it is ~30x slower).

"lines/s" is input lines per second from the first record processed to the last one processed
(start-up, the JVM's included, excluded); for the frameworks, "last" is when both sub-topologies together
have processed lines + lines * words records. The JVM's JIT warm-up is inside Java's window, so short
runs favour Python; use more --lines for steadier numbers. The last block divides kappaflow by each peer.

Each in-process row also prints the process's CPU seconds per line inside its window (every thread:
librdkafka's and RocksDB's included; not the broker's), and a kappaflow row the commits that fell in it.
On a loaded machine the rates swing 2x between rounds while CPU per line moves far less, and the window
shows what a row did: at 200k lines it lasts ~1-2 s, so at_least_once (commit.interval.ms 30 s) commits
never inside it - its cached counts are flushed, logged and produced after it ends - while exactly_once_v2
commits every 100 ms.

    python bench/throughput.py [--lines 50000] [--partitions 4] [--bootstrap host:port] [--no-java]
        [--no-python-peers] [--faust-lines 10000] [--repeat N]

The last block checks the targets, each guarantee against its own peer row (issue 31: kappaflow >= 2x Java
Kafka Streams and >= 1.0x the hand-written repartition floor; the earlier ones still hold: >= 2x Quix
Streams and Faust-streaming, exactly_once_v2 within 15% of at_least_once).

Without --bootstrap it starts the project's broker (tests/harness/kafka_broker.py) on a free port and
stops it at the end.
"""

from __future__ import annotations

import argparse
import random
import resource
import struct
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.local_broker import bench_broker  # noqa: E402
from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # noqa: E402
from examples.wordcount import split_words  # noqa: E402
from tests.kafka.streams_support import wordcount_topology  # noqa: E402

from bench import kafka_streams_peer, python_peers  # noqa: E402
from kappaflow.runner import KafkaStreams, State, tune_gc_for_streaming  # noqa: E402

WORDS = [f"w{i}" for i in range(1000)]
# The fetch tuning kappaflow's consumer has (clients/kafka.py), given to every Python consumer here so each
# row is at its best: with librdkafka's default 1 s fetch.queue.backoff.ms a consumer whose local queue
# passes queued.min.messages (100k) stalls for a second, and repartition records come back late.
FETCH_TUNING = {"fetch.wait.max.ms": 50, "fetch.queue.backoff.ms": 20}


# What the last in-process row spent inside its window: process CPU seconds per line and, for a kappaflow
# row, the commits in it (-1: not a kappaflow row); printed after the row's rate.
WINDOW: dict[str, float] = {}


def cpu_seconds() -> float:
    """The process's CPU time so far, all threads (user + system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def window_cpu(cpu_at_start: float, lines: int, commits: float = -1.0) -> None:
    """Note the CPU per line of a window that started at `cpu_at_start` and ends now."""
    WINDOW.update(cpu_us_per_line=(cpu_seconds() - cpu_at_start) * 1e6 / lines, commits=commits)


def create_topic(admin: AdminClient, name: str, partitions: int) -> None:
    """Every run gets its own topics: no run reads what an earlier one wrote."""
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(30)


def fill(bootstrap: str, topic: str, lines: int, words: int) -> None:
    """The shared input, written once with a fixed seed so every run and every bench run reads the same."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20})
    rng = random.Random(7)
    for i in range(lines):
        producer.produce(topic, value=" ".join(rng.choice(WORDS) for _ in range(words)).encode())
        if i % 10000 == 0:
            producer.poll(0)
    producer.flush(60)


def _clients(bootstrap: str, group_prefix: str, topics: list[str]) -> tuple[Consumer, Producer]:
    """A consumer (fresh group, from the earliest offset, manual commits) subscribed to `topics`, and a
    producer with the partitioner every kappaflow producer uses."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{group_prefix}-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **FETCH_TUNING,
        }
    )
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "partitioner": "murmur2_random"})
    consumer.subscribe(topics)
    return consumer, producer


def raw_loop(bootstrap: str, source: str, sink: str, lines: int) -> float:
    """Consume each line and produce it unchanged, committing every 10k records: the floor for Python."""
    consumer, producer = _clients(bootstrap, "raw", [source])
    seen = 0
    started = cpu_at_start = 0.0
    while seen < lines:
        for msg in consumer.consume(1000, 0) or consumer.consume(1, 0.5):
            if msg.error() is not None:
                continue
            if not started:
                started, cpu_at_start = time.perf_counter(), cpu_seconds()
            while True:
                try:
                    producer.produce(sink, key=msg.key(), value=msg.value())
                    break
                except BufferError:
                    producer.poll(0.01)
            seen += 1
            if seen % 10000 == 0:
                producer.flush()
                consumer.commit(asynchronous=False)
    producer.flush()
    if seen % 10000:
        consumer.commit(asynchronous=False)
    elapsed = time.perf_counter() - started
    window_cpu(cpu_at_start, lines)
    consumer.close()
    return lines / elapsed


def handwritten_wordcount(bootstrap: str, source: str, sink: str, lines: int) -> float:
    """Word count written by hand on confluent-kafka: split, count in a dict, produce each new count.

    No repartition topic, no state store, no changelog and no fault tolerance, so it is only correct
    with one consumer: it shows what the framework's guarantees cost over the least Python can do.
    """
    consumer, producer = _clients(bootstrap, "hand", [source])
    pack = struct.Struct(">q").pack
    counts: dict[str, int] = {}
    seen = 0
    started = cpu_at_start = 0.0
    while seen < lines:
        for msg in consumer.consume(1000, 0) or consumer.consume(1, 0.5):
            if msg.error() is not None:
                continue
            if not started:
                started, cpu_at_start = time.perf_counter(), cpu_seconds()
            for word in (msg.value() or b"").decode().lower().split():
                count = counts[word] = counts.get(word, 0) + 1
                while True:
                    try:
                        producer.produce(sink, key=word.encode(), value=pack(count))
                        break
                    except BufferError:
                        producer.poll(0.01)
            seen += 1
            if seen % 10000 == 0:
                producer.flush()
                consumer.commit(asynchronous=False)
    producer.flush()
    if seen % 10000:
        consumer.commit(asynchronous=False)
    elapsed = time.perf_counter() - started
    window_cpu(cpu_at_start, lines)
    consumer.close()
    return lines / elapsed


def _produce(producer: Producer, topic: str, key: bytes | None, value: bytes) -> None:
    """Produce, serving delivery reports when the local queue is full instead of dropping the record."""
    while True:
        try:
            producer.produce(topic, key=key, value=value)
            return
        except BufferError:
            producer.poll(0.01)


def repartition_wordcount(
    bootstrap: str, source: str, repartition: str, sink: str, lines: int, words: int
) -> float:
    """Kafka Streams' word-count data flow by hand: lines -> words keyed through a topic -> dict counts.

    One consumer reads the source and the repartition topic; each word makes the broker round trip a
    repartition record makes in kappaflow and Java Kafka Streams, then is counted; every 30000 counted
    words (and at the end) the changed counts are produced, everything flushed and offsets committed.
    No changelog, no transactions, no restore: the floor for any Python implementation of that flow.
    """
    consumer, producer = _clients(bootstrap, "hand-rep", [source, repartition])
    pack = struct.Struct(">q").pack
    counts: dict[bytes, int] = {}
    dirty: set[bytes] = set()
    expected = lines * words
    counted = 0
    started = finished = cpu_at_start = 0.0

    def flush_counts() -> None:
        for key in dirty:
            _produce(producer, sink, key, pack(counts[key]))
        dirty.clear()
        producer.flush()
        consumer.commit(asynchronous=False)

    while counted < expected:
        # What is already fetched, else wait for the next record: a batch call that waits to fill up
        # would stall on the last repartition records and time the wait, not the work.
        batch = consumer.consume(1000, 0) or consumer.consume(1, 0.5)
        for msg in batch:
            if msg.error() is not None:
                continue
            if not started:
                started, cpu_at_start = time.perf_counter(), cpu_seconds()
            if msg.topic() == source:
                for word in split_words((msg.value() or b"").decode()):
                    encoded = word.encode()
                    _produce(producer, repartition, encoded, encoded)
                continue
            key = msg.key() or b""
            counts[key] = counts.get(key, 0) + 1
            dirty.add(key)
            counted += 1
            if counted == expected:
                finished = time.perf_counter()
                window_cpu(cpu_at_start, lines)
            if counted % 30000 == 0:
                flush_counts()
        producer.poll(0)
    if counted % 30000:  # else the last commit already covers every consumed offset
        flush_counts()
    consumer.close()
    return lines / (finished - started)


def kappaflow_run(
    bootstrap: str,
    source: str,
    sink: str,
    lines: int,
    words: int,
    guarantee: str,
    extra: dict[str, str] | None = None,
) -> float:
    """kappaflow's word count, timed on its own processed-records counter like the Java peer times itself;
    `extra`: settings over the defaults (the `--before` rows)."""
    expected = lines + lines * words  # both sub-topologies process: lines, then words
    state_dir = tempfile.mkdtemp(prefix="kappaflow-bench-")
    config: dict[str, Any] = {
        "application.id": f"bench-{guarantee}-{uuid.uuid4().hex[:6]}",
        "bootstrap.servers": bootstrap,
        "state.dir": state_dir,
        "processing.guarantee": guarantee,
        "metrics.port": -1,
        **(extra or {}),
    }
    app = KafkaStreams(wordcount_topology(source, sink), config)
    at_start: list[float] = []

    def on_first() -> None:
        at_start.extend((cpu_seconds(), app.metrics.counter("commit-total")))

    app.start()
    try:
        elapsed = wait_processed(app, expected, on_first=on_first)
        window_cpu(at_start[0], lines, app.metrics.counter("commit-total") - at_start[1])
    finally:
        app.close(60)
    return lines / elapsed


def wait_processed(
    app: KafkaStreams, expected: int, timeout_s: float = 600.0, on_first: Callable[[], None] | None = None
) -> float:
    """Seconds from the first record `app` processed to the `expected`-th, on its own processed-records
    counter; `on_first()` runs when the first record is seen (a caller's own start readings)."""
    started = 0.0
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done = app.metrics.counter("records-processed-total")
        if done and not started:
            started = time.perf_counter()
            if on_first is not None:
                on_first()
        if done >= expected:
            break
        if app.state is State.ERROR:
            raise RuntimeError(f"kappaflow failed: {app.error}")
        time.sleep(0.02)
    return time.perf_counter() - started


RUNS = {
    "raw": "raw consume->produce loop",
    "handwritten": "hand-written word count (no repartition)",
    "repartition": "hand-written word count via repartition",
    "at_least_once": "kappaflow at_least_once",
    "exactly_once_v2": "kappaflow exactly_once_v2",
    "java_at_least_once": "Java Kafka Streams at_least_once",
    "java_exactly_once_v2": "Java Kafka Streams exactly_once_v2",
    "quix_at_least_once": "Quix Streams 3.28.1 at-least-once",
    "quix_exactly_once_v2": "Quix Streams 3.28.1 exactly-once",
    "faust_at_least_once": "Faust-streaming 0.15.3 at-least-once",
}
JAVA_RUNS = ("java_at_least_once", "java_exactly_once_v2")
PYTHON_PEER_RUNS = ("quix_at_least_once", "quix_exactly_once_v2", "faust_at_least_once")
# (numerator, denominator): what kappaflow costs against each thing it is compared with.
COMPARISONS = (
    ("at_least_once", "java_at_least_once"),
    ("exactly_once_v2", "java_exactly_once_v2"),
    ("at_least_once", "repartition"),
    ("at_least_once", "handwritten"),
    ("at_least_once", "quix_at_least_once"),
    ("exactly_once_v2", "quix_exactly_once_v2"),
    ("at_least_once", "faust_at_least_once"),
)
# (numerator, denominator, the ratio the issue asks for): printed as met / NOT met.
TARGETS = (
    ("at_least_once", "java_at_least_once", 2.0),
    ("exactly_once_v2", "java_exactly_once_v2", 2.0),
    ("at_least_once", "repartition", 1.0),
    ("exactly_once_v2", "repartition", 1.0),
    ("at_least_once", "quix_at_least_once", 2.0),
    ("exactly_once_v2", "quix_exactly_once_v2", 2.0),
    ("at_least_once", "faust_at_least_once", 2.0),
    ("exactly_once_v2", "at_least_once", 0.85),
)


def run_one(name: str, args: argparse.Namespace, bootstrap: str, source: str, classpath: str) -> float:
    """One row of the table on a fresh output topic (and repartition topic / group / app id)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    sink = f"bench-out-{name}-{uuid.uuid4().hex[:6]}"
    create_topic(admin, sink, args.partitions)
    if name == "raw":
        return raw_loop(bootstrap, source, sink, args.lines)
    if name == "handwritten":
        return handwritten_wordcount(bootstrap, source, sink, args.lines)
    if name == "repartition":
        repartition = f"bench-repartition-{uuid.uuid4().hex[:6]}"
        create_topic(admin, repartition, args.partitions)
        return repartition_wordcount(bootstrap, source, repartition, sink, args.lines, args.words)
    if name.startswith("java_"):
        guarantee = name.removeprefix("java_")
        return kafka_streams_peer.run_peer(
            classpath, bootstrap, source, sink, args.lines, args.words, guarantee
        )
    if name.startswith("quix_"):
        guarantee = name.removeprefix("quix_")
        return python_peers.run_quix(bootstrap, source, sink, args.lines, args.words, guarantee)
    if name == "faust_at_least_once":
        words_topic = f"bench-faust-words-{uuid.uuid4().hex[:6]}"
        create_topic(admin, words_topic, args.partitions)
        faust_lines = min(args.faust_lines, args.lines)
        return python_peers.run_faust(
            bootstrap, source, sink, words_topic, faust_lines, args.words, args.partitions
        )
    return kappaflow_run(bootstrap, source, sink, args.lines, args.words, name, {})


def window_note(name: str) -> str:
    """The CPU (and commits) of the row that just ran, or "" when the row ran in another process."""
    if name.startswith(("java_", "quix_", "faust_")) or not WINDOW:
        return ""
    note = f", {WINDOW['cpu_us_per_line']:.2f} us CPU per line"
    if WINDOW["commits"] >= 0:
        note += f", {WINDOW['commits']:.0f} commits in the window"
    WINDOW.clear()
    return note


def print_table(results: dict[str, float | None]) -> None:
    """Every run against the raw loop, then kappaflow against each peer; a failed run prints n/a."""
    raw = results.get("raw")
    print(f"\n{'run':<44}{'lines/s':>10}{'/ raw loop':>12}")
    for name, label in RUNS.items():
        value = results.get(name)
        if value is None:
            print(f"{label:<44}{'n/a':>10}{'n/a':>12}")
        else:
            ratio = f"{value / raw:.2f}" if raw else "n/a"
            print(f"{label:<44}{value:>10,.0f}{ratio:>12}")
    print(f"\n{'kappaflow / peer':<82}{'ratio':>8}")
    for numerator, denominator in COMPARISONS:
        top, bottom = results.get(numerator), results.get(denominator)
        ratio = f"{top / bottom:.2f}" if top and bottom else "n/a"
        print(f"{RUNS[numerator] + ' / ' + RUNS[denominator]:<82}{ratio:>8}")
    print(f"\n{'target':<82}{'ratio':>8}  verdict")
    for numerator, denominator, wanted in TARGETS:
        top, bottom = results.get(numerator), results.get(denominator)
        label = f"{RUNS[numerator]} / {RUNS[denominator]} >= {wanted}"
        if not (top and bottom):
            print(f"{label:<82}{'n/a':>8}  not measured")
            continue
        verdict = "met" if top / bottom >= wanted else "NOT met"
        print(f"{label:<82}{top / bottom:>8.2f}  {verdict}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=50000)
    parser.add_argument("--words", type=int, default=3, help="words per line")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--bootstrap", default="")
    parser.add_argument("--no-java", action="store_true", help="skip the Java Kafka Streams peer")
    parser.add_argument(
        "--no-python-peers", action="store_true", help="skip the Quix Streams and Faust-streaming peers"
    )
    parser.add_argument(
        "--rows", default="", help=f"comma-separated rows to run (default all): {','.join(RUNS)}"
    )
    parser.add_argument(
        "--faust-lines", type=int, default=10000, help="lines Faust reads (at ~1k lines/s it needs fewer)"
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="run every row N times, interleaved, and keep each row's best"
    )
    parser.add_argument(
        "--before",
        default="",
        help="key=value,...: run each kappaflow row a second time with these settings (the code a change "
        "replaced), interleaved in every round, and print now / before",
    )
    args = parser.parse_args()
    runs = [
        name
        for name in RUNS
        if not (args.no_java and name in JAVA_RUNS)
        and not (args.no_python_peers and name in PYTHON_PEER_RUNS)
        and (not args.rows or name in args.rows.split(","))
    ]
    classpath = ""
    if not args.no_java:
        try:
            classpath = kafka_streams_peer.prepare()
        except kafka_streams_peer.PeerError as err:
            print(f"==> Java Kafka Streams peer unavailable, skipped: {err}", flush=True)
            runs = [name for name in runs if not name.startswith("java_")]
    tune_gc_for_streaming()  # as `kappaflow run` does for the application's process
    with bench_broker(args.bootstrap) as (bootstrap, _broker):
        admin = AdminClient({"bootstrap.servers": bootstrap})
        source = f"bench-in-{uuid.uuid4().hex[:6]}"
        create_topic(admin, source, args.partitions)
        print(f"==> writing {args.lines} lines of {args.words} words to {source}", flush=True)
        fill(bootstrap, source, args.lines, args.words)
        results: dict[str, float | None] = {}
        before = dict(item.split("=", 1) for item in args.before.split(",") if item)
        befores: dict[str, list[float]] = {}
        nows: dict[str, list[float]] = {}
        # Rounds interleave the rows, so a slow spell of the shared machine does not hit one row only; the
        # best of the rounds is each row's number (the raw loop alone swings 2-3x between runs here).
        for round_number in range(1, max(args.repeat, 1) + 1):
            if args.repeat > 1:
                print(f"==> round {round_number} of {args.repeat}", flush=True)
            for name in runs:
                print(f"==> {RUNS[name]} ...", flush=True)
                try:
                    value = run_one(name, args, bootstrap, source, classpath)
                except (kafka_streams_peer.PeerError, python_peers.PeerError) as err:
                    print(f"    failed: {err}", flush=True)
                    continue
                print(f"    {value:,.0f} lines/s{window_note(name)}", flush=True)
                results[name] = max(value, results.get(name) or 0.0)
                if before and name in ("at_least_once", "exactly_once_v2"):
                    nows.setdefault(name, []).append(value)
                    print(f"==> {RUNS[name]} with {args.before} ...", flush=True)
                    guarantee, sink = name, f"bench-out-before-{uuid.uuid4().hex[:6]}"
                    create_topic(AdminClient({"bootstrap.servers": bootstrap}), sink, args.partitions)
                    old = kappaflow_run(bootstrap, source, sink, args.lines, args.words, guarantee, before)
                    print(f"    {old:,.0f} lines/s{window_note(name)}", flush=True)
                    befores.setdefault(name, []).append(old)
        print_table(results)
        for name, values in nows.items():
            old_values = befores[name]
            rounds = " ".join(
                f"{n / 1000:.1f}/{o / 1000:.1f}k" for n, o in zip(values, old_values, strict=True)
            )
            print(
                f"{RUNS[name]}: now / before ({args.before}), paired rounds {rounds}; best now / best before "
                f"{max(values) / max(old_values):.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
