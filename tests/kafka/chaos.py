"""A kill-loop harness: several `kappaflow run` instances, `kill -9` and restart at random, input produced
concurrently, then an audit of the read_committed output.

The application is the word count through a repartition topic (tests.kafka.apps:wordcount) with the
record cache off, so every input line `kN` must show up in the output as the next count of `kN`: per key
the committed output has to be exactly 1, 2, 3, ..., N. The audit counts, per key,
  - lost updates: N minus the final count when it is short (state that went missing),
  - duplicates: a count seen more than once (an input applied twice, or state that went backwards
    and was counted up again),
  - regressions: a count not greater than the one before it (aggregates going backwards).
Under exactly_once_v2 all three must be 0; under at_least_once duplicates are allowed, losses are not.

Broker restarts need a cluster of their own, split like production KRaft clusters (tests.harness.kafka_split):
a controller-only process that stays up and a broker-only process that is crashed (SIGKILL) and started
again once the controller has fenced it. Restarting the single combined node instead (the session broker
of the other tests) makes Kafka's transaction coordinator drop markers: it completes transactions while
the partitions have no leader, which it takes for deleted partitions, leaving hanging or wrongly committed
transactions - the broker's failure, not the application's (the module docstring of kafka_split says how).

`app=ASYNC_APP` runs the same word count with asynchronous calls in both sub-topologies
(tests.kafka.apps:async_wordcount): calls in flight at every kill, their results out of order, and the
audit unchanged (a count out of order per key is a regression).

Broker faults on a replicated cluster (partition leaders, coordinators, a rolling restart, a frozen
broker) run on the three-broker cluster (tests.harness.kafka_cluster), injected and timed by
tests.kafka.cluster_chaos while the kill loop goes on.

The CI tests (tests/kafka/test_chaos.py, tests/kafka/test_cluster_chaos.py) run it for well under a minute
per mode or once per fault kind; `make chaos` runs `python -m tests.kafka.chaos --minutes N` against a
cluster of its own for as long as asked (`--cluster`: the three-broker one, faults cycling).
"""

from __future__ import annotations

import argparse
import itertools
import random
import re
import signal
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from kappaflow.cli import CLOSE_GRACE_S
from kappaflow_contract.topics import replicated_topic_config
from tests.harness.kafka_cluster import REPLICAS, KafkaCluster
from tests.harness.kafka_split import SplitKafkaCluster
from tests.kafka.cluster_chaos import (
    FAULT_KINDS,
    FaultInjector,
    FaultRecord,
    plan_faults,
    recovery_table,
    transactional_id,
)
from tests.kafka.streams_support import fast_config, start_cli_app

APP = "tests.kafka.apps:wordcount"
RESTORED_LINE = re.compile(r"task \d+_\d+: restored (\d+) records in")
ASYNC_APP = "tests.kafka.apps:async_wordcount"
CLOSE_TIMEOUT_S = 30.0  # `kappaflow run --close-timeout`


@dataclass
class Audit:
    """What the committed output says about each key's sequence of counts."""

    expected: dict[str, int]
    final: dict[str, int] = field(default_factory=dict)
    lost: int = 0
    duplicates: int = 0
    regressions: int = 0
    wrong_keys: list[str] = field(default_factory=list)

    @property
    def total_expected(self) -> int:
        return sum(self.expected.values())

    def summary(self) -> str:
        first = [f"{key} {self.final.get(key, 0)}/{self.expected[key]}" for key in self.wrong_keys[:5]]
        return (
            f"{len(self.expected)} keys, {self.total_expected} inputs: lost={self.lost} "
            f"duplicates={self.duplicates} regressions={self.regressions} wrong keys={len(self.wrong_keys)} "
            f"(first, final/expected: {first})"
        )


def audit(expected: dict[str, int], sequences: dict[str, list[int]]) -> Audit:
    """Compare each key's committed counts with 1..N (pure: unit-tested without a broker)."""
    result = Audit(dict(expected))
    for key, count in expected.items():
        seen = sequences.get(key, [])
        final = seen[-1] if seen else 0
        result.final[key] = final
        lost = max(0, count - max(seen, default=0))
        duplicates = len(seen) - len(set(seen))
        regressions = sum(1 for a, b in itertools.pairwise(seen) if b <= a)
        result.lost += lost
        result.duplicates += duplicates
        result.regressions += regressions
        if lost or duplicates or regressions or final != count:
            result.wrong_keys.append(key)
    return result


