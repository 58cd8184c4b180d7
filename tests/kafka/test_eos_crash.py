"""exactly_once_v2 survives `kill -9`: read_committed output holds every count exactly once."""

from __future__ import annotations

import signal
import struct
import threading
import time
import uuid
from collections import Counter, defaultdict

import pytest

from tests.harness.kafka_fixtures import free_port
from tests.kafka.streams_support import (
    fast_config,
    http_get,
    produce_lines,
    read_topic,
    start_cli_app,
    wait_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

VOCABULARY = [f"word{i}" for i in range(20)]


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
    lines = [f"{VOCABULARY[i % 20]} {VOCABULARY[(i * 7) % 20]}" for i in range(4000)]
    process = start_cli_app("tests.kafka.apps:wordcount", props, tmp_path, env, name="first")
    restarted = None
    try:
        wait_for(lambda: http_get(port, "/health/ready")[0] == 200, 60, "first instance ready")

        def feed() -> None:
            for start in range(0, len(lines), 100):
                produce_lines(kafka_bootstrap, source, lines[start : start + 100])
                time.sleep(0.05)

        feeder = threading.Thread(target=feed)
        feeder.start()
        wait_for(
            lambda: len(read_topic(kafka_bootstrap, sink, timeout=2, committed_only=True)) > 500,
            60,
            "some committed output before the crash",
        )
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        killed_at = len(read_topic(kafka_bootstrap, sink, timeout=2, committed_only=True))
        restarted = start_cli_app("tests.kafka.apps:wordcount", props, tmp_path, env, name="second")
        feeder.join(60)
        expected = Counter(w for line in lines for w in line.split())
        total = sum(expected.values())
        assert killed_at < total, "the crash must happen mid-run"
        wait_for(
            lambda: len(read_topic(kafka_bootstrap, sink, timeout=2, committed_only=True)) >= total,
            120,
            "all counts committed after the restart",
        )
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
    log = (tmp_path / "second.log").read_text()
    assert "state left by a crashed exactly-once run" in log
