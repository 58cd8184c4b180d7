"""State restoration on one local broker: kappaflow restoring a store vs a raw loop and Java Kafka Streams.

Not a test: it prints changelog records/s of every run and ratios, measured in the same run on the same
broker and changelog, so machine speed cancels out. The changelog is N records (distinct keys, values of
--value-bytes) in the P-partition topic ``<app id>-store-changelog``, written once; every run restores it
into an empty state directory. The rows:

- raw consume-into-rocksdict loop: confluent-kafka assigned to every partition, each consumed batch put
  into a rocksdict WriteBatch and written; the ceiling for a Python loop over the records, with the fetch
  settings kappaflow's restore consumer has (``clients/kafka.py``), so the row is at its best.
- kappaflow at_least_once / exactly_once_v2: ``KafkaStreams`` on a table materialized as the persistent
  (timestamped) store "store", started on an empty state directory: what a user waits for on a restart
  that lost its disk. Under exactly_once_v2 the restore consumer reads read_committed up to the high
  watermark and the store is transactional.
- Java Kafka Streams: the same table on Apache Kafka Streams at the broker's version
  (bench/peers/RestorePeer.java, run as a JVM with the jars bench/kafka_streams_peer.py fetches once),
  defaults otherwise.

"records/s" counts the records restored after the first batch, from that batch to the last one, so no
row's rate includes start-up, the group join or the first fetch (kappaflow's batches are seen through its
``restored-records-total`` counter, polled every 2 ms; Java's through a ``StateRestoreListener``). What a
user waits for is printed beside it: seconds from ``start()`` to the state RUNNING (a state listener on
both sides; the JVM's and the interpreter's own start-up excluded). The targets (issue 31): kappaflow's
rate >= 1.0x Java's, its start to RUNNING <= Java's. For kappaflow the run's fastest start is then broken
down by step (bench/restore_phases.py: topics, clients and producer, group join, task opens with RocksDB
and the changelog lookups, the restore steps, each task's end).

    python bench/restore.py [--records 1000000] [--partitions 4] [--value-bytes 100] [--repeat 3]
        [--rows raw,at_least_once,exactly_once_v2,java] [--bootstrap host:port] [--profile FILE]
        [--before key=value,...] [--crash [--feed-rate 20000] [--kill-after 3]]

``--repeat N`` runs every row N times, interleaved, and reports each row's best and median. ``--before``
runs every kappaflow row a second time in each round with these settings over the defaults (the
defaults a change replaced), and prints now / before. ``--profile`` runs kappaflow's restore steps
under cProfile (slower; the rate printed is then not comparable) and prints the top functions.
``--crash`` runs the recovery-after-kill-9 bench instead (bench/restore_crash.py). Without --bootstrap
it starts the project's broker on a free port, as bench/throughput.py does, and first has it create its
transaction and offset topics, so no row pays for them.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import rocksdict  # noqa: E402
from bench.local_broker import bench_broker  # noqa: E402
from bench.restore_phases import Timeline, print_timeline, recorded  # noqa: E402
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # noqa: E402

from bench import kafka_streams_peer  # noqa: E402
from kappaflow import Materialized, StreamsBuilder, serdes  # noqa: E402
from kappaflow.clients.kafka import RESTORE_FETCH_TUNING  # noqa: E402
from kappaflow.runner import KafkaStreams, State, tune_gc_for_streaming  # noqa: E402
from kappaflow.runner.changelog_reader import ChangelogReader  # noqa: E402

STORE = "store"
RESTORE_PEER_SOURCE = Path(__file__).resolve().parent / "peers" / "RestorePeer.java"
RUNS = {
    "raw": "raw consume-into-rocksdict loop",
    "at_least_once": "kappaflow at_least_once",
    "exactly_once_v2": "kappaflow exactly_once_v2",
    "java": "Java Kafka Streams 4.3.1",
}
GUARANTEES = ("at_least_once", "exactly_once_v2")
BEFORE = ":before"  # a kappaflow row run with --before's settings, to compare a change in the same run
# (numerator, denominator, the ratio the issue asks for, or None: printed only)
TARGETS = (
    ("at_least_once", "java", 1.0),
    ("exactly_once_v2", "java", 1.0),
    ("at_least_once", "raw", None),
    ("exactly_once_v2", "raw", None),
)


@dataclass(frozen=True)
class Run:
    """One restore: records/s after the first batch, and seconds from start() to RUNNING (0: the row
    has no such moment, the raw loop)."""

    rate: float
    to_running: float


def fill(bootstrap: str, topic: str, records: int, value_bytes: int) -> None:
    """The changelog: distinct keys, fixed-size values, written once and read by every run."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.size": 1 << 20,
            "queue.buffering.max.kbytes": 1 << 20,
        }
    )
    pad = b"v" * value_bytes
    for i in range(records):
        key = b"key-%010d" % i
        while True:
            try:
                producer.produce(topic, key=key, value=(key + pad)[:value_bytes])
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError(f"could not write the changelog {topic}")