class OutputReader:
    """A read_committed reader of the output topic that keeps its position between reads."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"chaos-audit-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        self._consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        self.sequences: dict[str, list[int]] = defaultdict(list)
        self._lock = threading.Lock()
        self._following = threading.Event()
        self._follower: threading.Thread | None = None

    def read(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for msg in self._consumer.consume(1000, 0.2):
                if msg.error() is None and msg.key() is not None:
                    with self._lock:
                        self.sequences[msg.key().decode()].append(struct.unpack(">q", msg.value())[0])

    def caught_up(self, expected: dict[str, int]) -> bool:
        with self._lock:
            return all(self.sequences.get(k, [0])[-1] >= n for k, n in expected.items())

    def follow(self) -> None:
        """Read on in a thread of its own (so that a fault's recovery can be timed) until `unfollow()`."""
        self._following.set()

        def loop() -> None:
            while self._following.is_set():
                self.read(0.5)

        self._follower = threading.Thread(target=loop, name="chaos-output-reader", daemon=True)
        self._follower.start()

    def unfollow(self) -> None:
        self._following.clear()
        if self._follower is not None:
            self._follower.join(30)

    def close(self) -> None:
        self._consumer.close()


class Feeder(threading.Thread):
    """Produces lines `k<i>` (one word each) at about `rate` per second until stopped.

    Idempotent with a long delivery timeout, so a broker restart neither duplicates nor drops input; a
    line counts as expected input once its delivery is acknowledged."""

    def __init__(self, bootstrap: str, topic: str, keys: int, rate: float, seed: int) -> None:
        super().__init__(name="chaos-feeder", daemon=True)
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 600000,
                "partitioner": "murmur2_random",
            }
        )
        self._topic, self._keys, self._rate = topic, keys, rate
        self._random = random.Random(seed)
        self.stop = threading.Event()
        self.acked: dict[str, int] = defaultdict(int)
        self.failed = 0
        self._lock = threading.Lock()

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is None:
            with self._lock:
                self.acked[msg.value().decode()] += 1
        else:
            self.failed += 1

    def snapshot(self) -> dict[str, int]:
        """The acknowledged input per key so far (from any thread)."""
        with self._lock:
            return dict(self.acked)

    def run(self) -> None:
        batch = max(1, int(self._rate / 10))
        while not self.stop.is_set():
            for _ in range(batch):
                word = f"k{self._random.randrange(self._keys)}"
                self._producer.produce(self._topic, value=word.encode(), on_delivery=self._on_delivery)
            self._producer.poll(0)
            time.sleep(0.1)
        while self._producer.flush(5) > 0:
            pass


def positions(bootstrap: str, group: str, topics: list[str], partitions: int) -> str:
    """Per partition: log start, last stable offset (read_committed end), high watermark, and the
    group's committed offset - where a stalled run stopped, for the failure message.

    A topic whose positions cannot be read (a coordinator still loading after a broker restart) gets a
    line saying so: the diagnostics must not replace the audit's own failure with a timeout of theirs."""
    settings = {"bootstrap.servers": bootstrap, "enable.auto.commit": False}
    committed_reader = Consumer({**settings, "group.id": group, "isolation.level": "read_committed"})
    uncommitted = Consumer({**settings, "group.id": f"{group}-diag", "isolation.level": "read_uncommitted"})
    lines = []
    try:
        for topic in topics:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            try:
                committed = {tp.partition: tp.offset for tp in committed_reader.committed(tps, timeout=10)}
                for tp in tps:
                    low, lso = committed_reader.get_watermark_offsets(tp, timeout=10)
                    _low, high = uncommitted.get_watermark_offsets(tp, timeout=10)
                    group_at = committed[tp.partition]
                    lines.append(
                        f"{topic}-{tp.partition}: start {low} lso {lso} hw {high} committed {group_at}"
                    )
            except KafkaException as err:
                lines.append(f"{topic}: positions unavailable: {err}")
    finally:
        committed_reader.close()
        uncommitted.close()
    return "\n".join(lines)


