"""exactly_once_v2 survives `kill -9`: read_committed output holds every count exactly once, and the
restarted instance restores only the changelog tail its transactional stores had not committed."""

from __future__ import annotations

import signal
import struct
import threading
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from kappaflow.state.kv_bytes import RocksDBKeyValueBytesStore
from tests.harness.kafka_fixtures import free_port
from tests.kafka.streams_support import (
    fast_config,
    http_get,
    produce_lines,
    read_topic,
    start_cli_app,
    wait_committed,
    wait_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

VOCABULARY = [f"word{i}" for i in range(20)]


def _committed_records(bootstrap: str, topic: str, partition: int, start: int | None) -> int:
    """How many committed records `topic`-`partition` holds from `start` (None: the beginning) up to its
    last stable offset: with the killed instance's transaction still open, exactly what a restore reads."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"count-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING if start is None else start)])
    count = 0
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for msg in consumer.consume(500, 1.0):
                err = msg.error()
                if err is None:
                    count += 1
                elif err.code() == KafkaError._PARTITION_EOF:
                    return count
                else:
                    raise AssertionError(f"reading {topic}-{partition}: {err}")
        raise AssertionError(f"no end of {topic}-{partition} within 30 s")
    finally:
        consumer.close()


def _store_offset(state_dir: Path, task: str) -> int | None:
    """The changelog offset the killed instance's `counts` store committed (None: it never did)."""
    path = state_dir / task / "rocksdb" / "counts"
    if not path.exists():
        return None
    store = RocksDBKeyValueBytesStore("counts")
    store.open_at(path)
    try:
        return store.committed_changelog_offset()
    finally:
        store.close()


def _restored(metrics: str, task: str) -> float:
    """kappaflow_restored_records_total of one task, from a Prometheus text page (0 if it restored none)."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("kappaflow_restored_records_total") and f'task="{task}"' in line
    )


def test_kill_9_mid_run_keeps_exactly_once_counts(kafka_bootstrap, kafka_topics, tmp_path):
    source = kafka_topics("eos-in", partitions=2)
    sink = kafka_topics("eos-out", partitions=2)
    app_id = f"eos-{uuid.uuid4().hex[:8]}"
    port = free_port()
    props = fast_config(
        kafka_bootstrap,
        app_id,
        str(tmp_path / "state"),
        **{
            "processing.guarantee": "exactly_once_v2",
            "commit.interval.ms": 100,
            "statestore.cache.max.bytes": 0,  # every update is emitted, so counts must be 1, 2, 3, ...
            "group.instance.id": f"{app_id}-0",  # the restart fences the killed instance's transaction
            "metrics.port": port,
        },
    )
    env = {"WC_INPUT": source, "WC_OUTPUT": sink}
    changelog = f"{app_id}-counts-changelog"
    lines = [f"{VOCABULARY[i % 20]} {VOCABULARY[(i * 7) % 20]}" for i in range(4000)]
    process = start_cli_app("tests.kafka.apps:wordcount", props, tmp_path, env, name="first")
    restarted = None
    try:
        wait_for(lambda: http_get(port, "/health/ready")[0] == 200, 60, "first instance ready")

        def feed() -> None:
            for start in range(0, len(lines), 50):
                produce_lines(kafka_bootstrap, source, lines[start : start + 50])
                time.sleep(0.05)

        feeder = threading.Thread(target=feed)
        feeder.start()
        wait_for(
            lambda: len(read_topic(kafka_bootstrap, sink, timeout=2, committed_only=True)) > 2000,
            60,
            "some committed output before the crash",
        )
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        killed_at = len(read_topic(kafka_bootstrap, sink, timeout=2, committed_only=True))
        # What a restart must restore: per changelog partition, the committed records past the offset the
        # killed instance's store holds (its open transaction's records are aborted by the restart).
        state_dir = tmp_path / "state" / app_id
        offsets = {p: _store_offset(state_dir, f"1_{p}") for p in (0, 1)}
        tails = {p: _committed_records(kafka_bootstrap, changelog, p, offsets[p]) for p in (0, 1)}
        whole = {p: _committed_records(kafka_bootstrap, changelog, p, None) for p in (0, 1)}
        restarted = start_cli_app("tests.kafka.apps:wordcount", props, tmp_path, env, name="second")
        wait_for(lambda: http_get(port, "/health/ready")[0] == 200, 60, "restarted instance restored")
        metrics = http_get(port, "/metrics")[1]
        restored = {p: _restored(metrics, f"1_{p}") for p in (0, 1)}
        print(f"kill -9: changelog {whole}, store offsets {offsets}, tail {tails}, restored {restored}")
        assert restored == tails
        assert sum(tails.values()) < sum(whole.values()) // 4, "only the tail, not the whole changelog"
        feeder.join(60)
        expected = Counter(w for line in lines for w in line.split())
        total = sum(expected.values())
        assert killed_at < total, "the crash must happen mid-run"
        wait_committed(kafka_bootstrap, sink, total, 120, "all counts committed after the restart")
        records = read_topic(kafka_bootstrap, sink, expected=total + 1, timeout=5, committed_only=True)
        sequences: dict[str, list[int]] = defaultdict(list)
        for msg in records:
            sequences[msg.key().decode()].append(struct.unpack(">q", msg.value())[0])
        for word, count in expected.items():
            assert sequences[word] == list(range(1, count + 1)), word
        assert len(records) == total
        restarted.send_signal(signal.SIGTERM)
        assert restarted.wait(30) == 0
    finally:
        for proc in (process, restarted):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)
