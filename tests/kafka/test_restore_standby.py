"""State survives instances: restore from the changelog, checkpoints, and standby replicas."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from kappaflow.runner import KafkaStreams
from tests.kafka.streams_support import (
    fast_config,
    latest_counts,
    produce_lines,
    read_topic,
    wait_for,
    wait_running,
    wordcount_topology,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]


def distinct_lines(n: int, prefix: str) -> list[str]:
    """Many distinct words, so the changelog is long and a full restore is clearly bigger than a tail."""
    return [f"{prefix}{i} {prefix}{i % 50} common" for i in range(n)]


def counts_of(lines: list[str]) -> dict[str, int]:
    return dict(Counter(w for line in lines for w in line.split()))


def restored(app: KafkaStreams) -> float:
    return app.metrics.counter("restored-records-total")


def test_restart_restores_state_from_the_changelog(kafka_bootstrap, kafka_topics, tmp_path):
    source = kafka_topics("rs-in", partitions=2)
    sink = kafka_topics("rs-out", partitions=2)
    app_id = f"rs-{uuid.uuid4().hex[:8]}"
    first = distinct_lines(300, "w")
    app = KafkaStreams(
        wordcount_topology(source, sink), fast_config(kafka_bootstrap, app_id, str(tmp_path / "a"))
    )
    app.start()
    try:
        wait_running(app)
        produce_lines(kafka_bootstrap, source, first)
        wait_for(
            lambda: latest_counts(read_topic(kafka_bootstrap, sink, timeout=5)) == counts_of(first),
            60,
            "counts",
        )
    finally:
        assert app.close(30)

    # Same state directory: the checkpoint covers everything, nothing is restored.
    same = KafkaStreams(
        wordcount_topology(source, sink), fast_config(kafka_bootstrap, app_id, str(tmp_path / "a"))
    )
    same.start()
    try:
        wait_running(same)
        assert restored(same) == 0
    finally:
        assert same.close(30)

    # A fresh state directory: every store is rebuilt from its changelog, and counting continues from it.
    fresh = KafkaStreams(
        wordcount_topology(source, sink), fast_config(kafka_bootstrap, app_id, str(tmp_path / "b"))
    )
    fresh.start()
    try:
        wait_running(fresh)
        assert restored(fresh) >= len(counts_of(first))  # at least one changelog record per word
        second = distinct_lines(50, "w")
        produce_lines(kafka_bootstrap, source, second)
        wait_for(
            lambda: latest_counts(read_topic(kafka_bootstrap, sink, timeout=5)) == counts_of(first + second),
            60,
            "counts continued from restored state",
        )
        assert fresh.metrics.gauge("restore-remaining-records") == 0
    finally:
        assert fresh.close(30)


def test_standby_failover_restores_far_fewer_records(kafka_bootstrap, kafka_topics, tmp_path):
    source = kafka_topics("sb-in", partitions=2)
    sink = kafka_topics("sb-out", partitions=2)
    app_id = f"sb-{uuid.uuid4().hex[:8]}"
    lines = distinct_lines(1500, "s")

    def instance(name: str, standbys: int) -> KafkaStreams:
        config = fast_config(
            kafka_bootstrap, app_id, str(tmp_path / name), **{"num.standby.replicas": standbys}
        )
        return KafkaStreams(wordcount_topology(source, sink), config)

    a, b = instance("a", 1), instance("b", 1)
    a.start()
    b.start()
    try:
        wait_for(
            lambda: bool(a.local_task_ids()[0]) and bool(b.local_task_ids()[0]), 60, "two active instances"
        )
        wait_running(a, b)
        produce_lines(kafka_bootstrap, source, lines)
        wait_for(
            lambda: latest_counts(read_topic(kafka_bootstrap, sink, timeout=5)) == counts_of(lines),
            90,
            "counts",
        )
        # the counting sub-topology's tasks of b have standbys on a (and vice versa)
        b_stateful = [t for t in b.local_task_ids()[0] if t.startswith("1_")]
        wait_for(lambda: set(b_stateful) <= set(a.local_task_ids()[1]), 30, "standbys on a for b's tasks")
        wait_for(
            lambda: a.metrics.counter("standby-updated-records-total") > 0, 30, "standbys tailing changelogs"
        )
        before = restored(a)
        assert b.close(30)
        wait_for(lambda: len(a.local_task_ids()[0]) == 4, 60, "a owns every task")
        wait_running(a)
        failover_restored = restored(a) - before
    finally:
        a.close(30)
        b.close(30)

    # The same failover without a standby: a fresh instance restores the whole changelog.
    c = instance("c", 0)
    c.start()
    try:
        wait_running(c)
        full_restore = restored(c)
    finally:
        c.close(30)
    print(f"standby failover restored {failover_restored:.0f} records; full restore {full_restore:.0f}")
    assert full_restore >= len(counts_of(lines))
    assert failover_restored * 10 <= full_restore, (failover_restored, full_restore)
