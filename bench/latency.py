"""End-to-end latency at a fixed input rate: kappaflow vs Java Kafka Streams, in the same run.

Not a test: the word count (examples/wordcount.py; bench/peers/LatencyPeer.java is the same topology on
Kafka Streams at the broker's version) serves a steady input at 25%, 50% and 80% of a maximum rate, each
engine in a process of its own with its defaults (only the guarantee is set), and every input record's
latency is measured: from its append to the input topic (the broker's LogAppendTime, read back from the
producer's delivery report) to the moment an output update that reflects it is visible to a consumer
(read_committed under exactly_once_v2: visible means committed). A word's output count c reflects the
first c occurrences of the word in input order, so the first output with count >= i is the i-th
occurrence's answer. With one input partition (the default) that order is exact; with more, occurrences
of a word on different partitions may be counted in another order than appended (a few ms apart at most).

With the defaults both engines cache the counts and emit on commit: at_least_once commits every 30 s, so
its latency is the commit interval; exactly_once_v2 commits every 100 ms. `--tuned` adds rows with the
record cache off and a 100 ms commit interval under at_least_once, the usual latency tuning.

    python bench/latency.py [--max-rate 20000] [--seconds 60] [--fractions 0.25,0.5,0.8]
        [--guarantees at_least_once,exactly_once_v2] [--no-java] [--bootstrap host:port]
        [--before key=value,...]   # also kappaflow with these settings, in the same rounds
        [--cuts]                   # each at_least_once run's commit cuts: where its p99 and max come from

Without --max-rate, kappaflow's at_least_once throughput is measured first (bench/throughput.py's run on
30k lines). The last block checks the target: kappaflow's p99 <= Java's at every rate and guarantee.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.local_broker import bench_broker  # noqa: E402
from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # noqa: E402
from examples.wordcount import split_words  # noqa: E402

from bench import kafka_streams_peer  # noqa: E402

WORDS = [f"w{i}" for i in range(1000)]
LATENCY_PEER = Path(__file__).resolve().parent / "peers" / "LatencyPeer.java"
TUNED = {"statestore.cache.max.bytes": 0, "commit.interval.ms": 100}


# ------------------------------------------------------------------------------------------ pure part
def occurrence_latencies(
    occurrences: dict[str, list[float]], outputs: Iterable[tuple[str, int, float]]
) -> dict[str, list[float | None]]:
    """Per word, each occurrence's latency in ms (None: no output reflected it).

    `occurrences[word]`: the append times (ms) of the word's occurrences, in input order; `outputs`: every
    output update seen, (word, count, seen at ms). The i-th occurrence is answered by the first output
    seen with count >= i+1: an update reflects every occurrence counted before it."""
    answered: dict[str, list[float]] = defaultdict(list)  # per word: seen time of the count-th answer
    for word, count, seen_at in sorted(outputs, key=lambda o: o[2]):
        times = answered[word]
        while len(times) < count:
            times.append(seen_at)
    result: dict[str, list[float | None]] = {}
    for word, appended in occurrences.items():
        times = answered.get(word, [])
        result[word] = [max(0.0, times[i] - at) if i < len(times) else None for i, at in enumerate(appended)]
    return result


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of an ascending list (fraction in (0, 1])."""
    if not sorted_values:
        raise ValueError("no values")
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


@dataclass(frozen=True)
class Row:
    engine: str
    guarantee: str
    rate: int
    measured: int  # occurrences appended inside the window
    unanswered: int  # of those, never reflected in an output
    p50_ms: float
    p99_ms: float
    max_ms: float