def warm_up(bootstrap: str) -> None:
    """Have the broker create its transaction and group-offset topics before any row is timed: the first
    transactional producer and the first group otherwise wait for them, and whichever row ran first would
    pay that (a new broker's one-off, not a restart's cost)."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"warm-up-{uuid.uuid4().hex}"})
    producer.init_transactions(60)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"warm-up-{uuid.uuid4().hex}"})
    deadline = time.monotonic() + 60
    while True:
        try:
            consumer.committed([TopicPartition("__consumer_offsets", 0)], timeout=10)
            break
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    consumer.close()


def raw_loop(bootstrap: str, topic: str, partitions: int, records: int) -> Run:
    """Assign every partition from the start; each consumed batch goes to RocksDB in one WriteBatch."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"restore-raw-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            **RESTORE_FETCH_TUNING,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    path = tempfile.mkdtemp(prefix="restore-raw-")
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    db = rocksdict.Rdict(path, options)
    seen = first = 0
    started = finished = 0.0
    try:
        while seen < records:
            messages = consumer.consume(10000, 0.5)
            batch = rocksdict.WriteBatch(raw_mode=True)
            for msg in messages:
                if msg.error() is not None:
                    continue
                value = msg.value()
                if value is None:
                    batch.delete(msg.key() or b"")
                else:
                    batch.put(msg.key() or b"", value)
                seen += 1
            if batch.len():
                db.write(batch)
                finished = time.perf_counter()
                if not started:
                    started, first = finished, seen
    finally:
        consumer.close()
        db.close()
        shutil.rmtree(path, ignore_errors=True)
    return Run((seen - first) / (finished - started), 0.0)


def table_topology(source: str) -> Any:
    builder = StreamsBuilder()
    builder.table(
        source, key_serde=serdes.Bytes(), value_serde=serdes.Bytes(), materialized=Materialized.as_(STORE)
    )
    return builder.build()


