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


def test_a_stage_that_shuffles_into_a_later_job_still_reports_its_tasks(
    spark, kafka_bootstrap, kafka_topics, tmp_path
):
    """The word count's first stage runs in its reader's Spark job and reports through it; here an
    unrelated stage is planned between the two (stage order 0, 2, 1) and runs its own job first, and
    every stage's tasks are still counted once."""
    from kappaflow import StreamsBuilder, serdes
    from kappaflow.spark.reprocess import stage_order

    source, other = kafka_topics("wc2-in", partitions=2), kafka_topics("wc2-other", partitions=1)
    out, other_out = kafka_topics("wc2-out", partitions=2), kafka_topics("wc2-other-out", partitions=1)
    text = lines(300)
    produce_records(kafka_bootstrap, source, as_records(text, BASE_TS))
    produce_records(kafka_bootstrap, other, as_records(lines(50), BASE_TS))

    # The word count (sub-topologies 0 and 1) and a copy of another topic (2).
    from examples.wordcount import split_words

    from kappaflow import Materialized

    builder = StreamsBuilder()
    lines_in = builder.stream(source, key_serde=serdes.String(), value_serde=serdes.String())
    lines_in.flat_map_values(split_words).group_by(
        lambda _key, word: word, key_serde=serdes.String(), value_serde=serdes.String()
    ).count(Materialized.as_("counts").with_value_serde(serdes.Long())).to_stream().to(
        out, key_serde=serdes.String(), value_serde=serdes.Long()
    )
    builder.stream(other, key_serde=serdes.String(), value_serde=serdes.String()).map_values(str.upper).to(
        other_out, key_serde=serdes.String(), value_serde=serdes.String()
    )
    topology = builder.build()
    assert [s.id for s in stage_order(topology)] == [0, 2, 1]

    app_id = f"wc2-spark-{uuid.uuid4().hex[:8]}"
    result = reprocess(
        topology,
        {"application.id": app_id, "bootstrap.servers": kafka_bootstrap, "state.dir": str(tmp_path)},
        spark=spark,
    )

    words = sum(len(line.split()) for line in text)
    assert result.records_processed == len(text) + 50 + words
    assert Counter(s["task"].split("_")[0] for s in result.task_stats).keys() == {"0", "1", "2"}
    assert result.tasks == len(result.task_stats)
    assert latest_per_key(read_all(kafka_bootstrap, out)) == expected_counts(text)
    assert len(read_all(kafka_bootstrap, other_out)) == 50