def summarize(
    engine: str,
    guarantee: str,
    rate: int,
    occurrences: dict[str, list[float]],
    outputs: Iterable[tuple[str, int, float]],
    window: tuple[float, float],
) -> Row:
    """The row of one run: latencies of the occurrences appended inside `window` (ms, ms)."""
    latencies = occurrence_latencies(occurrences, outputs)
    inside: list[float] = []
    unanswered = 0
    for word, appended in occurrences.items():
        start = bisect_left(appended, window[0])
        for at, latency in zip(appended[start:], latencies[word][start:], strict=True):
            if at > window[1]:
                break
            if latency is None:
                unanswered += 1
            else:
                inside.append(latency)
    inside.sort()
    if not inside:
        return Row(engine, guarantee, rate, unanswered, unanswered, float("nan"), float("nan"), float("nan"))
    return Row(
        engine,
        guarantee,
        rate,
        len(inside) + unanswered,
        unanswered,
        percentile(inside, 0.5),
        percentile(inside, 0.99),
        inside[-1],
    )


@dataclass(frozen=True)
class Cut:
    """One batch of output updates (a commit's emission, under a record cache): `seen_ms` when its first
    update was seen, `spread_ms` until its last; `newest_in_ms` the append time of the newest occurrence
    it reflects; `oldest_out_ms` that of the oldest occurrence it left to a later cut (nan: none)."""

    seen_ms: float
    spread_ms: float
    newest_in_ms: float
    oldest_out_ms: float


def commit_cuts(
    occurrences: dict[str, list[float]], outputs: Iterable[tuple[str, int, float]], gap_ms: float = 1000.0
) -> list[Cut]:
    """The output's updates grouped into cuts (a pause of more than `gap_ms` between two updates starts a
    new one): where each commit cut the input. A cut's `seen_ms - oldest_out_ms` is how long before its
    emission the input it left out began: an occurrence appended then waits a whole commit interval more,
    which is what at_least_once's p99 and maximum measure (pure: unit-tested without a broker)."""
    ordered = sorted(outputs, key=lambda o: o[2])
    groups: list[list[tuple[str, int, float]]] = []
    for output in ordered:
        if not groups or output[2] - groups[-1][-1][2] > gap_ms:
            groups.append([])
        groups[-1].append(output)
    cuts = []
    for group in groups:
        newest_in, oldest_out = -math.inf, math.inf
        for word, count, _seen in group:
            appended = occurrences.get(word, [])
            if 0 < count <= len(appended):
                newest_in = max(newest_in, appended[count - 1])
            if count < len(appended):
                oldest_out = min(oldest_out, appended[count])
        cuts.append(
            Cut(
                group[0][2],
                group[-1][2] - group[0][2],
                newest_in if newest_in > -math.inf else math.nan,
                oldest_out if oldest_out < math.inf else math.nan,
            )
        )
    return cuts


def print_cuts(label: str, cuts: list[Cut], window: tuple[float, float]) -> None:
    """The cuts that fall in or right after the measured window, each with the interval since the one
    before and how far before its emission the newest input it reflects and the oldest it left out were
    appended."""
    print(f"    {label}: commit cuts (ms after the window's start; lags before each cut's first update)")
    print(f"    {'cut at':>9} {'since last':>11} {'spread':>7} {'newest in':>10} {'oldest out':>11}")
    previous = None
    for cut in cuts:
        if window[0] - 60_000 <= cut.seen_ms <= window[1] + 60_000:
            since = f"{cut.seen_ms - previous:,.0f}" if previous is not None else "-"
            print(
                f"    {cut.seen_ms - window[0]:>9,.0f} {since:>11} {cut.spread_ms:>7,.0f} "
                f"{cut.seen_ms - cut.newest_in_ms:>10,.0f} {cut.seen_ms - cut.oldest_out_ms:>11,.0f}"
            )
        previous = cut.seen_ms


