"""Assigning again the partitions whose committed offsets librdkafka never fetched, on a real broker.

librdkafka's stuck state (confluentinc/librdkafka#5586: an OffsetFetch failed as a whole with
NOT_COORDINATOR is never asked again) needs the group coordinator to move during the fetch; the cluster
chaos test meets it by chance. Here the group's first assignment never reaches the consumer's
fetcher, so its partitions deliver nothing, as in librdkafka's stuck state, and the stream thread is
handed that error in place of a record, as librdkafka queues it (then again while its partitions
deliver). The whole application must count every input exactly once:
the partitions that delivered nothing are assigned again at their committed offsets (the native reader
reopened on them), the others keep their positions. Without the refetch nothing is counted."""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, TopicPartition

from kappaflow.runner import KafkaStreams, rebalance, routing, thread
from tests.kafka.streams_support import fast_config, wait_running
from tests.kafka.test_native_input_queues import (
    BULK,
    PARTITIONS,
    _consumer,
    _fill,
    _topic,
    bulk_count_topology,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

FETCH_FAILED = 'Failed to fetch committed offsets for 0 partition(s) in group "app": Broker: Not coordinator'


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_a_failed_offset_fetch_is_fetched_again_and_every_input_counts_once(
    kafka_bootstrap: str, tmp_path: Path, guarantee: str, monkeypatch: Any, caplog: pytest.LogCaptureFixture
) -> None:
    source = f"refetch-{uuid.uuid4().hex[:8]}"
    _topic(kafka_bootstrap, source)
    _fill(kafka_bootstrap, source)
    app_id = f"{source}-app"
    _topic(kafka_bootstrap, f"{app_id}-out")
    calls = {"assignments": 0, "injected": 0}
    open_and_assign = rebalance.RebalanceHandler._open_and_assign

    def assigning(handler: Any, consumer: Any, partitions: Any) -> None:
        calls["assignments"] += 1
        if calls["assignments"] > 1:
            open_and_assign(handler, consumer, partitions)
        else:
            # the group's first assignment stands (the application owns its tasks) but no fetcher starts,
            # as when librdkafka never fetches its offsets: those partitions deliver nothing
            consumer.assign([])

    def injecting_router(core: Any, on_error: Any) -> Any:
        route = routing.router(core, on_error)

        def injected(messages: list[Any]) -> Any:
            # the error once the first assignment stands, then in batches that carry records (where
            # every partition delivers: nothing to assign again), six times in all
            if calls["assignments"] and (calls["injected"] == 0 or messages) and calls["injected"] < 6:
                calls["injected"] += 1
                on_error(KafkaError(KafkaError.NOT_COORDINATOR, FETCH_FAILED))
            return route(messages)

        return injected

    monkeypatch.setattr(rebalance.RebalanceHandler, "_open_and_assign", assigning)
    monkeypatch.setattr(thread, "router", injecting_router)
    caplog.set_level(logging.WARNING, logger="kappaflow.runner.rebalance")
    config = fast_config(
        kafka_bootstrap, app_id, str(tmp_path), **{"processing.guarantee": guarantee, "metrics.port": -1}
    )
    app = KafkaStreams(bulk_count_topology(source, f"{app_id}-out"), config)
    app.start()
    out = _consumer(kafka_bootstrap, "read_committed")
    updates: list[tuple[bytes, int]] = []
    try:
        wait_running(app, timeout=120)
        out.assign([TopicPartition(f"{app_id}-out", p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 120
        while len({k for k, _ in updates}) < BULK and time.monotonic() < deadline:
            for m in out.consume(1000, 0.5):
                if m.error() is None:
                    updates.append((m.key(), int.from_bytes(m.value(), "big")))
        # a moment more: a record counted twice would show as a second update of its key
        end = time.monotonic() + 3
        while time.monotonic() < end:
            for m in out.consume(1000, 0.5):
                if m.error() is None:
                    updates.append((m.key(), int.from_bytes(m.value(), "big")))
    finally:
        out.close()
        assert app.close(30)
    assert calls["injected"] >= 1
    refetched = [r.getMessage() for r in caplog.records if "assigning them again" in r.getMessage()]
    assert refetched, "the injected errors assigned nothing again"
    # grouped by key without a repartition: each partition holds its own copy of each of the BULK keys
    # and counts it once, so every key's one update (to 1) comes once per partition
    assert len({k for k, _ in updates}) == BULK
    assert Counter(updates) == {(k, 1): PARTITIONS for k, _ in updates}, "an input was lost or counted twice"
