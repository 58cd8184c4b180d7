"""Cost that grows linearly: throughput and resident memory over partitions x distinct keys.

Not a test: it prints a table of throughput and peak resident memory of one kappaflow process for every
(input partitions, distinct keys) cell, by default 4 / 16 / 64 partitions x 1k / 1M / 10M keys, and the
issue's two verdicts per cell (met / NOT met):

- **throughput within 20%**: each cell's records/s >= 0.8x the best cell's. A per-record cost that grew
  with partitions (per-task work per record, per-partition bookkeeping) or with keys (state lookups that
  stop being cache hits, compactions) shows as a slow cell.
- **memory bounded by the configured caches**: each cell's peak RSS <= the bound
  `idle baseline + record cache (statestore.cache.max.bytes) + RocksDB (block cache, the write buffers
  charged into it) + the consumer's prefetch + slack`. The idle
  baseline is measured, not guessed: the same topology on the same number of empty partitions, RUNNING
  with every task and store open, in a process of its own. The consumer's prefetch is in the bound because it
  is a configured buffer too: queued.min.messages records plus one fetch response (kappaflow caps it,
  clients/kafka.py CONSUMER_MEMORY_BOUNDS), at librdkafka's ~350 bytes a message (`prefetch_bound`).
  The slack (--slack-mib, 32 MiB) is for what no setting bounds but nothing here should grow past:
  allocator fragmentation, librdkafka's per-message overhead on top of the payload it counts. A
  structure that kept something per key, per record or per partition beyond these caches breaks it.

Workload (each cell on fresh topics, application id and state directory): a topic of P partitions holds
`max(--records, keys)` records whose value names a key (`key_name(i mod keys)`: scattered, hardly
compressible hex), so every key is touched and, past the caches, every lookup misses them; kappaflow
re-keys each record by its value (`group_by`, so through a repartition topic of P partitions) and counts
per key into a changelogged RocksDB store (the default `Materialized`: cached, logged), the counts going
to an output topic. State at 1M keys (~40 MiB) is larger than the record cache and than RocksDB's cache;
at 10M, many times both. RocksDB is bounded with `BoundedMemoryConfigSetter` (one block cache for every
store of the process, memtables charged into it), at_least_once, every other setting at its default.

The kappaflow process is a child of this one (`--child`); this process samples the child's VmRSS and the
kernel's high-water mark (VmHWM) every 100 ms from /proc; the peak printed is the high-water mark, which
sampling can only under-read. records/s counts input records from the first record processed to the
last one counted (both sub-topologies process each record once, so 2x as many processed records). Each
row also prints, over that window, the kappaflow process's CPU per record (every thread) and the broker's
(when the bench started it): on two shared cores, what the broker spends appending and serving the
cell's records is time the application does not get.

Java Kafka Streams runs every cell too (bench/peers/ScalingPeer.java, the same topology, record cache and
RocksDB budget, at the broker's version), on the same input right after kappaflow, so the table shows
which of kappaflow's slow cells the real thing shares. Its records/s is timed the same way; its peak RSS
is printed without a verdict: the JVM's heap is not one of the configured caches. `--no-java` leaves it
out (no JDK needed then).

    python bench/scaling_cost.py [--partitions 4,16,64] [--keys 1000,1000000,10000000]
        [--records 1000000] [--cache-mib 10] [--rocksdb-mib 32] [--write-buffer-mib 16]
        [--slack-mib 32] [--repeat 1] [--full-filters] [--no-java] [--bootstrap host:port]

A short run: `--keys 1000,100000,1000000` (~15 min on the 2-core build box). The full table processes
10M records in each of the three 10M-key cells, ~40 min more (README "Performance").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.local_broker import bench_broker  # noqa: E402
from bench.throughput import create_topic, wait_processed  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from bench import kafka_streams_peer, process_cpu  # noqa: E402

MIB = 1 << 20
THROUGHPUT_WITHIN = 0.8  # each cell >= 0.8x the best cell: "within 20%"
IDLE_SETTLE_S = 5.0
# What librdkafka holds per prefetched message beyond its payload (~346 B measured: 1M prefetched 16-byte
# records took 330 MiB), and the bytes one of this bench's records takes in a fetch response.
LIBRDKAFKA_MESSAGE_BYTES = 384
WIRE_RECORD_BYTES = 24
RDKAFKA_QUEUED_MIN_MESSAGES = 100_000  # librdkafka's default, which kappaflow keeps
# --set KEY=VALUE: application settings over the bench's, for before/after runs of one setting.
OVERRIDES: dict[str, str] = {}
# --full-filters: the bounded setter without partitioned index and filters (the "before" of that change).
TABLE = {"partitioned_index_filters": True}
SCALING_PEER = Path(__file__).resolve().parent / "peers" / "ScalingPeer.java"
JAVA_RESULT_PREFIX = "RECORDS_PER_SECOND "


@dataclass(frozen=True)
class Limits:
    """The configured caches a cell runs with, in bytes: what its memory must stay within."""

    record_cache: int
    rocksdb: int
    write_buffers: int
    prefetch: int
    slack: int

    def bound(self, baseline: int) -> int:
        """Peak RSS allowed over an idle process with `baseline` RSS. The write buffers are charged into
        the RocksDB cache by its write buffer manager, so they are inside `rocksdb`, not added to it."""
        return baseline + self.record_cache + self.rocksdb + self.prefetch + self.slack


@dataclass
class Cell:
    """One (partitions, keys) cell: best throughput and worst peak over the rounds."""

    partitions: int
    keys: int
    records: int
    records_per_s: float = 0.0
    peak: int = 0
    final_rss: int = 0
    disk: int = 0
    rounds: list[float] = field(default_factory=list)
    java_per_s: float = 0.0  # Java Kafka Streams on the same input: best rate, worst peak
    java_peak: int = 0
    # the kappaflow process's CPU (every thread, librdkafka's included) per record over the timed window,
    # least over the rounds: steadier than records/s on 2 cores that the broker shares
    cpu_us: float = 0.0
    # the broker's CPU per record over the same window (0 with --bootstrap: not a process of this bench):
    # on 2 shared cores what it spends appending and serving the cell's records is the app's lost time
    broker_cpu_us: float = 0.0


def prefetch_bound() -> int:
    """The stream consumer's prefetch at most: queued.min.messages records, then one more fetch response
    of fetch.max.bytes (kappaflow's CONSUMER_MEMORY_BOUNDS), each record at librdkafka's cost."""
    from kappaflow.clients.kafka import CONSUMER_MEMORY_BOUNDS

    records = RDKAFKA_QUEUED_MIN_MESSAGES + CONSUMER_MEMORY_BOUNDS["fetch.max.bytes"] // WIRE_RECORD_BYTES
    return int(records * LIBRDKAFKA_MESSAGE_BYTES)


def topology(source: str, sink: str) -> Any:
    """value -> key through a repartition topic, counted per key in a changelogged RocksDB store."""
    from kappaflow import Materialized, StreamsBuilder, serdes

    builder = StreamsBuilder()
    records = builder.stream(source, key_serde=serdes.String(), value_serde=serdes.String())
    grouped = records.group_by(
        lambda _key, value: value, key_serde=serdes.String(), value_serde=serdes.String()
    )
    counts = grouped.count(Materialized.as_("counts").with_value_serde(serdes.Long()))
    counts.to_stream().to(sink, key_serde=serdes.String(), value_serde=serdes.Long())
    return builder.build()


def app_config(
    bootstrap: str,
    app_id: str,
    state_dir: str,
    limits: Limits,
    overrides: dict[str, str],
    partitioned_index_filters: bool = True,
) -> dict[str, Any]:
    from kappaflow.state.rocksdb_config import BoundedMemoryConfigSetter

    return {
        "application.id": app_id,
        "bootstrap.servers": bootstrap,
        "state.dir": state_dir,
        "metrics.port": -1,
        "statestore.cache.max.bytes": limits.record_cache,
        "rocksdb.config.setter": BoundedMemoryConfigSetter(
            limits.rocksdb, limits.write_buffers, partitioned_index_filters
        ),
        **overrides,
    }


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """The kappaflow process of one cell (or of the idle baseline when spec["records"] == 0)."""
    from kappaflow.runner import KafkaStreams, State, tune_gc_for_streaming

    tune_gc_for_streaming()  # as `kappaflow run` does
    limits = Limits(**spec["limits"])
    config = app_config(
        spec["bootstrap"], spec["app_id"], spec["state_dir"], limits, spec["overrides"], **spec["table"]
    )
    app = KafkaStreams(topology(spec["source"], spec["sink"]), config)
    app.start()
    result: dict[str, Any] = {}
    try:
        if spec["records"] == 0:
            deadline = time.monotonic() + 120
            while app.state is not State.RUNNING and time.monotonic() < deadline:
                time.sleep(0.1)
            if app.state is not State.RUNNING:
                raise RuntimeError(f"idle app never reached RUNNING: {app.state}")
            time.sleep(IDLE_SETTLE_S)
            print("IDLE", flush=True)  # the parent reads the idle RSS now
            sys.stdin.readline()
        else:
            broker = spec["broker_pid"]
            # at the first record: this process's CPU, its threads', the broker's
            at_first: list[tuple[float, dict[int, tuple[str, float]], float | None]] = []

            def started() -> None:
                at_broker = process_cpu.cpu_seconds_of(broker) if broker else None
                at_first.append((own_cpu(), process_cpu.thread_cpu(os.getpid()), at_broker))

            elapsed = wait_processed(app, 2 * spec["records"], timeout_s=3600.0, on_first=started)
            threads_now = process_cpu.thread_cpu(os.getpid())
            own_first, threads_first, broker_first = at_first[0]
            result["records_per_s"] = spec["records"] / elapsed
            own_s = own_cpu() - own_first
            result["cpu_us_per_record"] = own_s * 1e6 / spec["records"]
            spent = cpu_by_thread(threads_first, threads_now, own_s)
            result["threads_us_per_record"] = {kind: s * 1e6 / spec["records"] for kind, s in spent.items()}
            broker_now = process_cpu.cpu_seconds_of(broker) if broker else None
            if broker_first is not None and broker_now is not None:
                result["broker_cpu_us_per_record"] = (broker_now - broker_first) * 1e6 / spec["records"]
    finally:
        app.close(60)
    return result


def cpu_by_thread(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], total_s: float
) -> dict[str, float]:
    """CPU seconds between two `process_cpu.thread_cpu` readings of this process by kind of thread: the
    stream thread apart from the other Python threads, librdkafka's, RocksDB's background threads, and
    what threads that ended meanwhile took (the process's total less the live threads')."""
    stream = {t.native_id for t in threading.enumerate() if t.name.endswith("-StreamThread-1")}
    spent: dict[str, float] = {}
    for tid, (name, seconds) in after.items():
        kind = "stream thread" if tid in stream else process_cpu.thread_kind(name)
        spent[kind] = spent.get(kind, 0.0) + seconds - before.get(tid, (name, 0.0))[1]
    spent["ended threads"] = max(0.0, total_s - sum(spent.values()))
    return spent


def own_cpu() -> float:
    """CPU seconds of this process so far, user and system, every thread."""
    times = os.times()
    return times.user + times.system


def key_name(i: int) -> bytes:
    """The i-th distinct key: 16 hex digits of i times an odd constant mod 2**64 (a bijection, so distinct
    keys stay distinct). Scattered and hardly compressible, unlike `key-<i>`, whose 1M keys RocksDB
    compressed to 7 MiB, inside its cache: this way 1M keys are ~40 MiB on disk, 10M ~400 MiB."""
    return b"%016x" % ((i * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF)


def fill(bootstrap: str, topic: str, records: int, keys: int) -> None:
    """`records` values naming keys in turn (key i mod keys), no record key: spread by the client."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20})
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=key_name(i % keys))
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10000 == 0:
            producer.poll(0)
    producer.flush(120)