def kappaflow_run(
    bootstrap: str,
    app_id: str,
    source: str,
    records: int,
    guarantee: str,
    timeline: Timeline | None = None,
    extra: dict[str, Any] | None = None,
) -> Run:
    """Start on an empty state directory; time the restore on the `restored-records-total` counter and
    start() to RUNNING by a state listener. `timeline`: record where the start-up went (restore_phases).
    `extra`: settings over the defaults (the `--before` rows)."""
    state_dir = tempfile.mkdtemp(prefix="kappaflow-restore-")
    config: dict[str, Any] = {
        "application.id": app_id,
        "bootstrap.servers": bootstrap,
        "state.dir": state_dir,
        "processing.guarantee": guarantee,
        "metrics.port": -1,
        **(extra or {}),
    }
    app = KafkaStreams(table_topology(source), config)
    running = threading.Event()
    app.set_state_listener(lambda new, _old: running.set() if new is State.RUNNING else None)
    with recorded(timeline if timeline is not None else Timeline()) as clock:
        clock.started = launched = time.perf_counter()
        app.start()
        try:
            first = done = 0.0
            started = finished = 0.0
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline and not running.is_set():
                try:
                    done = app.metrics.counter("restored-records-total")
                except RuntimeError:  # the stream thread added a series while we summed: read again
                    continue
                now = time.perf_counter()
                if done and not started:
                    started, first = now, done
                if done >= records and not finished:
                    finished = now
                if app.state is State.ERROR:
                    raise RuntimeError(f"kappaflow failed: {app.error}")
                time.sleep(0.002)
            if not running.is_set():
                raise RuntimeError(f"kappaflow restored {done:.0f} of {records} records in 600 s")
            clock.running = time.perf_counter() - launched
            done = app.metrics.counter("restored-records-total")
            finished = finished or time.perf_counter()
            clock.first_record, clock.last_record = started - launched, finished - launched
            if done != records:
                raise RuntimeError(f"kappaflow restored {done:.0f} records, the changelog has {records}")
        finally:
            app.close(60)
            shutil.rmtree(state_dir, ignore_errors=True)
    return Run((done - first) / (finished - started), clock.running)


def java_run(classpath: str, bootstrap: str, app_id: str, source: str, records: int) -> Run:
    """RestorePeer in its own JVM on an empty state directory; it times itself (see its docstring)."""
    java = shutil.which("java")
    if java is None:
        raise kafka_streams_peer.PeerError("java (17+) is required to run the Kafka Streams peer")
    state_dir = tempfile.mkdtemp(prefix="kstreams-restore-")
    cmd = [
        java,
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        "-cp",
        classpath,
        RESTORE_PEER_SOURCE.stem,
        *(bootstrap, app_id, source, state_dir, str(records)),
    ]
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=420)
    except subprocess.TimeoutExpired as err:
        raise kafka_streams_peer.PeerError("the Java restore peer did not finish in 420 s") from err
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
    values = dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)
    if "RECORDS_PER_SECOND" not in values:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
        raise kafka_streams_peer.PeerError(f"the Java restore peer exited {result.returncode}:\n{tail}")
    if int(values["RESTORED"]) != records:
        raise kafka_streams_peer.PeerError(f"Java restored {values['RESTORED']} of {records} records")
    return Run(float(values["RECORDS_PER_SECOND"]), float(values["START_TO_RUNNING_S"]))


@contextmanager
def profiled_restore_steps(output: str) -> Iterator[None]:
    """cProfile around every `ChangelogReader.step` (the restore path, consume included) of the run."""
    profile = cProfile.Profile()
    original: Callable[..., Any] = ChangelogReader.step

    def step(self: ChangelogReader, *args: Any, **kwargs: Any) -> Any:
        profile.enable()
        try:
            return original(self, *args, **kwargs)
        finally:
            profile.disable()

    ChangelogReader.step = step  # type: ignore[method-assign]
    try:
        yield
    finally:
        ChangelogReader.step = original  # type: ignore[method-assign]
        profile.dump_stats(output)
        pstats.Stats(output).sort_stats("tottime").print_stats(25)


