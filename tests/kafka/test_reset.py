"""`kappaflow reset`: input offsets to earliest, internal topics deleted, local state deleted."""

from __future__ import annotations

import re
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

from kappaflow.cli import main
from kappaflow.clients.admin import InternalTopicManager
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

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]


def test_reset_reprocesses_from_scratch(kafka_bootstrap, kafka_topics, tmp_path, monkeypatch, capsys):
    source = kafka_topics("reset-in", partitions=2)
    sink = kafka_topics("reset-out", partitions=2)
    app_id = f"reset-{uuid.uuid4().hex[:8]}"
    # no cache: every one of the 5 word occurrences emits a record, so each run adds exactly 5
    config = fast_config(
        kafka_bootstrap, app_id, str(tmp_path / "state"), **{"statestore.cache.max.bytes": 0}
    )
    lines = ["x y", "y z", "z"]
    expected = dict(Counter(w for line in lines for w in line.split()))
    produce_lines(kafka_bootstrap, source, lines)

    def run_once(total_records: int) -> None:
        app = KafkaStreams(wordcount_topology(source, sink), config)
        app.start()
        try:
            wait_running(app)
            wait_for(
                lambda: latest_counts(read_topic(kafka_bootstrap, sink, timeout=3)) == expected, 60, "counts"
            )
        finally:
            app.close(30)

    run_once(5)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    internal = [t for t in admin.list_topics(timeout=10).topics if t.startswith(app_id + "-")]
    assert len(internal) == 2  # the changelog and the repartition topic
    assert (Path(config["state.dir"]) / app_id).exists()

    properties = tmp_path / "app.properties"
    properties.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
    monkeypatch.setenv("WC_INPUT", source)
    monkeypatch.setenv("WC_OUTPUT", sink)
    assert main(["reset", "tests.kafka.apps:wordcount", "--config", str(properties)]) == 0
    printed = capsys.readouterr().out
    assert "deleted internal topics" in printed

    wait_for(
        lambda: not [t for t in admin.list_topics(timeout=10).topics if t.startswith(app_id + "-")],
        30,
        "internal topics deleted",
    )
    assert not (Path(config["state.dir"]) / app_id).exists()
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": app_id})
    committed = consumer.committed([TopicPartition(source, 0), TopicPartition(source, 1)], timeout=10)
    consumer.close()
    assert [tp.offset for tp in committed] == [0, 0]

    # Running again recomputes the same counts from scratch (not doubled on top of old state).
    run_once(10)
    records = read_topic(kafka_bootstrap, sink, timeout=3)
    assert len(records) == 10
    assert latest_counts(records) == expected


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_restart_with_old_state_after_reset_restores_instead_of_double_counting(
    kafka_bootstrap, kafka_topics, tmp_path, monkeypatch, capsys, caplog, guarantee
):
    """Two instances count; `kappaflow reset` runs on the first one's machine (its state deleted); the
    second restarts with its old state directory. Its stores' checkpoints point past the end of the
    recreated changelogs: they are wiped and restored (a WARNING names each), not counted on top of."""
    source = kafka_topics("reset2-in", partitions=2)
    sink = kafka_topics("reset2-out", partitions=2)
    app_id = f"reset2-{uuid.uuid4().hex[:8]}"
    extra = {"statestore.cache.max.bytes": 0, "processing.guarantee": guarantee}
    # static members: the range assignor then gives each instance the same partitions in both runs
    config_a = fast_config(
        kafka_bootstrap, app_id, str(tmp_path / "a"), **extra, **{"group.instance.id": "a"}
    )
    config_b = fast_config(
        kafka_bootstrap, app_id, str(tmp_path / "b"), **extra, **{"group.instance.id": "b"}
    )
    lines = ["the quick brown fox", "the rocks"]
    expected = dict(Counter(w for line in lines for w in line.split()))
    occurrences = sum(expected.values())  # no cache: one output record per word occurrence and run
    produce_lines(kafka_bootstrap, source, lines)
    properties = tmp_path / "app.properties"
    properties.write_text("".join(f"{k}={v}\n" for k, v in config_a.items()))
    monkeypatch.setenv("WC_INPUT", source)
    monkeypatch.setenv("WC_OUTPUT", sink)

    def run_both(total_records: int, while_running: Any = None) -> list[Any]:
        apps = [KafkaStreams(wordcount_topology(source, sink), c) for c in (config_a, config_b)]
        for app in apps:
            app.start()
        try:
            wait_running(*apps)
            wait_for(
                lambda: (
                    len(read_topic(kafka_bootstrap, sink, timeout=3, committed_only=True)) >= total_records
                ),
                90,
                f"{total_records} output records",
            )
            wait_for(
                lambda: all(list((tmp_path / d / app_id).glob("*/rocksdb/counts")) for d in "ab"),
                30,
                "both instances counting",
            )
            if while_running is not None:
                while_running()
        finally:
            for app in apps:
                app.close(30)
        return read_topic(kafka_bootstrap, sink, timeout=3, committed_only=True)

    def dry_run() -> None:
        assert main(["reset", "tests.kafka.apps:wordcount", "--config", str(properties), "--dry-run"]) == 0
        printed = capsys.readouterr().out
        assert f"WARNING: group '{app_id}' still has 2 active member(s)" in printed
        assert "would delete internal topics" in printed

    first = run_both(occurrences, dry_run)
    assert latest_counts(first) == expected
    stores_b = list((tmp_path / "b" / app_id).glob("*/rocksdb/counts"))
    assert stores_b, "the second instance kept counts of its own"

    # static members stay in the group until their session times out
    group = InternalTopicManager({"bootstrap.servers": kafka_bootstrap})
    wait_for(lambda: not group.group_members(app_id)[1], 30, "the group empty")
    assert main(["reset", "tests.kafka.apps:wordcount", "--config", str(properties)]) == 0
    printed = capsys.readouterr().out
    assert "start them with an empty state directory" in printed
    assert not (tmp_path / "a" / app_id).exists()
    assert (tmp_path / "b" / app_id).exists()  # another machine's state: out of reset's reach
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    wait_for(
        lambda: not [t for t in admin.list_topics(timeout=10).topics if t.startswith(app_id + "-")],
        30,
        "internal topics deleted",
    )

    # The second instance restarts first, alone: it owns every task, those of its old partitions with its
    # old stores. Then the first one joins (its state empty) and a line more is counted by both.
    caplog.set_level("WARNING", logger="kappaflow.tasks.state_manager")
    b = KafkaStreams(wordcount_topology(source, sink), config_b)
    a = KafkaStreams(wordcount_topology(source, sink), config_a)
    b.start()
    try:
        wait_running(b)
        wait_for(
            lambda: len(read_topic(kafka_bootstrap, sink, timeout=3, committed_only=True)) >= 2 * occurrences,
            90,
            "the input counted again",
        )
        second = read_topic(kafka_bootstrap, sink, timeout=3, committed_only=True)
        assert latest_counts(second) == expected  # the=2, quick=1: not 4, 2 (old counts + re-read input)
        a.start()
        wait_for(lambda: list((tmp_path / "a" / app_id).glob("*/rocksdb/counts")), 60, "the first instance")
        wait_running(a, b)
        produce_lines(kafka_bootstrap, source, ["the brown"])
        expected.update({"the": expected["the"] + 1, "brown": expected["brown"] + 1})
        wait_for(
            lambda: (
                latest_counts(read_topic(kafka_bootstrap, sink, timeout=3, committed_only=True)) == expected
            ),
            60,
            f"counts {expected}",
        )
    finally:
        a.close(30)
        b.close(30)
    wiped = [r.getMessage() for r in caplog.records if "checkpointed changelog offset" in r.getMessage()]
    assert wiped, "the second instance's stale stores were not detected"
    assert all(
        re.search(r"store counts partition \d: checkpointed changelog offset \d+ .* end \d+", m)
        for m in wiped
    ), wiped
