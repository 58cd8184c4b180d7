"""Word count on Spark equals the streaming runtime on the same log; the runtime then continues."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from kappaflow.runner import KafkaStreams, State
from kappaflow.spark import reprocess
from tests.kafka.streams_support import fast_config, wordcount_topology
from tests.spark.support import (
    BASE_TS,
    committed,
    end_offsets,
    latest_per_key,
    produce_records,
    read_all,
    run_streaming,
    wait_caught_up,
)

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.timeout(300)]


def lines(n: int, start: int = 0) -> list[str]:
    return [f"the w{i % 37} x{i % 11} w{(i * 7) % 37}" for i in range(start, start + n)]


def as_records(text: list[str], base_ts: int):
    return [(None, line.encode(), base_ts + i) for i, line in enumerate(text)]


def expected_counts(text: list[str]) -> dict[bytes, bytes]:
    counts = Counter(w for line in text for w in line.split())
    return {w.encode(): n.to_bytes(8, "big", signed=True) for w, n in counts.items()}


@pytest.mark.parametrize("reader", ["spark", "kafka-client"])
def test_wordcount_reprocessed_equals_streaming_then_runtime_continues(
    spark, kafka_bootstrap, kafka_topics, tmp_path, reader
):
    source = kafka_topics("wc-in", partitions=2)
    out_streaming = kafka_topics("wc-out-streaming", partitions=2)
    out_spark = kafka_topics("wc-out-spark", partitions=2)
    first = lines(1500)
    suffix = uuid.uuid4().hex[:8]
    app_a, app_b = f"wc-stream-{suffix}", f"wc-spark-{suffix}"

    run_streaming(
        kafka_bootstrap,
        wordcount_topology(source, out_streaming),
        app_a,
        str(tmp_path / "a"),
        [lambda: produce_records(kafka_bootstrap, source, as_records(first, BASE_TS))],
    )
    result = reprocess(
        wordcount_topology(source, out_spark),
        {"application.id": app_b, "bootstrap.servers": kafka_bootstrap, "state.dir": str(tmp_path / "b")},
        spark=spark,
        reader=reader,
    )

    assert result.records_read == len(first)
    streaming_out, spark_out = read_all(kafka_bootstrap, out_streaming), read_all(kafka_bootstrap, out_spark)
    assert latest_per_key(spark_out) == latest_per_key(streaming_out) == expected_counts(first)
    # Every key lands in the partition the runtime's producer chose (murmur2), outputs and changelog alike.
    placement = {m.key(): m.partition() for m in streaming_out}
    assert {m.key(): m.partition() for m in spark_out} == placement
    changelog_a = read_all(kafka_bootstrap, f"{app_a}-counts-changelog")
    changelog_b = read_all(kafka_bootstrap, f"{app_b}-counts-changelog")
    assert latest_per_key(changelog_b) == latest_per_key(changelog_a)
    assert len(changelog_b) == len(latest_per_key(changelog_b))  # compacted: one record per key
    assert {m.key(): m.partition() for m in changelog_b} == {m.key(): m.partition() for m in changelog_a}
    assert committed(kafka_bootstrap, app_b, source) == end_offsets(kafka_bootstrap, source)

    # The runtime on the new id starts from Spark's state: nothing restored, input continues at the end.
    second = lines(400, start=1500)
    app = KafkaStreams(
        wordcount_topology(source, out_spark), fast_config(kafka_bootstrap, app_b, str(tmp_path / "b"))
    )
    app.start()
    try:
        assert app.wait_until(State.RUNNING, 60), app.error
        produce_records(kafka_bootstrap, source, as_records(second, BASE_TS + 10_000))
        wait_caught_up(kafka_bootstrap, app_b, [source, f"{app_b}-counts-repartition"])
        assert app.metrics.counter("restored-records-total") == 0
    finally:
        assert app.close(30)
    assert latest_per_key(read_all(kafka_bootstrap, out_spark)) == expected_counts(first + second)