def read_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (the kernel's peak RSS) of `pid`, in bytes; empty once it has exited."""
    try:
        with open(f"/proc/{pid}/status") as status:
            lines = status.read().splitlines()
    except OSError:
        return {}
    found = {}
    for line in lines:
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            found[name] = int(rest.split()[0]) * 1024
    return found


def spawn(spec: dict[str, Any]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, __file__, "--child", json.dumps(spec)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def idle_baseline(bootstrap: str, admin: AdminClient, partitions: int, limits: Limits) -> int:
    """VmRSS of a kappaflow process RUNNING the cell's topology on `partitions` empty partitions."""
    spec, topics, state_dir = new_spec(bootstrap, admin, partitions, 0, limits, None)
    proc = spawn(spec)
    assert proc.stdout is not None and proc.stdin is not None
    try:
        line = proc.stdout.readline()
        if line.strip() != "IDLE":
            raise RuntimeError(f"idle child failed (exit {proc.wait()})")
        rss = read_status(proc.pid)["VmRSS"]
        proc.stdin.write("\n")
        proc.stdin.flush()
        proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
        cleanup(admin, topics, spec["app_id"], state_dir)
    return rss


def new_spec(
    bootstrap: str, admin: AdminClient, partitions: int, records: int, limits: Limits, broker_pid: int | None
) -> tuple[dict[str, Any], list[str], str]:
    """A cell's fresh topics, state directory and application id, as the child's JSON argument."""
    tag = uuid.uuid4().hex[:6]
    source, sink = f"scaling-in-{tag}", f"scaling-out-{tag}"
    for topic in (source, sink):
        create_topic(admin, topic, partitions)
    state_dir = tempfile.mkdtemp(prefix="kappaflow-scaling-")
    spec = {
        "bootstrap": bootstrap,
        "app_id": f"scaling-{tag}",
        "state_dir": state_dir,
        "source": source,
        "sink": sink,
        "records": records,
        "limits": limits.__dict__,
        "overrides": OVERRIDES,
        "table": TABLE,
        "broker_pid": broker_pid,
    }
    return spec, [source, sink], state_dir


def cleanup(admin: AdminClient, topics: list[str], app_id: str, state_dir: str) -> None:
    """Topics (the app's internal ones too) and state go after each cell: 10M-record cells are GBs."""
    internal = [name for name in admin.list_topics(timeout=30).topics if name.startswith(f"{app_id}-")]
    for future in admin.delete_topics(topics + internal).values():
        try:
            future.result(30)
        except Exception as err:
            print(f"    could not delete a topic: {err}", flush=True)
    shutil.rmtree(state_dir, ignore_errors=True)


def dir_bytes(path: str) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def sample_until_exit(proc: subprocess.Popen[str]) -> tuple[int, int]:
    """(peak, last) resident bytes of `proc` until it exits: the kernel's high-water mark, the last VmRSS."""
    peak = last = 0
    while proc.poll() is None:
        status = read_status(proc.pid)
        peak = max(peak, status.get("VmHWM", 0))
        last = status.get("VmRSS", last)
        time.sleep(0.1)
    return peak, last


def run_java(classpath: str, spec: dict[str, Any], sink: str, limits: Limits) -> tuple[float, int]:
    """Java Kafka Streams on the cell's input (its own application id, sink and state directory, so its
    internal topics go with the cell's cleanup): (records/s, peak RSS)."""
    java = shutil.which("java")
    if java is None:
        raise kafka_streams_peer.PeerError("java (17+) is required for the Kafka Streams peer (or --no-java)")
    state_dir = tempfile.mkdtemp(prefix="kstreams-scaling-")
    args = (
        spec["bootstrap"], f"{spec['app_id']}-java", spec["source"], sink, state_dir, spec["records"],
        limits.record_cache, limits.rocksdb, limits.write_buffers,
    )  # fmt: skip
    cmd = [java, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath, SCALING_PEER.stem]
    try:
        proc = subprocess.Popen(
            [*cmd, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        peak, _last = sample_until_exit(proc)
        out, err = proc.communicate()
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
    for line in out.splitlines():
        if line.startswith(JAVA_RESULT_PREFIX):
            return float(line.removeprefix(JAVA_RESULT_PREFIX)), peak
    tail = "\n".join((out + err).splitlines()[-30:])
    raise kafka_streams_peer.PeerError(f"Kafka Streams peer exited {proc.returncode}, no result:\n{tail}")


def run_cell(
    bootstrap: str,
    admin: AdminClient,
    cell: Cell,
    limits: Limits,
    java_classpath: str | None,
    broker_pid: int | None,
) -> None:
    """Fill fresh input, run the kappaflow child on it while sampling its memory, then (with a
    classpath) Java Kafka Streams on the same input; fold into `cell`."""
    spec, topics, state_dir = new_spec(bootstrap, admin, cell.partitions, cell.records, limits, broker_pid)
    java_sink = f"{spec['sink']}-java"
    try:
        print(f"    writing {cell.records:,} records over {cell.keys:,} keys ...", flush=True)
        fill(bootstrap, spec["source"], cell.records, cell.keys)
        proc = spawn(spec)
        assert proc.stdout is not None
        peak, last = sample_until_exit(proc)
        output = proc.stdout.read().strip().splitlines()
        if proc.returncode != 0 or not output:
            raise RuntimeError(f"kappaflow child failed (exit {proc.returncode})")
        disk = dir_bytes(state_dir)
        result = json.loads(output[-1])
        rate, cpu_us = float(result["records_per_s"]), float(result["cpu_us_per_record"])
        broker_us = float(result.get("broker_cpu_us_per_record", 0.0))
        by_thread = ", ".join(
            f"{kind} {us:.2f}"
            for kind, us in sorted(result["threads_us_per_record"].items(), key=lambda i: -i[1])
        )
        print(
            f"    kappaflow {rate:,.0f} records/s, {cpu_us:.2f} CPU us/record ({by_thread}; "
            f"broker {broker_us:.2f}), peak RSS {peak / MIB:,.0f} MiB, state {disk / MIB:,.0f} MiB",
            flush=True,
        )
        cell.cpu_us = min(cell.cpu_us, cpu_us) if cell.cpu_us else cpu_us
        cell.broker_cpu_us = min(cell.broker_cpu_us, broker_us) if cell.broker_cpu_us else broker_us
        cell.rounds.append(rate)
        cell.records_per_s = max(cell.records_per_s, rate)
        cell.peak = max(cell.peak, peak)
        cell.final_rss = max(cell.final_rss, last)
        cell.disk = max(cell.disk, disk)
        if java_classpath is not None:
            create_topic(admin, java_sink, cell.partitions)
            topics.append(java_sink)
            try:
                java_rate, java_peak = run_java(java_classpath, spec, java_sink, limits)
            except kafka_streams_peer.PeerError as err:  # the table still prints; the cell's Java is n/a
                print(f"    Java: {err}", flush=True)
                return
            cell.java_per_s = max(cell.java_per_s, java_rate)
            cell.java_peak = max(cell.java_peak, java_peak)
            print(f"    Java {java_rate:,.0f} records/s, peak RSS {java_peak / MIB:,.0f} MiB", flush=True)
    finally:
        cleanup(admin, topics, spec["app_id"], state_dir)


def verdicts(cells: list[Cell], baselines: dict[int, int], limits: Limits) -> list[tuple[bool, bool]]:
    """(throughput within 20% of the best cell, peak within the memory bound) per cell."""
    best = max((cell.records_per_s for cell in cells), default=0.0)
    return [
        (
            cell.records_per_s >= THROUGHPUT_WITHIN * best,
            cell.peak <= limits.bound(baselines[cell.partitions]),
        )
        for cell in cells
    ]


def print_table(cells: list[Cell], baselines: dict[int, int], limits: Limits) -> bool:
    best = max((cell.records_per_s for cell in cells), default=0.0)
    with_java = any(cell.java_per_s for cell in cells)
    print(
        f"\nbound = idle baseline + record cache {limits.record_cache / MIB:.0f} MiB + RocksDB "
        f"{limits.rocksdb / MIB:.0f} MiB (write buffers {limits.write_buffers / MIB:.0f} MiB charged into "
        f"it) + consumer prefetch {limits.prefetch / MIB:.0f} MiB + slack {limits.slack / MIB:.0f} MiB"
    )
    java_head = f"{'Java rec/s':>11}{'/ best':>8}{'kf/Java':>8}{'Java MiB':>9}" if with_java else ""
    print(
        f"{'partitions':>10}{'keys':>12}{'records':>12}{'records/s':>11}{'/ best':>8}  {'verdict':<8}"
        f"{'CPU us':>7}{'broker':>7}{'idle MiB':>9}{'peak MiB':>9}{'bound MiB':>10}  {'verdict':<8}"
        f"{'state MiB':>10}{java_head}"
    )
    java_best = max((cell.java_per_s for cell in cells), default=0.0)
    all_met = True
    for cell, (fast, bounded) in zip(cells, verdicts(cells, baselines, limits), strict=True):
        all_met = all_met and fast and bounded
        baseline = baselines[cell.partitions]
        java = ""
        if with_java and cell.java_per_s:
            java = (
                f"{cell.java_per_s:>11,.0f}{cell.java_per_s / java_best:>8.2f}"
                f"{cell.records_per_s / cell.java_per_s:>8.2f}{cell.java_peak / MIB:>9.0f}"
            )
        elif with_java:  # its peer failed (the reason was printed with the cell)
            java = f"{'n/a':>11}{'':>8}{'':>8}{'':>9}"
        print(
            f"{cell.partitions:>10}{cell.keys:>12,}{cell.records:>12,}{cell.records_per_s:>11,.0f}"
            f"{cell.records_per_s / best if best else 0:>8.2f}  {'met' if fast else 'NOT met':<8}"
            f"{cell.cpu_us:>7.2f}{cell.broker_cpu_us:>7.2f}{baseline / MIB:>9.0f}{cell.peak / MIB:>9.0f}"
            f"{limits.bound(baseline) / MIB:>10.0f}  "
            f"{'met' if bounded else 'NOT met':<8}{cell.disk / MIB:>10.0f}{java}"
        )
    if with_java:
        kappaflow = slowest_over_fastest([cell.records_per_s for cell in cells])
        java_spread = slowest_over_fastest([cell.java_per_s for cell in cells if cell.java_per_s])
        print(f"slowest / fastest cell: kappaflow {kappaflow:.2f}, Java Kafka Streams {java_spread:.2f}")
    return all_met


def slowest_over_fastest(rates: list[float]) -> float:
    """How far the table's slowest cell falls below its fastest (1.0: flat; the target is >= 0.8)."""
    return min(rates) / max(rates) if rates and max(rates) > 0 else 0.0


def csv_ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=csv_ints, default=[4, 16, 64])
    parser.add_argument("--keys", type=csv_ints, default=[1_000, 1_000_000, 10_000_000])
    parser.add_argument("--records", type=int, default=1_000_000, help="per cell; at least the cell's keys")
    parser.add_argument("--cache-mib", type=int, default=10, help="statestore.cache.max.bytes")
    parser.add_argument("--rocksdb-mib", type=int, default=32, help="RocksDB's shared cache, memtables in")
    parser.add_argument("--write-buffer-mib", type=int, default=16, help="memtables' share of it")
    parser.add_argument("--slack-mib", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=1, help="rounds, interleaved; best rate, worst peak")
    parser.add_argument("--bootstrap", default="")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="an application setting to override"
    )
    parser.add_argument(
        "--full-filters", action="store_true", help="one index and filter block per SST file (before)"
    )
    parser.add_argument("--no-java", action="store_true", help="leave out Java Kafka Streams")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    OVERRIDES.update(item.split("=", 1) for item in args.set)
    TABLE["partitioned_index_filters"] = not args.full_filters
    if args.child:
        print(json.dumps(child(json.loads(args.child))), flush=True)
        return 0
    limits = Limits(
        args.cache_mib * MIB, args.rocksdb_mib * MIB, args.write_buffer_mib * MIB,
        prefetch_bound(), args.slack_mib * MIB,
    )  # fmt: skip
    cells = [Cell(p, k, max(args.records, k)) for k in args.keys for p in args.partitions]
    java_classpath = None if args.no_java else kafka_streams_peer.prepare(SCALING_PEER)
    with bench_broker(args.bootstrap) as (bootstrap, broker):
        broker_pid = broker.pid if broker is not None else None
        admin = AdminClient({"bootstrap.servers": bootstrap})
        baselines: dict[int, int] = {}
        for partitions in args.partitions:
            baselines[partitions] = idle_baseline(bootstrap, admin, partitions, limits)
            print(
                f"==> idle baseline, {partitions} partitions: {baselines[partitions] / MIB:.0f} MiB",
                flush=True,
            )
        for round_number in range(1, max(args.repeat, 1) + 1):
            for cell in cells:
                load = os.getloadavg()[0]
                print(
                    f"==> round {round_number}: {cell.partitions} partitions, {cell.keys:,} keys "
                    f"(load {load:.1f})",
                    flush=True,
                )
                run_cell(bootstrap, admin, cell, limits, java_classpath, broker_pid)
        del admin  # its connections go before the broker does
    met = print_table(cells, baselines, limits)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
