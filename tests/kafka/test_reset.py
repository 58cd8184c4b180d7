"""`kappaflow reset`: input offsets to earliest, internal topics deleted, local state deleted."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

from kappaflow.cli import main
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
