"""A count with a TTL reprocessed on Spark equals the streaming runtime on the same log: expiry runs on
stream time, so the restarted counts, the changelog tombstones and the final store agree."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from kappaflow import Materialized, StreamsBuilder, serdes
from kappaflow.spark import reprocess
from tests.spark.support import BASE_TS, latest_per_key, produce_records, read_all, run_streaming

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.timeout(300)]
S, L = serdes.String(), serdes.Long()
TTL_MS = 5_000


def ttl_count(source: str, sink: str):
    """Uncached, so every update is an output record whatever the commit interval."""
    builder = StreamsBuilder()
    builder.stream(source, key_serde=S, value_serde=S).group_by_key().count(
        Materialized.as_("counts").with_ttl(TTL_MS).with_caching_disabled()
    ).to_stream().to(sink, value_serde=L)
    return builder.build()


def visits() -> list[tuple[bytes, bytes, int]]:
    """Six users over 60 s; users 0-2 come back after gaps longer than the TTL, 3-5 stay busy."""
    records = []
    for i in range(240):
        user = i % 6
        if user < 3 and (i // 6) % 10 >= 6:
            continue  # a gap of ~6 s: the entry expires
        records.append((f"user-{user}".encode(), b"v", BASE_TS + i * 250))
    return records


def test_ttl_count_on_spark_equals_streaming(spark, kafka_bootstrap, kafka_topics, tmp_path):
    source = kafka_topics("ttl-visits")
    out_a, out_b = kafka_topics("ttl-counts-streaming"), kafka_topics("ttl-counts-spark")
    suffix = uuid.uuid4().hex[:8]
    app_a, app_b = f"ttl-a-{suffix}", f"ttl-b-{suffix}"
    records = visits()
    run_streaming(
        kafka_bootstrap,
        ttl_count(source, out_a),
        app_a,
        str(tmp_path / "a"),
        [lambda: produce_records(kafka_bootstrap, source, records)],
    )
    config = {"application.id": app_b, "bootstrap.servers": kafka_bootstrap, "state.dir": str(tmp_path / "b")}
    result = reprocess(ttl_count(source, out_b), config, spark=spark)
    assert result.records_read == len(records)

    def outputs(topic: str) -> Counter:
        return Counter((m.key(), m.value(), m.timestamp()[1]) for m in read_all(kafka_bootstrap, topic))

    spark_outputs = outputs(out_b)
    assert spark_outputs == outputs(out_a)
    restarts = [key for (key, value, _) in spark_outputs if L.deserialize("t", value) == 1]
    assert sorted(set(restarts)) == [b"user-0", b"user-1", b"user-2", b"user-3", b"user-4", b"user-5"]
    assert len(restarts) > 6  # the users with gaps longer than the TTL counted from 1 again
    expired = latest_per_key(read_all(kafka_bootstrap, f"{app_b}-counts-changelog"))
    assert expired == latest_per_key(read_all(kafka_bootstrap, f"{app_a}-counts-changelog"))
