"""A task that reads several partitions (a stream-table join) waits for the one that lags (KIP-695).

Kafka Streams processes a join task's records in timestamp order across its partitions, and when one
partition has nothing buffered it waits while the broker still has data for it (`max.task.idle.ms`
0, the default) instead of running ahead on the other. Here the table's records all come before the
stream's in time but need many fetches to arrive: with the wait every stream record finds its table
row; without it (-1) the stream side is processed against a half-loaded table.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from kappaflow import StreamsBuilder, serdes
from kappaflow.runner import KafkaStreams
from tests.kafka.streams_support import fast_config, read_topic, wait_for, wait_running

pytestmark = pytest.mark.kafka

S = serdes.String()
TABLE_ROWS = 20_000
STREAM_RECORDS = 200


def _produce_timed(
    bootstrap: str, topic: str, records: list[tuple[str, str, int]], batch_bytes: int = 16384
) -> None:
    """`batch_bytes`: the producer's batch size. A fetch returns at least one whole batch per partition,
    so a small `max.partition.fetch.bytes` trickles a partition in only if its batches are small too."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": batch_bytes})
    for i, (key, value, timestamp) in enumerate(records):
        producer.produce(topic, key=key.encode(), value=value.encode(), timestamp=timestamp)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def _join_topology(stream: str, table: str, out: str, left: bool) -> Any:
    builder = StreamsBuilder()
    rows = builder.table(table, key_serde=S, value_serde=S, materialized="rows")
    clicks = builder.stream(stream, key_serde=S, value_serde=S)
    joined = (clicks.left_join if left else clicks.join)(rows, lambda click, row: f"{click}+{row}")
    joined.to(out, key_serde=S, value_serde=S)
    return builder.build()


def _run_join(
    bootstrap: str, topics: Any, tmp_path: Path, idle_ms: int, table_rows: int, fetch_bytes: int = 16384
) -> tuple[list[Any], KafkaStreams]:
    """`fetch_bytes` per partition and fetch: small, the table trickles in while the stream is there."""
    stream, table, out = topics("clicks"), topics("rows"), topics("joined")
    # Recent timestamps: records dated 1970 are deleted by the broker's next retention check (every 5
    # minutes), which on a broker up for a while lands in the middle of the test.
    base = int(time.time() * 1000) - 3_600_000
    _produce_timed(bootstrap, table, [(f"k{i}", f"row{i}", base + i) for i in range(table_rows)], fetch_bytes)
    # every click is later than every row and joins one of the last rows written
    _produce_timed(
        bootstrap,
        stream,
        [(f"k{TABLE_ROWS - 1 - i}", f"click{i}", base + TABLE_ROWS + i) for i in range(STREAM_RECORDS)],
        fetch_bytes,
    )
    config = fast_config(
        bootstrap,
        f"idle-{uuid.uuid4().hex[:6]}",
        str(tmp_path),
        **{"max.task.idle.ms": idle_ms, "consumer.max.partition.fetch.bytes": fetch_bytes},
    )
    app = KafkaStreams(_join_topology(stream, table, out, left=table_rows == 0), config)
    app.start()
    try:
        wait_running(app)
        total = table_rows + STREAM_RECORDS
        wait_for(lambda: app.metrics.counter("records-processed-total") >= total, 60, f"{total} processed")
        return read_topic(bootstrap, out, timeout=10), app
    finally:
        app.close(30)


def test_join_waits_for_the_lagging_table_partition(
    kafka_bootstrap: str, kafka_topics: Any, tmp_path: Path
) -> None:
    joined, _ = _run_join(kafka_bootstrap, kafka_topics, tmp_path, idle_ms=0, table_rows=TABLE_ROWS)
    assert len(joined) == STREAM_RECORDS
    assert {r.value().decode() for r in joined} == {
        f"click{i}+row{TABLE_ROWS - 1 - i}" for i in range(STREAM_RECORDS)
    }


def test_without_idling_the_stream_runs_ahead_of_the_table(
    kafka_bootstrap: str, kafka_topics: Any, tmp_path: Path
) -> None:
    """The control: `max.task.idle.ms=-1` (never wait) loses joins here, so the test above is the wait's."""
    # ~30 table rows per fetch against the whole stream in a few: with no wait, the stream's records are
    # processed while most of the table is still on the broker, however fast the machine
    joined, app = _run_join(
        kafka_bootstrap, kafka_topics, tmp_path, idle_ms=-1, table_rows=TABLE_ROWS, fetch_bytes=1024
    )
    assert len(joined) < STREAM_RECORDS
    assert app.metrics.counter("enforced-processing-total") > 0


def test_an_empty_caught_up_table_does_not_hold_the_stream_back(
    kafka_bootstrap: str, kafka_topics: Any, tmp_path: Path
) -> None:
    """Lag 0 on the empty side: with the default idle time of 0 the stream is processed at once."""
    joined, _ = _run_join(kafka_bootstrap, kafka_topics, tmp_path, idle_ms=0, table_rows=0)
    assert len(joined) == STREAM_RECORDS
    assert all(r.value().decode().endswith("+None") for r in joined)
