"""Splits (more Spark tasks than input partitions) change nothing: a stateless first stage cut into offset
ranges, and a keyed stateful stage after a repartition cut into key slots (kappaflow/spark/splits.py).

The topology's state is order-sensitive on purpose: a reduce that appends each value, so a chunk seen out
of offset order would show in the final state. Every group key comes from one input partition (it is the
record key), which makes the runtime's result deterministic too: the offset order of that partition.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest

from kappaflow import StreamsBuilder, serdes
from kappaflow.runner import KafkaStreams, State
from kappaflow.spark import reprocess
from tests.kafka.streams_support import fast_config
from tests.spark.support import (
    BASE_TS,
    latest_per_key,
    produce_records,
    read_all,
    run_streaming,
    wait_caught_up,
)

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.timeout(300)]


def appending_topology(source: str, sink: str) -> object:
    """filter (stateless) -> group_by (repartition) -> reduce appending values: order shows in the state."""
    builder = StreamsBuilder()
    stream = builder.stream(source, key_serde=serdes.String(), value_serde=serdes.String())
    grouped = stream.filter(lambda _key, value: not value.endswith("7")).group_by(
        lambda key, _value: key, key_serde=serdes.String(), value_serde=serdes.String()
    )
    appended = grouped.reduce(lambda left, right: f"{left},{right}", "appended")
    appended.to_stream().to(sink, key_serde=serdes.String(), value_serde=serdes.String())
    return builder.build()


@dataclass(frozen=True)
class Pair:
    """The same input counted by the runtime (`app_a`, into `out_streaming`) and by Spark (`app_b`)."""

    result: Any
    source: str
    app_a: str
    app_b: str
    out_streaming: str
    out_spark: str

    def changelogs(self, bootstrap: str) -> tuple[dict[bytes, bytes], list[tuple[bytes, bytes]]]:
        """The runtime's changelog, latest per key, and Spark's changelog records."""
        changelog_a = latest_per_key(read_all(bootstrap, f"{self.app_a}-appended-changelog"))
        return changelog_a, read_all(bootstrap, f"{self.app_b}-appended-changelog")


def stream_then_reprocess(
    bootstrap: str, topics: Any, tmp_path: Any, name: str, partitions: int, records: list[Any], **spark: Any
) -> Pair:
    """`records` into a new `name`-in topic, counted by the runtime, then reprocessed on Spark, 3 splits."""
    source = topics(f"{name}-in", partitions=partitions)
    out_streaming = topics(f"{name}-out-streaming", partitions=partitions)
    out_spark = topics(f"{name}-out-spark", partitions=partitions)
    suffix = uuid.uuid4().hex[:8]
    app_a, app_b = f"{name}-stream-{suffix}", f"{name}-spark-{suffix}"
    run_streaming(
        bootstrap,
        appending_topology(source, out_streaming),
        app_a,
        str(tmp_path / "a"),
        [lambda: produce_records(bootstrap, source, records)],
    )
    result = reprocess(
        appending_topology(source, out_spark),
        {"application.id": app_b, "bootstrap.servers": bootstrap, "state.dir": str(tmp_path / "b")},
        splits=3,
        **spark,
    )
    return Pair(result, source, app_a, app_b, out_streaming, out_spark)


def test_split_stateless_stage_equals_the_runtime(spark, kafka_bootstrap, kafka_topics, tmp_path):
    records = [(f"k{i % 5}".encode(), str(i).encode(), BASE_TS + i) for i in range(900)]
    pair = stream_then_reprocess(
        kafka_bootstrap, kafka_topics, tmp_path, "split", 2, records, spark=spark, reader="kafka-client"
    )
    result = pair.result

    first_stage = [s for s in result.task_stats if s["task"].startswith("0_")]
    assert len(first_stage) == 6  # 3 offset ranges of each of the 2 partitions: more tasks than partitions
    expected = {
        f"k{k}".encode(): ",".join(str(i) for i in range(k, 900, 5) if not str(i).endswith("7")).encode()
        for k in range(5)
    }
    spark_state = latest_per_key(read_all(kafka_bootstrap, pair.out_spark))
    assert spark_state == latest_per_key(read_all(kafka_bootstrap, pair.out_streaming)) == expected
    changelog_a, changelog_b = pair.changelogs(kafka_bootstrap)
    assert latest_per_key(changelog_b) == changelog_a
    assert len(changelog_b) == len(changelog_a)  # compacted: one record per key


def test_one_partition_split_into_offset_ranges_and_key_slots_equals_the_runtime(
    spark, kafka_bootstrap, kafka_topics, tmp_path
):
    """A 1-partition input, 3 Spark tasks per stage: the first stage by offset range, the reduce by key.

    The slots leave no local state (they would share one task's directory), so the runtime on the new id
    restores the compacted changelog - one record per key - and continues from Spark's offsets.
    """
    records = [(f"k{i % 7}".encode(), str(i).encode(), BASE_TS + i) for i in range(700)]
    pair = stream_then_reprocess(kafka_bootstrap, kafka_topics, tmp_path, "split1", 1, records, spark=spark)
    result, source, app_b = pair.result, pair.source, pair.app_b

    stages = [
        sorted((s["task"], s["key_slice"]) for s in result.task_stats if s["task"][0] == n) for n in "01"
    ]
    assert stages == [[("0_0", "0/1")] * 3, [("1_0", "0/3"), ("1_0", "1/3"), ("1_0", "2/3")]]
    slices = [s for s in result.task_stats if s["task"] == "1_0"]
    assert sum(s["records"] for s in slices) == result.records_processed - 700
    assert all(s["records"] for s in slices)  # 7 keys spread over all 3 slots

    def appended(upto: int) -> dict[bytes, bytes]:
        values = [i for i in range(upto) if not str(i).endswith("7")]
        return {f"k{k}".encode(): ",".join(str(i) for i in values if i % 7 == k).encode() for k in range(7)}

    spark_state = latest_per_key(read_all(kafka_bootstrap, pair.out_spark))
    assert spark_state == latest_per_key(read_all(kafka_bootstrap, pair.out_streaming)) == appended(700)
    changelog_a, changelog_b = pair.changelogs(kafka_bootstrap)
    assert latest_per_key(changelog_b) == changelog_a and len(changelog_b) == 7

    more = [(f"k{i % 7}".encode(), str(i).encode(), BASE_TS + i) for i in range(700, 770)]
    app = KafkaStreams(
        appending_topology(source, pair.out_spark), fast_config(kafka_bootstrap, app_b, str(tmp_path / "b"))
    )
    app.start()
    try:
        assert app.wait_until(State.RUNNING, 60), app.error
        produce_records(kafka_bootstrap, source, more)
        wait_caught_up(kafka_bootstrap, app_b, [source, f"{app_b}-appended-repartition"])
        assert app.metrics.counter("restored-records-total") == 7
    finally:
        assert app.close(30)
    assert latest_per_key(read_all(kafka_bootstrap, pair.out_spark)) == appended(770)