def input_counts(bootstrap: str, topic: str, partitions: int, timeout: float = 60.0) -> dict[str, int]:
    """Per word, how many records the input topic holds (read to the end of every partition)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"chaos-input-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    counts: dict[str, int] = defaultdict(int)
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is not None:
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        at_end.add(msg.partition())
                    continue
                counts[msg.value().decode()] += 1
    finally:
        consumer.close()
    assert len(at_end) == partitions, f"the input topic {topic} could not be read to its end"
    return dict(counts)


class Instance:
    """One `kappaflow run` process with its own state directory (a pod with its volume)."""

    def __init__(
        self, index: int, workdir: Path, props: dict[str, Any], env: dict[str, str], app: str = APP
    ) -> None:
        self.index = index
        self.app = app
        self.workdir = workdir / f"instance-{index}"
        self.props = {**props, "state.dir": str(self.workdir / "state")}
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.stuck_stacks = ""  # where its threads were, when it did not stop on SIGTERM

    def start(self) -> None:
        self.starts += 1
        self.process = start_cli_app(self.app, self.props, self.workdir, self.env, "run", CLOSE_TIMEOUT_S)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(30)

    def terminate(self) -> int | None:
        """SIGTERM and wait past the close timeout; the exit code, or None if it had to be killed."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process is not None else None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(CLOSE_TIMEOUT_S + CLOSE_GRACE_S + 5)
        except subprocess.TimeoutExpired:
            self.stuck_stacks = thread_stacks(self.process.pid)
            self.kill()
            return None

    def transactional_id(self, app_id: str) -> str | None:
        return transactional_id(
            app_id, Path(self.props["state.dir"]), str(self.props.get("group.instance.id", ""))
        )

    def log(self) -> str:
        path = self.workdir / "run.log"
        return path.read_text(errors="replace") if path.exists() else ""


