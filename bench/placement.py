"""Task placement under failures and scaling: how long tasks stand still, and how much state is restored.

Not a test: it runs a stateful app (a count per key, `tests.kafka.apps:keycount`, exactly_once_v2, one
standby, 12 partitions, static members `pod-0..`) as `kappaflow run` processes on the project's broker,
with its state filled up front and a steady input, and puts it through, in order:

1. kill -9 of one of three instances (pod-1), then its restart with its state;
2. scale-out 3 -> 4 (pod-3 with an empty state directory), then scale-in 4 -> 3 (SIGTERM pod-3);
3. a rolling restart of the three (SIGTERM, start, wait until ready; one after the other).

For each event it prints the longest time any task stood still (the largest gap between two committed
output records of one partition, from the event until every instance is ready and every partition has
produced again) and the changelog records restored by active tasks (`restored-records-total` summed
over the instances, before and after). `--tree DIR` runs the instances from another source tree (e.g.
`git archive main | tar -x -C DIR`), to print the figures of the code before a change in the same way.

    python bench/placement.py [--keys 120000] [--rate 600] [--tree DIR] [--bootstrap host:port]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.local_broker import bench_broker  # noqa: E402
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # noqa: E402
from tests.harness.kafka_fixtures import free_port  # noqa: E402
from tests.kafka.streams_support import start_cli_app  # noqa: E402

PARTITIONS = 12
APP = "tests.kafka.apps:keycount"


class Instance:
    """One `kappaflow run` process (a pod) with its own state directory and metrics port."""

    def __init__(self, name: str, workdir: Path, props: dict[str, Any], env: dict[str, str]) -> None:
        self.name = name
        self.dir = workdir / name
        self.port = free_port()
        self.props = {
            **props,
            "state.dir": str(self.dir / "state"),
            "group.instance.id": name,
            "metrics.port": self.port,
        }
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None
        self.restored_before_exit = 0.0  # a stopped process's counter, kept for the totals

    def start(self) -> None:
        self.process = start_cli_app(APP, self.props, self.dir, self.env, "run", 30.0)

    def stop(self, sig: int) -> None:
        if self.process is not None and self.process.poll() is None:
            self.restored_before_exit += self.restored()
            self.process.send_signal(sig)
            self.process.wait(60)
        self.process = None

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health/ready", timeout=2) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False

    def restored(self) -> float:
        """restored-records-total of the running process (0 when it does not answer)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as reply:
                text = reply.read().decode()
        except OSError:
            return 0.0
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("kappaflow_restored_records_total")
        )


class OutputWatch:
    """Reads the committed output and keeps, per partition, when its last record arrived and the largest
    gap between two arrivals since `mark()`."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"watch-{uuid.uuid4().hex[:6]}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        self._consumer.assign([TopicPartition(topic, p, -1) for p in range(PARTITIONS)])  # from the end
        self.last: dict[int, float] = {}
        self.input_ms: dict[int, int] = {}  # per partition, the latest input time seen in the output
        self.max_gap: dict[int, float] = {}
        self._since = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for message in self._consumer.consume(1000, 0.2):
                if message.error():
                    continue
                now, p = time.monotonic(), message.partition()
                _kind, input_ms = message.timestamp()  # the input record's time: when it was produced
                with self._lock:
                    previous = max(self.last.get(p, self._since), self._since)
                    self.max_gap[p] = max(self.max_gap.get(p, 0.0), now - previous)
                    self.last[p] = now
                    self.input_ms[p] = max(self.input_ms.get(p, 0), input_ms)

    def mark(self) -> float:
        with self._lock:
            self._since = time.monotonic()
            self.max_gap = {}
            return self._since

    def all_processing_since(self, wall_s: float) -> bool:
        """Every partition has output for an input produced after `wall_s` (time.time()): its task
        processes again (output the watch reads late, from before an event, does not count)."""
        with self._lock:
            at = int(wall_s * 1000)
            return len(self.input_ms) == PARTITIONS and all(v > at for v in self.input_ms.values())

    def longest_stall(self) -> float:
        with self._lock:
            now = time.monotonic()
            gaps = [
                max(self.max_gap.get(p, 0.0), now - self.last.get(p, self._since)) for p in range(PARTITIONS)
            ]
            return max(gaps)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._consumer.close()


def feed(bootstrap: str, topic: str, keys: int, rate: float, stop: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 5})
    interval = 1.0 / rate
    rng = random.Random(7)
    while not stop.is_set():
        producer.produce(topic, key=f"k{rng.randrange(keys)}".encode(), value=b"v")
        producer.poll(0)
        time.sleep(interval)
    producer.flush(30)


def fill(bootstrap: str, topic: str, keys: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 50})
    for i in range(keys):
        while True:
            try:
                producer.produce(topic, key=f"k{i}".encode(), value=b"v")
                break
            except BufferError:  # librdkafka's queue is full: let deliveries drain it
                producer.poll(0.1)
        if i % 10000 == 0:
            producer.poll(0)
    producer.flush(60)


def input_lag(bootstrap: str, group: str, topic: str) -> int:
    """Input records the application's group has not committed yet (a consumer that never subscribes
    reads the group's offsets without joining it)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        try:
            committed = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
        except KafkaException:  # a loaded machine: ask again on the next round
            return sys.maxsize
        lag = 0
        for tp in committed:
            _low, high = consumer.get_watermark_offsets(tp, timeout=10)
            lag += high - max(tp.offset, 0)
        return lag
    finally:
        consumer.close()


def wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


def measure(
    label: str, fleet: list[Instance], every: list[Instance], watch: OutputWatch, event: Any
) -> tuple[str, float, float]:
    """Run `event`, wait until the `fleet` is ready and every partition produced again; the stall and the
    records restored meanwhile (over `every` instance that ran)."""
    before = sum(i.restored() + i.restored_before_exit for i in every)
    watch.mark()
    event()
    wait(lambda: all(i.ready() for i in fleet), 300, f"{label}: instances ready")
    settled = time.time()
    wait(lambda: watch.all_processing_since(settled), 300, f"{label}: every partition processing")
    stall = watch.longest_stall()
    time.sleep(1.0)
    after = sum(i.restored() + i.restored_before_exit for i in every)
    print(f"  {label:<28} longest stall {stall:6.1f} s   restored {after - before:8.0f} records", flush=True)
    return label, stall, after - before


def run(bootstrap: str, keys: int, rate: float, tree: str) -> None:
    app_id = f"placement-{uuid.uuid4().hex[:6]}"
    source, sink = f"{app_id}-in", f"{app_id}-out"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [NewTopic(t, num_partitions=PARTITIONS, replication_factor=1) for t in (source, sink)]
    ).values():
        future.result(60)
    fill(bootstrap, source, keys)
    python_path = f"{tree}/runtime:{ROOT}" if tree else str(ROOT)
    env = {"WC_INPUT": source, "WC_OUTPUT": sink, "PYTHONPATH": python_path}
    props = {
        "application.id": app_id,
        "bootstrap.servers": bootstrap,
        "processing.guarantee": "exactly_once_v2",
        "num.standby.replicas": 1,
        "consumer.session.timeout.ms": 6000,
        "consumer.heartbeat.interval.ms": 500,
        "metrics.host": "127.0.0.1",
    }
    workdir = Path(tempfile.mkdtemp(prefix="bench-placement-"))
    pods = [Instance(f"pod-{i}", workdir, props, env) for i in range(4)]
    three = pods[:3]
    stop = threading.Event()
    feeder = threading.Thread(target=feed, args=(bootstrap, source, keys, rate, stop), daemon=True)
    watch: OutputWatch | None = None
    try:
        for pod in three:
            pod.start()
        wait(lambda: all(p.ready() for p in three), 600, "three instances ready (initial restore)")
        feeder.start()
        watch = OutputWatch(bootstrap, sink)
        wait(lambda: input_lag(bootstrap, app_id, source) < rate * 2, 900, "the filled input processed")
        flowing_from = time.time()
        wait(lambda: watch.all_processing_since(flowing_from), 120, "output flowing")
        time.sleep(15)  # standbys placed and caught up
        print(f"==> {'tree ' + tree if tree else 'this tree'}: {keys} keys, {rate:.0f} records/s", flush=True)
        measure("kill -9 pod-1", [pods[0], pods[2]], pods, watch, lambda: pods[1].stop(signal.SIGKILL))
        measure("restart pod-1 (its state)", three, pods, watch, pods[1].start)
        time.sleep(10)
        measure("scale-out 3 -> 4", pods, pods, watch, pods[3].start)
        time.sleep(10)
        measure("scale-in 4 -> 3", three, pods, watch, lambda: pods[3].stop(signal.SIGTERM))
        time.sleep(10)

        def rolling() -> None:
            for pod in three:
                pod.stop(signal.SIGTERM)
                pod.start()
                wait(pod.ready, 300, f"{pod.name} ready after its restart")

        measure("rolling restart of 3", three, pods, watch, rolling)
    finally:
        stop.set()
        for pod in pods:
            pod.stop(signal.SIGTERM)
        if watch is not None:
            watch.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=120_000)
    parser.add_argument("--rate", type=float, default=600.0, help="input records/s during the events")
    parser.add_argument("--tree", default="", help="run the instances from this source tree")
    parser.add_argument("--bootstrap", default="")
    args = parser.parse_args()
    os.environ.setdefault("KAFKA_HEAP_OPTS", "-Xmx512m")
    with bench_broker(args.bootstrap) as (bootstrap, _broker):
        run(bootstrap, args.keys, args.rate, args.tree)


if __name__ == "__main__":
    main()