# ------------------------------------------------------------------------------------------ the I/O
class PacedInput(threading.Thread):
    """Lines of three words at `rate` lines/s (sent every 10 ms), each occurrence's append time noted from
    its delivery report (the input topic stamps LogAppendTime)."""

    def __init__(self, bootstrap: str, topic: str, rate: int, seed: int) -> None:
        super().__init__(name="paced-input", daemon=True)
        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
        self._topic, self._rate, self._rng = topic, rate, random.Random(seed)
        self.occurrences: dict[str, list[float]] = defaultdict(list)
        self._lock = threading.Lock()
        self.stop = threading.Event()

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            raise RuntimeError(f"input not delivered: {err}")
        _kind, appended = msg.timestamp()
        with self._lock:
            for word in split_words(msg.value().decode()):
                self.occurrences[word].append(float(appended))

    def run(self) -> None:
        started, sent = time.monotonic(), 0
        while not self.stop.is_set():
            due = int((time.monotonic() - started) * self._rate)
            while sent < due:
                line = " ".join(self._rng.choice(WORDS) for _ in range(3))
                self._producer.produce(self._topic, value=line.encode(), on_delivery=self._delivered)
                sent += 1
            self._producer.poll(0)
            time.sleep(0.01)
        self._producer.flush(60)

    def snapshot(self) -> dict[str, list[float]]:
        with self._lock:
            return {word: sorted(times) for word, times in self.occurrences.items()}