def thread_stacks(pid: int) -> str:
    """Every thread's Python and native stack of a live process (py-spy, in the test environment)."""
    spy = Path(sys.executable).with_name("py-spy")
    try:
        done = subprocess.run(
            [str(spy), "dump", "--native", "--pid", str(pid)], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(py-spy dump failed: {exc})"
    return done.stdout + done.stderr


def create_topics(bootstrap: str, names: list[str], partitions: int, replication: int = 1) -> None:
    """The input and output topics; replicated ones as the app's internal topics (min.insync.replicas)."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = replicated_topic_config({}, replication)
    futures = admin.create_topics(
        [NewTopic(n, num_partitions=partitions, replication_factor=replication, config=config) for n in names]
    )
    for future in futures.values():
        future.result(timeout=60)


@dataclass
class ChaosResult:
    audit: Audit
    kills: int
    broker_restarts: int
    exit_codes: list[int | None]
    stuck_stacks: list[str]  # per instance: its threads' stacks if it did not stop on SIGTERM
    logs: list[str]
    unacked: dict[str, int]  # per key, input records in the log beyond the feeder's acknowledgements
    diagnostics: str  # when the audit failed: where the group and the logs stood
    faults: list[FaultRecord] = field(default_factory=list)  # cluster faults, each timed
    fault_error: str = ""  # what stopped the fault injector, if anything did
    app_id: str = ""

    @property
    def restored_records(self) -> int:
        """Changelog records the instances' active tasks restored, over every start (their logs)."""
        return sum(int(n) for log in self.logs for n in RESTORED_LINE.findall(log))


def run_chaos(
    bootstrap: str,
    workdir: Path,
    *,
    guarantee: str = "exactly_once_v2",
    static: bool = False,
    instances: int = 3,
    duration_s: float = 40.0,
    kill_every: tuple[float, float] = (3.0, 7.0),
    keys: int = 40,
    rate: float = 150.0,
    partitions: int = 4,
    broker: SplitKafkaCluster | None = None,
    broker_restarts: int = 0,
    drain_timeout_s: float = 120.0,
    seed: int | None = None,
    app: str = APP,
    cluster: KafkaCluster | None = None,
    faults: Sequence[str] = (),
) -> ChaosResult:
    """Run the kill loop for `duration_s`, then let every instance catch up and audit the output.

    `broker` (the split cluster `bootstrap` belongs to) with `broker_restarts` > 0 also crashes (SIGKILL)
    its broker that many times, spread over the run, and starts it again once the controller has fenced
    it (then a little later, at random): the restarted coordinator reloads its log and finishes or aborts
    what was open, with every partition led again. Why split and why wait for the fencing: the module
    docstring.

    `cluster` (the three-broker cluster `bootstrap` belongs to) runs `faults` (tests.kafka.cluster_chaos)
    one after another while the kill loop goes on, with every topic replicated three times; the run
    lasts until they are all done, however long `duration_s`."""
    seed = seed if seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    app_id = f"chaos-{uuid.uuid4().hex[:8]}"
    source, sink = f"{app_id}-in", f"{app_id}-out"
    replication = REPLICAS if cluster is not None else 1
    create_topics(bootstrap, [source, sink], partitions, replication)
    props = fast_config(
        bootstrap,
        app_id,
        "",
        **{
            "processing.guarantee": guarantee,
            "commit.interval.ms": 100,
            "statestore.cache.max.bytes": 0,
            "metrics.port": -1,
            # a transaction call that hangs through a broker restart is abandoned sooner (default 60 s)
            "default.api.timeout.ms": 30000,
            "replication.factor": replication,
        },
    )
    env = {"WC_INPUT": source, "WC_OUTPUT": sink}
    fleet = []
    for i in range(instances):
        extra = {"group.instance.id": f"{app_id}-{i}"} if static else {}
        fleet.append(Instance(i, workdir, {**props, **extra}, env, app))
    for instance in fleet:
        instance.start()
    feeder = Feeder(bootstrap, source, keys, rate, seed)
    feeder.start()
    reader = OutputReader(bootstrap, sink, partitions)
    reader.follow()
    injector = None
    if cluster is not None and faults:
        injector = FaultInjector(
            cluster,
            list(faults),
            app_id=app_id,
            source=source,
            partitions=partitions,
            transactional_ids=lambda: [t for t in (i.transactional_id(app_id) for i in fleet) if t],
            acked=feeder.snapshot,
            caught_up=reader.caught_up,
            rng=random.Random(rng.random()),
        )
        injector.start()
    kills = restarts = 0
    broker_at = sorted(rng.uniform(0.2, 0.8) * duration_s for _ in range(broker_restarts if broker else 0))
    started = time.monotonic()
    next_kill = started + rng.uniform(*kill_every)
    try:
        # Until every broker restart planned has happened too: a slow restart (a loaded machine) can
        # push the next one past `duration_s`.
        while (
            time.monotonic() - started < duration_s
            or broker_at
            or (injector is not None and injector.is_alive())
        ):
            time.sleep(0.2)
            if broker_at and time.monotonic() - started >= broker_at[0]:
                broker_at.pop(0)
                assert broker is not None
                broker.crash_broker()
                time.sleep(rng.uniform(0.0, 2.0))
                broker.start_broker()
                restarts += 1
            if time.monotonic() >= next_kill:
                victim = rng.choice(fleet)
                victim.kill()
                kills += 1
                time.sleep(rng.uniform(0.0, 1.0))
                victim.start()
                next_kill = time.monotonic() + rng.uniform(*kill_every)
        feeder.stop.set()
        feeder.join(120)
        # The truth is the input log itself: an acknowledgement lost in a broker restart leaves a record
        # in the log that `acked` does not count (the app rightly counts it).
        diagnostics = ""
        expected = input_counts(bootstrap, source, partitions)
        unacked = {k: n - feeder.acked.get(k, 0) for k, n in expected.items() if n != feeder.acked.get(k, 0)}
        reader.unfollow()
        try:
            deadline = time.monotonic() + drain_timeout_s
            while time.monotonic() < deadline and not reader.caught_up(expected):
                reader.read(1.0)
            reader.read(3.0)  # anything after catching up would be a duplicate: read a little more
            result = audit(expected, reader.sequences)
        finally:
            reader.close()
        if result.wrong_keys:
            diagnostics = positions(
                bootstrap, app_id, [source, f"{app_id}-counts-repartition", sink], partitions
            )
        codes = [instance.terminate() for instance in fleet]
    finally:
        feeder.stop.set()
        if injector is not None:
            injector.stop.set()
            injector.join(300)
        reader.unfollow()
        for instance in fleet:
            instance.kill()
    logs = [instance.log() for instance in fleet]
    stuck = [instance.stuck_stacks for instance in fleet]
    records = injector.records if injector is not None else []
    fault_error = injector.error if injector is not None else ""
    return ChaosResult(
        result, kills, restarts, codes, stuck, logs, unacked, diagnostics, records, fault_error, app_id
    )


def _verdict(name: str, guarantee: str, result: ChaosResult) -> bool:
    """Print one mode's line (and its recovery table); whether it passed."""
    a = result.audit
    ok = a.lost == 0 and (guarantee != "exactly_once_v2" or not (a.duplicates or a.regressions))
    ok = ok and not result.fault_error and all(r.recovery_s is not None for r in result.faults)
    print(
        f"{'ok  ' if ok else 'FAIL'} {name}: {result.kills} kills, {result.broker_restarts} broker restarts, "
        f"{len(result.faults)} cluster faults; {a.summary()}; exit codes {result.exit_codes}; "
        f"changelog records restored: {result.restored_records}",
        flush=True,
    )
    if result.faults:
        print(recovery_table(result.faults), flush=True)
    if result.fault_error:
        print(f"the fault injector stopped: {result.fault_error}", flush=True)
    return ok


# a fault, its outage and its recovery take about this long: how many to plan for `--minutes`
SECONDS_PER_FAULT = 40.0


def main(argv: list[str] | None = None) -> int:
    """`make chaos`: a long kill loop (each mode in turn) against a broker of its own, or (`--cluster`)
    against a three-broker cluster with broker faults cycling all the while."""
    import tempfile

    from tests.harness.kafka_fixtures import free_port

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="kill-loop time per mode")
    parser.add_argument("--broker-restarts", type=int, default=3, help="per mode (single broker)")
    parser.add_argument("--cluster", action="store_true", help="three brokers, with cluster faults")
    parser.add_argument("--controllers", type=int, default=3, choices=[1, 3])
    parser.add_argument("--faults", default="all", help=f"comma-separated, of: {', '.join(FAULT_KINDS)}")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    kinds = list(FAULT_KINDS) if args.faults == "all" else [k.strip() for k in args.faults.split(",") if k]
    faults = plan_faults(kinds, max(len(kinds), int(args.minutes * 60 / SECONDS_PER_FAULT)))
    modes = [
        ("exactly_once_v2", False, APP),
        ("exactly_once_v2", True, APP),
        ("at_least_once", False, APP),
        ("exactly_once_v2", False, ASYNC_APP),
    ]
    failures = 0
    with tempfile.TemporaryDirectory(prefix="kappaflow-chaos-") as tmp:
        if args.cluster:
            cluster: KafkaCluster | None = KafkaCluster(Path(tmp) / "kafka", controllers=args.controllers)
            broker = None
        else:
            cluster, broker = None, SplitKafkaCluster(free_port(), free_port(), Path(tmp) / "kafka")
        servers = cluster if cluster is not None else broker
        assert servers is not None
        servers.start()
        try:
            for guarantee, static, app in modes:
                name = f"{guarantee}{' static' if static else ''}{' async' if app == ASYNC_APP else ''}"
                result = run_chaos(
                    servers.bootstrap_servers,
                    Path(tmp) / name.replace(" ", "-"),
                    guarantee=guarantee,
                    static=static,
                    duration_s=args.minutes * 60,
                    broker=broker,
                    broker_restarts=args.broker_restarts if broker is not None else 0,
                    drain_timeout_s=300,
                    seed=args.seed,
                    app=app,
                    cluster=cluster,
                    # at_least_once has no transactions: no transaction coordinator to aim at
                    faults=[f for f in faults if guarantee == "exactly_once_v2" or f != "txn-coordinator"]
                    if cluster is not None
                    else (),
                )
                failures += not _verdict(name, guarantee, result)
        finally:
            servers.stop()
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
