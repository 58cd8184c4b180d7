"""A restart under exactly_once_v2 fences the transaction its killed predecessor left open, and
restoration reads the changelog to its high watermark, past such transactions (KAFKA-10167).

The minimal case of issue 11: instance A dies with a transaction open on the changelog, which pins the
last stable offset; B takes over and commits more changelog transactions above it; C takes over from B.
A read_committed restore that stops at the first end-of-partition (the LSO) gives C the state of before B
while the input resumes at B's committed offsets: B's updates are silently gone and counts go backwards.
The kill loop (test_chaos.py) covers that case; this test covers the fencing that bounds the wait.
"""

from __future__ import annotations

import signal
import struct
import uuid
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.kafka.streams_support import fast_config, produce, read_topic, start_cli_app, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

APP = "tests.kafka.apps:keycount"


def _sequences(bootstrap: str, topic: str, committed_only: bool = True) -> dict[str, list[int]]:
    result: dict[str, list[int]] = defaultdict(list)
    for msg in read_topic(bootstrap, topic, timeout=3, committed_only=committed_only):
        result[msg.key().decode()].append(struct.unpack(">q", msg.value())[0])
    return result


def _committed_input(bootstrap: str, group: str, topic: str) -> int:
    """The group's committed offset on `topic`-0 (B's progress: A's open transaction hides the output)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return int(consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset)
    finally:
        consumer.close()


def test_restart_fences_the_transaction_its_killed_predecessor_left_open(
    kafka_bootstrap, kafka_topics, tmp_path
):
    """No group.instance.id: the transactional id persisted in state.dir makes the restart fence A's open
    transaction at once (instead of waiting out its 5-minute timeout), and restoration reads past it."""
    source = kafka_topics("eosr-in")
    sink = kafka_topics("eosr-out")
    app_id = f"eosr-{uuid.uuid4().hex[:8]}"
    changelog = f"{app_id}-counts-changelog"
    env = {"WC_INPUT": source, "WC_OUTPUT": sink}

    def props(**extra: object) -> dict[str, object]:
        return fast_config(
            kafka_bootstrap,
            app_id,
            str(tmp_path / "state"),
            **{"processing.guarantee": "exactly_once_v2", "statestore.cache.max.bytes": 0, **extra},
        )

    procs = []
    try:
        # A never commits: its first transaction stays open on the changelog and the output when it is
        # killed, for up to 5 minutes (its transaction timeout) unless something fences it.
        held = {"commit.interval.ms": 600000, "producer.transaction.timeout.ms": 300000}
        a = start_cli_app(APP, props(**held), tmp_path, env, name="a")
        procs.append(a)
        produce(kafka_bootstrap, source, [(b"w", b"x")] * 50)
        wait_for(
            lambda: len(read_topic(kafka_bootstrap, changelog, timeout=8)) > 0, 90, "A's changelog writes"
        )
        a.send_signal(signal.SIGKILL)
        a.wait(10)

        b = start_cli_app(APP, props(), tmp_path, env, name="b")
        procs.append(b)
        produce(kafka_bootstrap, source, [(b"w", b"x")] * 50)
        wait_for(lambda: _committed_input(kafka_bootstrap, app_id, source) >= 100, 90, "B committed 100")
        wait_for(
            lambda: max(_sequences(kafka_bootstrap, sink).get("w", [0])) >= 100, 60, "B's output visible"
        )
        sequence = _sequences(kafka_bootstrap, sink)["w"]
        assert sequence == list(range(1, 101)), f"lost or repeated updates: {sequence[-60:]}"
        b.send_signal(signal.SIGTERM)
        assert b.wait(45) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