def print_table(results: dict[str, list[Run]]) -> None:
    """Best and median of every row (rate: highest; start to RUNNING: lowest), then the issue's targets:
    kappaflow's rate >= 1.0x Java's and its start to RUNNING <= Java's."""
    rates = {name: [r.rate for r in runs] for name, runs in results.items() if runs}
    ready = {name: [r.to_running for r in runs] for name, runs in results.items() if runs}
    best = {name: max(values) for name, values in rates.items()}
    median = {name: statistics.median(values) for name, values in rates.items()}
    fastest = {name: min(values) for name, values in ready.items()}
    typical = {name: statistics.median(values) for name, values in ready.items()}
    raw = best.get("raw")
    print(
        f"\n{'run':<36}{'best rec/s':>12}{'median':>12}{'start->RUNNING s':>18}{'median':>8}{'runs':>6}"
        f"{'best / raw':>12}"
    )
    for name in results:
        label = row_label(name)
        if name not in best:
            print(f"{label:<36}{'n/a':>12}{'n/a':>12}{'n/a':>18}{'n/a':>8}{0:>6}{'n/a':>12}")
            continue
        over_raw = f"{best[name] / raw:.2f}" if raw else "n/a"
        to_running = f"{'-':>18}{'-':>8}"
        if name != "raw":
            to_running = f"{fastest[name]:>18.2f}{typical[name]:>8.2f}"
        print(
            f"{label:<36}{best[name]:>12,.0f}{median[name]:>12,.0f}{to_running}{len(rates[name]):>6}{over_raw:>12}"
        )
    print(f"\n{'ratio (best / best, median / median)':<76}{'best':>7}{'median':>8}  target")
    for numerator, denominator, wanted in TARGETS:
        label = f"{RUNS[numerator]} / {RUNS[denominator]} records/s"
        if numerator not in best or denominator not in best:
            print(f"{label:<76}{'n/a':>7}{'n/a':>8}  not measured")
            continue
        ratio = best[numerator] / best[denominator]
        verdict = "" if wanted is None else f">= {wanted}: {'met' if ratio >= wanted else 'NOT met'}"
        print(f"{label:<76}{ratio:>7.2f}{median[numerator] / median[denominator]:>8.2f}  {verdict}")
    for name in ("at_least_once", "exactly_once_v2"):
        label = f"{RUNS[name]} / {RUNS['java']} start->RUNNING s"
        if name not in fastest or "java" not in fastest:
            continue
        slower = fastest[name] / fastest["java"]
        verdict = f"<= 1.0: {'met' if slower <= 1.0 else 'NOT met'}"
        print(f"{label:<76}{slower:>7.2f}{typical[name] / typical['java']:>8.2f}  {verdict}")
    for name in ("at_least_once", "exactly_once_v2"):
        before = f"{name}{BEFORE}"
        if name in best and before in best:
            label = f"{RUNS[name]}: now / before, records/s and start->RUNNING s (paired rounds)"
            print(f"{label:<76}{best[name] / best[before]:>7.2f}{fastest[name] / fastest[before]:>8.2f}")


def restore_round(
    args: argparse.Namespace, bootstrap: str, app_id: str, classpath: str, name: str, round_number: int
) -> tuple[Run, Timeline | None]:
    """One row's run; kappaflow's with its start-up timeline."""
    source, changelog = f"{app_id}-source", f"{app_id}-{STORE}-changelog"
    if name == "raw":
        return raw_loop(bootstrap, changelog, args.partitions, args.records), None
    if name == "java":
        return java_run(classpath, bootstrap, app_id, source, args.records), None
    timeline = Timeline()
    guarantee, before, _ = name.partition(BEFORE)
    extra = parse_settings(args.before) if before else None
    if args.profile and round_number == 1:
        with profiled_restore_steps(f"{args.profile}.{name}"):
            run = kappaflow_run(bootstrap, app_id, source, args.records, guarantee, timeline, extra)
            return run, timeline
    return kappaflow_run(bootstrap, app_id, source, args.records, guarantee, timeline, extra), timeline


def parse_settings(text: str) -> dict[str, Any]:
    """`key=value,key=value` as kappaflow settings (integers as such)."""
    settings: dict[str, Any] = {}
    for pair in filter(None, text.split(",")):
        key, _, value = pair.partition("=")
        settings[key.strip()] = int(value) if value.strip().lstrip("-").isdigit() else value.strip()
    return settings