class OutputWatch(threading.Thread):
    """Every output update (word, count, seen at ms), read as a user of the output would see it."""

    def __init__(self, bootstrap: str, topic: str, guarantee: str) -> None:
        super().__init__(name="output-watch", daemon=True)
        isolation = "read_committed" if guarantee == "exactly_once_v2" else "read_uncommitted"
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"latency-watch-{uuid.uuid4().hex[:6]}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "isolation.level": isolation,
                "fetch.wait.max.ms": 5,
            }
        )
        self._consumer.subscribe([topic])
        self.outputs: list[tuple[str, int, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                for msg in self._consumer.consume(1000, 0.05):
                    key, value = msg.key(), msg.value()
                    if msg.error() is None and key is not None and value is not None:
                        seen = time.time() * 1000.0
                        count = int.from_bytes(value, "big", signed=True)
                        self.outputs.append((key.decode(), count, seen))
        finally:
            self._consumer.close()


class Engine:
    """One engine's process serving the word count from `source` to `sink`."""

    def __init__(self, cmd: list[str], env: dict[str, str], log: Path, stdin: int | None = None) -> None:
        self._log: IO[bytes] = log.open("wb")
        self.process = subprocess.Popen(cmd, env=env, stdin=stdin, stdout=subprocess.PIPE, stderr=self._log)

    def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        else:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self._log.close()


def start_kappaflow(
    bootstrap: str, source: str, sink: str, guarantee: str, extra: dict[str, Any], workdir: Path
) -> Engine:
    props = {
        "application.id": f"latency-kf-{uuid.uuid4().hex[:6]}",
        "bootstrap.servers": bootstrap,
        "state.dir": str(workdir / "state"),
        "processing.guarantee": guarantee,
        "metrics.port": 0,
        **extra,
    }
    config = workdir / "app.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    env = {**os.environ, "WORDCOUNT_INPUT": source, "WORDCOUNT_OUTPUT": sink}
    kappaflow = str(Path(sys.executable).with_name("kappaflow"))
    cmd = [
        kappaflow,
        "run",
        "examples.wordcount:build_topology",
        "--config",
        str(config),
        "--log-format",
        "json",
    ]
    return Engine(cmd, env, workdir / "kappaflow.log")


def start_java(
    classpath: str,
    bootstrap: str,
    source: str,
    sink: str,
    guarantee: str,
    extra: dict[str, Any],
    workdir: Path,
) -> Engine:
    if extra:
        raise ValueError("the Java peer runs with Kafka Streams' defaults only")
    java = shutil.which("java")
    if java is None:
        raise kafka_streams_peer.PeerError("java (17+) is required to run the Kafka Streams peer")
    cmd = [
        java,
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        "-cp",
        classpath,
        "LatencyPeer",
        bootstrap,
        f"latency-java-{uuid.uuid4().hex[:6]}",
        source,
        sink,
        str(workdir / "state"),
        guarantee,
    ]
    return Engine(cmd, dict(os.environ), workdir / "java.log", stdin=subprocess.PIPE)


def create_topics(bootstrap: str, source: str, sink: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [
        NewTopic(
            source,
            num_partitions=partitions,
            replication_factor=1,
            config={"message.timestamp.type": "LogAppendTime"},
        ),
        NewTopic(sink, num_partitions=partitions, replication_factor=1),
    ]
    for future in admin.create_topics(topics).values():
        future.result(30)


def measure(
    engine_name: str,
    bootstrap: str,
    guarantee: str,
    rate: int,
    args: argparse.Namespace,
    classpath: str,
    extra: dict[str, Any],
) -> Row:
    """One engine at one rate: start it, warm it up at the rate, measure a window, drain, summarize."""
    run_id = uuid.uuid4().hex[:6]
    source, sink = f"latency-in-{run_id}", f"latency-out-{run_id}"
    create_topics(bootstrap, source, sink, args.partitions)
    workdir = Path(tempfile.mkdtemp(prefix=f"latency-{engine_name}-"))
    if engine_name == "java":
        engine = start_java(classpath, bootstrap, source, sink, guarantee, extra, workdir)
    else:
        engine = start_kappaflow(bootstrap, source, sink, guarantee, extra, workdir)
    watch = OutputWatch(bootstrap, sink, guarantee)
    feed = PacedInput(bootstrap, source, rate, seed=7)
    try:
        watch.start()
        feed.start()
        # warm-up: until the first output is visible (the engine has joined and restored), then --warmup s
        deadline = time.monotonic() + 120
        while not watch.outputs:
            if time.monotonic() > deadline or engine.process.poll() is not None:
                raise RuntimeError(f"{engine_name}: no output within 120 s (log: {workdir})")
            time.sleep(0.1)
        time.sleep(args.warmup)
        window = (time.time() * 1000.0, time.time() * 1000.0 + args.seconds * 1000.0)
        time.sleep(args.seconds)
        feed.stop.set()
        feed.join(90)
        # drain: until every occurrence of the window is answered, or a commit interval and then some
        occurrences = feed.snapshot()
        drain_until = time.monotonic() + args.drain
        while time.monotonic() < drain_until:
            row = summarize(engine_name, guarantee, rate, occurrences, list(watch.outputs), window)
            if row.unanswered == 0:
                break
            time.sleep(0.5)
    finally:
        feed.stop.set()
        watch.stop.set()
        engine.stop()
        watch.join(30)
    row = summarize(engine_name, guarantee, rate, feed.snapshot(), list(watch.outputs), window)
    if args.cuts and guarantee == "at_least_once":  # exactly_once_v2's 100 ms commits run together
        cuts = commit_cuts(feed.snapshot(), watch.outputs)
        print_cuts(f"{engine_name} {guarantee} at {rate}/s", cuts, window)
    shutil.rmtree(workdir, ignore_errors=True)
    return row


def max_rate_of_kappaflow(bootstrap: str) -> int:
    """kappaflow's at_least_once lines/s on this machine (bench/throughput.py's run, 30k lines)."""
    from bench.throughput import create_topic, fill, kappaflow_run

    admin = AdminClient({"bootstrap.servers": bootstrap})
    source, sink = f"latency-max-in-{uuid.uuid4().hex[:6]}", f"latency-max-out-{uuid.uuid4().hex[:6]}"
    create_topic(admin, source, 4)
    create_topic(admin, sink, 4)
    fill(bootstrap, source, 30000, 3)
    return int(kappaflow_run(bootstrap, source, sink, 30000, 3, "at_least_once"))


def parse_settings(text: str) -> dict[str, Any]:
    """`key=value,...` (--before) into kappaflow settings."""
    settings: dict[str, Any] = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--before wants key=value pairs, got {item!r}")
        settings[key.strip()] = value.strip()
    return settings


def print_rows(rows: list[Row], max_rate: int) -> bool:
    """The table, then the target per (guarantee, rate): kappaflow's p99 <= Java's. True when all met."""
    print(
        f"\n{'engine':<22}{'guarantee':<18}{'rate':>16}{'records':>9}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}"
    )
    for r in rows:
        share = f"{r.rate} ({100 * r.rate / max_rate:.0f}%)"
        lost = f" ({r.unanswered} unanswered)" if r.unanswered else ""
        print(
            f"{r.engine:<22}{r.guarantee:<18}{share:>16}{r.measured:>9}{r.p50_ms:>9.0f}{r.p99_ms:>9.0f}"
            f"{r.max_ms:>9.0f}{lost}"
        )
    print(f"\n{'target: kappaflow p99 <= Java p99':<60}{'ratio':>8}  verdict")
    by_key = {(r.engine, r.guarantee, r.rate): r for r in rows}
    all_met = True
    for (engine, guarantee, rate), row in by_key.items():
        if engine != "kappaflow":
            continue
        java = by_key.get(("java", guarantee, rate))
        label = f"{guarantee} at {rate} lines/s"
        if java is None or java.p99_ms != java.p99_ms or row.p99_ms != row.p99_ms:
            print(f"{label:<60}{'n/a':>8}  not measured")
            continue
        ratio = row.p99_ms / java.p99_ms if java.p99_ms else float("inf")
        met = row.p99_ms <= java.p99_ms and row.unanswered == 0
        all_met &= met
        print(f"{label:<60}{ratio:>8.2f}  {'met' if met else 'NOT met'}")
    return all_met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-rate", type=int, default=0, help="lines/s; default: measured first")
    parser.add_argument("--fractions", default="0.25,0.5,0.8", help="of the maximum rate")
    parser.add_argument("--guarantees", default="at_least_once,exactly_once_v2")
    parser.add_argument("--seconds", type=float, default=60.0, help="measured window per run")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds at the rate before the window")
    parser.add_argument("--drain", type=float, default=45.0, help="max seconds to wait for the last answers")
    parser.add_argument("--partitions", type=int, default=1, help="input partitions (1: exact attribution)")
    parser.add_argument("--tuned", action="store_true", help="also kappaflow with no cache, 100 ms commits")
    parser.add_argument(
        "--before",
        default="",
        help="key=value,...: also a kappaflow row with these settings (what a change replaced), run right "
        "after the others at each rate",
    )
    parser.add_argument(
        "--cuts", action="store_true", help="print each at_least_once run's commit cuts (its p99's source)"
    )
    parser.add_argument("--no-java", action="store_true")
    parser.add_argument("--bootstrap", default="")
    args = parser.parse_args()
    classpath = ""
    if not args.no_java:
        classpath = kafka_streams_peer.prepare(LATENCY_PEER)
    before = parse_settings(args.before)
    rows: list[Row] = []
    with bench_broker(args.bootstrap) as (bootstrap, _broker):
        max_rate = args.max_rate or max_rate_of_kappaflow(bootstrap)
        print(f"==> maximum rate: {max_rate} lines/s", flush=True)
        for guarantee in args.guarantees.split(","):
            for fraction in (float(f) for f in args.fractions.split(",")):
                rate = max(1, int(max_rate * fraction))
                engines: list[tuple[str, dict[str, Any]]] = [("kappaflow", {})]
                if not args.no_java:
                    engines.append(("java", {}))
                if args.tuned and guarantee == "at_least_once":
                    engines.append(("kappaflow (tuned)", TUNED))
                if before:
                    engines.append(("kappaflow (before)", before))
                for name, extra in engines:
                    print(f"==> {name} {guarantee} at {rate} lines/s ...", flush=True)
                    engine = "java" if name == "java" else "kappaflow"
                    row = measure(engine, bootstrap, guarantee, rate, args, classpath, extra)
                    rows.append(dataclasses.replace(row, engine=name))
                    print(
                        f"    p50 {row.p50_ms:.0f} ms, p99 {row.p99_ms:.0f} ms, max {row.max_ms:.0f} ms "
                        f"over {row.measured} records",
                        flush=True,
                    )
    return 0 if print_rows(rows, max_rate) else 1


if __name__ == "__main__":
    sys.exit(main())
