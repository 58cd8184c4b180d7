"""A stateless first stage split into offset ranges (more Spark tasks than input partitions) changes nothing.

The topology's state is order-sensitive on purpose: a reduce that appends each value, so a chunk seen out
of offset order would show in the final state. Every group key comes from one input partition (it is the
record key), which makes the runtime's result deterministic too: the offset order of that partition.
"""

from __future__ import annotations

import uuid

import pytest

from kappaflow import StreamsBuilder, serdes
from kappaflow.spark import reprocess
from tests.spark.support import BASE_TS, latest_per_key, produce_records, read_all, run_streaming

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


def test_split_stateless_stage_equals_the_runtime(spark, kafka_bootstrap, kafka_topics, tmp_path):
    source = kafka_topics("split-in", partitions=2)
    out_streaming = kafka_topics("split-out-streaming", partitions=2)
    out_spark = kafka_topics("split-out-spark", partitions=2)
    records = [(f"k{i % 5}".encode(), str(i).encode(), BASE_TS + i) for i in range(900)]
    suffix = uuid.uuid4().hex[:8]
    app_a, app_b = f"split-stream-{suffix}", f"split-spark-{suffix}"

    run_streaming(
        kafka_bootstrap,
        appending_topology(source, out_streaming),
        app_a,
        str(tmp_path / "a"),
        [lambda: produce_records(kafka_bootstrap, source, records)],
    )
    result = reprocess(
        appending_topology(source, out_spark),
        {"application.id": app_b, "bootstrap.servers": kafka_bootstrap, "state.dir": str(tmp_path / "b")},
        spark=spark,
        reader="kafka-client",
        splits=3,
    )

    first_stage = [s for s in result.task_stats if s["task"].startswith("0_")]
    assert len(first_stage) == 6  # 3 offset ranges of each of the 2 partitions: more tasks than partitions
    expected = {
        f"k{k}".encode(): ",".join(str(i) for i in range(k, 900, 5) if not str(i).endswith("7")).encode()
        for k in range(5)
    }
    spark_state = latest_per_key(read_all(kafka_bootstrap, out_spark))
    assert spark_state == latest_per_key(read_all(kafka_bootstrap, out_streaming)) == expected
    changelog_a = latest_per_key(read_all(kafka_bootstrap, f"{app_a}-appended-changelog"))
    changelog_b = read_all(kafka_bootstrap, f"{app_b}-appended-changelog")
    assert latest_per_key(changelog_b) == changelog_a
    assert len(changelog_b) == len(changelog_a)  # compacted: one record per key