def row_label(name: str) -> str:
    base, before, _ = name.partition(BEFORE)
    return f"{RUNS[base]} (before)" if before else RUNS[base]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--bootstrap", default="")
    parser.add_argument("--rows", default=",".join(RUNS), help=f"comma-separated rows: {','.join(RUNS)}")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of every row, interleaved")
    parser.add_argument("--profile", default="", help="cProfile kappaflow's restore steps into this file")
    parser.add_argument(
        "--before",
        default="",
        help="key=value,...: also run every kappaflow row with these settings (the defaults before a change)",
    )
    parser.add_argument("--crash", action="store_true", help="the crash bench instead (restore_crash.py)")
    parser.add_argument("--feed-rate", type=float, default=20000, help="--crash: updates/s while running")
    parser.add_argument("--kill-after", type=float, default=3.0, help="--crash: seconds, then kill -9")
    args = parser.parse_args()
    runs = [name for name in RUNS if name in args.rows.split(",")]
    if args.before:  # each kappaflow row twice, interleaved: with today's defaults and with the old ones
        runs = [
            row for name in runs for row in ((name, f"{name}{BEFORE}") if name in GUARANTEES else (name,))
        ]
    classpath = ""
    if "java" in runs or args.crash:
        try:
            classpath = kafka_streams_peer.prepare(RESTORE_PEER_SOURCE)
        except kafka_streams_peer.PeerError as err:
            print(f"==> Java Kafka Streams peer unavailable, skipped: {err}", flush=True)
            if "java" in runs:
                runs.remove("java")
    tune_gc_for_streaming()  # the collector `kappaflow run` sets (runner/gc_tuning.py)
    with bench_broker(args.bootstrap) as (bootstrap, _broker):
        warm_up(bootstrap)
        if args.crash:
            from bench import restore_crash  # imports this module: loaded only when asked for

            return restore_crash.main(args, bootstrap, classpath)
        app_id = f"restore-bench-{uuid.uuid4().hex[:6]}"
        create_topics(bootstrap, app_id, args.partitions)
        changelog = f"{app_id}-{STORE}-changelog"
        print(
            f"==> writing {args.records:,} records to {changelog} ({args.partitions} partitions)", flush=True
        )
        fill(bootstrap, changelog, args.records, args.value_bytes)
        results: dict[str, list[Run]] = {name: [] for name in runs}
        timelines: dict[str, list[tuple[Run, Timeline]]] = {}
        for round_number in range(1, max(args.repeat, 1) + 1):
            print(f"==> round {round_number} of {args.repeat}", flush=True)
            for name in runs:
                print(f"==> {row_label(name)} ...", flush=True)
                try:
                    run, timeline = restore_round(args, bootstrap, app_id, classpath, name, round_number)
                except kafka_streams_peer.PeerError as err:
                    print(f"    failed: {err}", flush=True)
                    continue
                to_running = f", {run.to_running:.2f} s start -> RUNNING" if name != "raw" else ""
                if args.profile and round_number == 1 and timeline is not None:
                    print(f"    {run.rate:,.0f} records/s under cProfile (not counted)", flush=True)
                    continue
                print(f"    {run.rate:,.0f} records/s{to_running}", flush=True)
                results[name].append(run)
                if timeline is not None:
                    timelines.setdefault(name, []).append((run, timeline))
        print_table(results)
        for name, measured in timelines.items():
            run, timeline = min(measured, key=lambda pair: pair[0].to_running)
            print_timeline(f"{row_label(name)}, its fastest start ({run.to_running:.2f} s)", timeline)
    return 0


def create_topics(bootstrap: str, app_id: str, partitions: int) -> None:
    """The app's source topic and its store's (compacted) changelog."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [
        NewTopic(f"{app_id}-source", num_partitions=partitions, replication_factor=1),
        NewTopic(
            f"{app_id}-{STORE}-changelog",
            num_partitions=partitions,
            replication_factor=1,
            config={"cleanup.policy": "compact"},
        ),
    ]
    for future in admin.create_topics(topics).values():
        future.result(30)


if __name__ == "__main__":
    sys.exit(main())
