"""`make run`: start a local broker, create the topics, run word count with a generator, show counts.

Everything is local: the broker is the project's own KRaft broker (tests/harness/kafka_broker.py, jars
cached under ~/.cache/kappaflow), the app is `examples.wordcount:build_topology` run by KafkaStreams in
this process, and a small generator writes sentences to `wordcount-input`. Every two seconds the most
frequent words (read back from `wordcount-output`) are printed, so you watch the counts change. The
broker is stopped on exit unless it was already running or `--keep-broker` is given.

    python examples/run_wordcount.py [--seconds 30] [--port 9092] [--keep-broker] [--kafka-dir .run/kafka]
"""

from __future__ import annotations

import argparse
import random
import struct
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # noqa: E402

from examples.wordcount import INPUT_TOPIC, OUTPUT_TOPIC, build_topology  # noqa: E402
from kappaflow.runner import KafkaStreams, State  # noqa: E402
from kappaflow.runner.logs import configure_logging  # noqa: E402

LOG_FILE = ROOT / ".run" / "logs" / "wordcount.log"

SENTENCES = [
    "the quick brown fox jumps over the lazy dog",
    "kafka streams for python",
    "a stream is a table is a stream",
    "the log is the source of truth",
    "state lives in rocksdb backed by a changelog",
]


def broker(command: str, port: int, data_dir: Path) -> str:
    args = [sys.executable, "-m", "tests.harness.kafka_broker", command, "--dir", str(data_dir)]
    if command == "start":
        args += ["--port", str(port)]
    result = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=False)
    sys.stderr.write(result.stderr)
    if command == "start" and result.returncode != 0:
        raise SystemExit(f"could not start the broker:\n{result.stdout}{result.stderr}")
    return result.stdout


def bootstrap_address(start_output: str) -> str:
    """The address `kafka_broker start` printed as its last line, whether it started the broker or found it
    already running (`make kafka-up` first): anything but host:port there is an error, never an address."""
    lines = start_output.strip().splitlines()
    last = lines[-1].strip() if lines else ""
    host, _, port = last.rpartition(":")
    if not host or " " in last or not port.isdigit():
        raise SystemExit(f"could not read the broker address from its start output:\n{start_output}")
    return last


def ensure_topics(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = admin.list_topics(timeout=15).topics
    new = [
        NewTopic(t, num_partitions=3, replication_factor=1)
        for t in (INPUT_TOPIC, OUTPUT_TOPIC)
        if t not in existing
    ]
    for _name, future in admin.create_topics(new).items() if new else []:
        future.result(timeout=30)
    if new:
        print(f"==> created topics {', '.join(t.topic for t in new)}")


def generate(bootstrap: str, stop: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    while not stop.wait(0.2):
        producer.produce(INPUT_TOPIC, value=random.choice(SENTENCES).encode())
        producer.poll(0)
    producer.flush(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="run time; 0 runs until Ctrl-C")
    parser.add_argument("--port", type=int, default=9092)
    parser.add_argument("--keep-broker", action="store_true")
    parser.add_argument("--kafka-dir", type=Path, default=ROOT / ".run" / "kafka", help="broker data dir")
    parser.add_argument("--state-dir", type=Path, default=ROOT / ".run" / "state", help="the app's state.dir")
    args = parser.parse_args()
    # The app's full log goes to a file; the console only gets warnings, so the counts stay readable.
    configure_logging(file=LOG_FILE, console_level="WARNING")
    data_dir = args.kafka_dir
    already = (
        subprocess.run(
            [sys.executable, "-m", "tests.harness.kafka_broker", "status", "--dir", str(data_dir)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        ).returncode
        == 0
    )
    output = broker("start", args.port, data_dir)
    bootstrap = bootstrap_address(output)
    print(f"==> broker at {bootstrap}")
    stop = threading.Event()
    streams: KafkaStreams | None = None
    try:
        ensure_topics(bootstrap)
        streams = KafkaStreams(
            build_topology(),
            {
                "application.id": "wordcount-example",
                "bootstrap.servers": bootstrap,
                "state.dir": str(args.state_dir),
                "commit.interval.ms": 1000,
                "metrics.host": "127.0.0.1",
                "metrics.port": 0,
            },
        )
        streams.start()
        metrics = f"http://127.0.0.1:{streams.metrics_port}/metrics"
        print(f"==> word count started: metrics {metrics}, log {LOG_FILE.relative_to(ROOT)}")
        if not streams.wait_until(State.RUNNING, 60):
            raise SystemExit(f"word count did not start: {streams.state.value} {streams.error or ''}")
        generator = threading.Thread(target=generate, args=(bootstrap, stop), daemon=True)
        generator.start()
        show_counts(bootstrap, args.seconds)
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        if streams is not None:
            streams.close(30)
        if not already and not args.keep_broker:
            print(broker("stop", args.port, data_dir).strip())
    return 0


def show_counts(bootstrap: str, seconds: float) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"viewer-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([OUTPUT_TOPIC])
    counts: dict[str, int] = {}
    deadline = time.monotonic() + seconds if seconds > 0 else float("inf")
    next_print = time.monotonic() + 2
    try:
        while time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.2):
                if msg.error() is None and msg.key() is not None and msg.value() is not None:
                    counts[msg.key().decode()] = struct.unpack(">q", msg.value())[0]
            if time.monotonic() >= next_print:
                next_print += 2
                top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:8]
                print(
                    "  ".join(f"{word}={count}" for word, count in top) or "(waiting for counts)", flush=True
                )
    finally:
        consumer.close()


if __name__ == "__main__":
    sys.exit(main())
