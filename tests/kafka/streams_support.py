"""Helpers for the Kafka-tier runtime tests: produce input, read output, wait for conditions (bounded)."""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from kappaflow.runner import KafkaStreams, State


def produce(bootstrap: str, topic: str, records: Iterable[tuple[bytes | None, bytes | None]]) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 5})
    count = 0
    for key, value in records:
        producer.produce(topic, key=key, value=value)
        count += 1
        if count % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    return count


def produce_lines(bootstrap: str, topic: str, lines: Iterable[str]) -> int:
    return produce(bootstrap, topic, ((None, line.encode()) for line in lines))


def read_topic(
    bootstrap: str,
    topic: str,
    expected: int | None = None,
    timeout: float = 30.0,
    committed_only: bool = False,
) -> list[Any]:
    """Every record of `topic` from the beginning, until `expected` arrived or nothing new came for 2s.

    The reader assigns the topic's partitions itself (waiting for the topic to exist) rather than joining
    a group: a group join on a broker the other test lanes load took longer than a caller's 10 s budget,
    and the reader returned nothing (test_record_collector in CI)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if committed_only else "read_uncommitted",
        }
    )
    records: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        partitions = _partitions_of(consumer, topic, deadline)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        idle_since = time.monotonic()
        while partitions and time.monotonic() < deadline:
            batch = consumer.consume(500, 0.2)
            batch = [m for m in batch if m.error() is None]
            if batch:
                records.extend(batch)
                idle_since = time.monotonic()
            if expected is not None and len(records) >= expected:
                break
            if expected is None and records and time.monotonic() - idle_since > 2.0:
                break
    finally:
        consumer.close()
    return records


def _partitions_of(consumer: Consumer, topic: str, deadline: float) -> list[int]:
    """The partitions of `topic`, once its metadata shows it (up to `deadline`; none after it)."""
    while True:
        wait = max(0.1, min(5.0, deadline - time.monotonic()))
        found = consumer.list_topics(topic, timeout=wait).topics.get(topic)
        if found is not None and found.error is None and found.partitions:
            return sorted(found.partitions)
        if time.monotonic() >= deadline:
            return []
        time.sleep(0.1)


def latest_counts(records: Iterable[Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for msg in records:
        counts[msg.key().decode()] = struct.unpack(">q", msg.value())[0]
    return counts


def wait_for(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def wait_committed(bootstrap: str, topic: str, count: int, timeout: float, what: str) -> None:
    """Wait until `topic` holds at least `count` committed (read_committed) records."""
    wait_for(
        lambda: len(read_topic(bootstrap, topic, timeout=2, committed_only=True)) >= count, timeout, what
    )


def wait_running(*apps: KafkaStreams, timeout: float = 60.0) -> None:
    wait_for(lambda: all(a.state is State.RUNNING for a in apps), timeout, "RUNNING")


def fast_config(bootstrap: str, app_id: str, state_dir: str, **extra: Any) -> dict[str, Any]:
    """Settings that keep broker tests quick: short sessions, frequent commits."""
    config: dict[str, Any] = {
        "application.id": app_id,
        "bootstrap.servers": bootstrap,
        "state.dir": state_dir,
        "commit.interval.ms": 200,
        "consumer.session.timeout.ms": 6000,
        "consumer.heartbeat.interval.ms": 500,
        "metrics.host": "127.0.0.1",
        "metrics.port": 0,
    }
    config.update(extra)
    return config


def wordcount_topology(input_topic: str, output_topic: str, store: str = "counts") -> Any:
    """The examples/wordcount.py topology on test-specific topic names."""
    from examples.wordcount import split_words

    from kappaflow import Materialized, StreamsBuilder, serdes

    builder = StreamsBuilder()
    lines = builder.stream(input_topic, key_serde=serdes.String(), value_serde=serdes.String())
    grouped = lines.flat_map_values(split_words).group_by(
        lambda _key, word: word, key_serde=serdes.String(), value_serde=serdes.String()
    )
    counts = grouped.count(Materialized.as_(store).with_value_serde(serdes.Long()))
    counts.to_stream().to(output_topic, key_serde=serdes.String(), value_serde=serdes.Long())
    return builder.build()


def start_cli_app(
    app: str,
    properties: dict[str, Any],
    workdir: Any,
    env: dict[str, str] | None = None,
    name: str = "app",
    close_timeout: float = 60.0,
) -> Any:
    """`kappaflow run app --config <file>` as a child process (logs to <workdir>/<name>.log)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    config_file = workdir / f"{name}.properties"
    config_file.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
    log_file = open(workdir / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child process
    root = Path(__file__).resolve().parents[2]
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kappaflow.cli",
            "run",
            app,
            "--config",
            str(config_file),
            "--close-timeout",
            str(close_timeout),
        ],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root), **(env or {})},
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )
    log_file.close()
    return process


def kill_if_running(process: Any) -> None:
    """A test's cleanup of a `start_cli_app` process the test did not already stop (or that hung)."""
    if process.poll() is None:
        process.kill()
        process.wait(10)


def http_get(port: int, path: str) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError:
        return 0, ""


def assert_exact_counts(bootstrap: str, sink: str, lines: list[str]) -> None:
    """Per word, the committed output of a word count holds 1, 2, ... n: nothing lost, doubled or
    going backwards."""
    from collections import Counter, defaultdict

    expected = Counter(w for line in lines for w in line.split())
    sequences: dict[str, list[int]] = defaultdict(list)
    total = sum(expected.values())
    for msg in read_topic(bootstrap, sink, expected=total + 1, timeout=5, committed_only=True):
        sequences[msg.key().decode()].append(struct.unpack(">q", msg.value())[0])
    assert dict(sequences) == {w: list(range(1, n + 1)) for w, n in expected.items()}
