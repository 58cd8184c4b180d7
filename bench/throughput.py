"""Throughput on one local broker: a raw confluent-kafka consume -> produce loop vs kappaflow word count.

Not a test: it prints records/s and the ratio kappaflow / raw loop, measured in the same run on the same
broker and input, so machine speed cancels out. The input is N lines of W words in a P-partition topic,
written once; each run uses a fresh consumer group and output topic. A hand-written word count (dict
state, no repartition, no changelog, no guarantees) is printed too, to separate the cost of Python
from the cost of the framework. "records/s" is input
lines per second, from the first record processed to the last one processed (start-up excluded).

    python bench/throughput.py [--lines 50000] [--partitions 4] [--bootstrap host:port]

Without --bootstrap it starts the project's broker (tests/harness/kafka_broker.py) on a free port and
stops it at the end.
"""

from __future__ import annotations

import argparse
import random
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # noqa: E402
from tests.kafka.streams_support import wordcount_topology  # noqa: E402

from kappaflow.runner import KafkaStreams, State  # noqa: E402

WORDS = [f"w{i}" for i in range(1000)]


def create_topic(admin: AdminClient, name: str, partitions: int) -> None:
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(30)


def fill(bootstrap: str, topic: str, lines: int, words: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20})
    rng = random.Random(7)
    for i in range(lines):
        producer.produce(topic, value=" ".join(rng.choice(WORDS) for _ in range(words)).encode())
        if i % 10000 == 0:
            producer.poll(0)
    producer.flush(60)


def raw_loop(bootstrap: str, source: str, sink: str, lines: int) -> float:
    """Consume each line and produce it unchanged, committing every 10k records: the floor for Python."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"raw-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "partitioner": "murmur2_random"})
    consumer.subscribe([source])
    seen = 0
    started = 0.0
    while seen < lines:
        for msg in consumer.consume(1000, 0.5):
            if msg.error() is not None:
                continue
            if not started:
                started = time.perf_counter()
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
    consumer.close()
    return lines / elapsed


def handwritten_wordcount(bootstrap: str, source: str, sink: str, lines: int) -> float:
    """Word count written by hand on confluent-kafka: split, count in a dict, produce each new count.

    No repartition topic, no state store, no changelog and no fault tolerance, so it is only correct
    with one consumer: it shows what the framework's guarantees cost over the least Python can do.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"hand-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "partitioner": "murmur2_random"})
    consumer.subscribe([source])
    pack = struct.Struct(">q").pack
    counts: dict[str, int] = {}
    seen = 0
    started = 0.0
    while seen < lines:
        for msg in consumer.consume(1000, 0.5):
            if msg.error() is not None:
                continue
            if not started:
                started = time.perf_counter()
            for word in msg.value().decode().lower().split():
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
    consumer.close()
    return lines / elapsed


def kappaflow_run(bootstrap: str, source: str, sink: str, lines: int, words: int, guarantee: str) -> float:
    expected = lines + lines * words  # both sub-topologies process: lines, then words
    state_dir = tempfile.mkdtemp(prefix="kappaflow-bench-")
    config: dict[str, Any] = {
        "application.id": f"bench-{guarantee}-{uuid.uuid4().hex[:6]}",
        "bootstrap.servers": bootstrap,
        "state.dir": state_dir,
        "processing.guarantee": guarantee,
        "metrics.port": -1,
    }
    app = KafkaStreams(wordcount_topology(source, sink), config)
    app.start()
    try:
        started = 0.0
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            done = app.metrics.counter("records-processed-total")
            if done and not started:
                started = time.perf_counter()
            if done >= expected:
                break
            if app.state is State.ERROR:
                raise RuntimeError(f"kappaflow failed: {app.error}")
            time.sleep(0.02)
        elapsed = time.perf_counter() - started
    finally:
        app.close(60)
    return lines / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=50000)
    parser.add_argument("--words", type=int, default=3, help="words per line")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--bootstrap", default="")
    args = parser.parse_args()
    broker = None
    bootstrap = args.bootstrap
    if not bootstrap:
        from tests.harness.kafka_broker import LocalKafkaBroker
        from tests.harness.kafka_fixtures import free_port

        broker = LocalKafkaBroker(
            free_port(), Path(tempfile.mkdtemp(prefix="kafka-bench-")), controller_port=free_port()
        )
        print("==> starting the broker", flush=True)
        broker.start()
        bootstrap = broker.bootstrap_servers
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        source = f"bench-in-{uuid.uuid4().hex[:6]}"
        create_topic(admin, source, args.partitions)
        print(f"==> writing {args.lines} lines of {args.words} words to {source}", flush=True)
        fill(bootstrap, source, args.lines, args.words)
        results: dict[str, float] = {}
        for name in ("raw", "handwritten", "at_least_once", "exactly_once_v2"):
            sink = f"bench-out-{name}-{uuid.uuid4().hex[:6]}"
            create_topic(admin, sink, args.partitions)
            print(f"==> {name} ...", flush=True)
            if name == "raw":
                results[name] = raw_loop(bootstrap, source, sink, args.lines)
            elif name == "handwritten":
                results[name] = handwritten_wordcount(bootstrap, source, sink, args.lines)
            else:
                results[name] = kappaflow_run(bootstrap, source, sink, args.lines, args.words, name)
            print(f"    {results[name]:,.0f} lines/s", flush=True)
        raw = results["raw"]
        print()
        hand = results["handwritten"]
        print(f"{'run':<40}{'lines/s':>10}{'/ raw loop':>12}{'/ hand-written':>16}")
        rows = [
            ("raw consume->produce loop", raw),
            ("hand-written word count (no state)", hand),
            ("kappaflow word count at_least_once", results["at_least_once"]),
            ("kappaflow word count exactly_once_v2", results["exactly_once_v2"]),
        ]
        for label, value in rows:
            print(f"{label:<40}{value:>10,.0f}{value / raw:>12.2f}{value / hand:>16.2f}")
    finally:
        if broker is not None:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
