"""exactly_once_v2: a fenced producer is replaced, the transaction aborted and the tasks rewound."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

from kappaflow.runner import KafkaStreams, State
from tests.kafka.streams_support import (
    assert_exact_counts,
    fast_config,
    produce_lines,
    wait_committed,
    wait_running,
    wordcount_topology,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]


def test_fenced_producer_rejoins_and_counts_stay_exact(kafka_bootstrap, kafka_topics, tmp_path):
    source = kafka_topics("fence-in", partitions=2)
    sink = kafka_topics("fence-out", partitions=2)
    app_id = f"fence-{uuid.uuid4().hex[:8]}"
    config = fast_config(
        kafka_bootstrap,
        app_id,
        str(tmp_path),
        **{
            "processing.guarantee": "exactly_once_v2",
            "statestore.cache.max.bytes": 0,
            "group.instance.id": "pod-0",
        },
    )
    first = [f"k{i % 5} k{i % 3}" for i in range(200)]
    second = [f"k{i % 4}" for i in range(100)]
    app = KafkaStreams(wordcount_topology(source, sink), config)
    app.start()
    try:
        wait_running(app)
        produce_lines(kafka_bootstrap, source, first)
        wait_committed(kafka_bootstrap, sink, 400, 60, "first")
        # A zombie with the same transactional.id bumps the epoch: the app's producer is now fenced.
        zombie = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{app_id}-pod-0"})
        zombie.init_transactions(30)
        produce_lines(kafka_bootstrap, source, second)
        total = 400 + 100
        wait_committed(kafka_bootstrap, sink, total, 60, "second")
        assert app.state is State.RUNNING
        assert app.metrics.counter("transaction-aborts-total") >= 1
    finally:
        app.close(30)
    assert_exact_counts(kafka_bootstrap, sink, first + second)
