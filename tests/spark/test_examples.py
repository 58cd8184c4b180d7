"""The windowed and join examples on Spark equal the streaming runtime on the same log.

Compared: every output record (key, value, timestamp, partition) as a multiset, and every store's final
contents (its changelog, compacted). The examples' topic names are module constants; each test swaps them
for unique names before building the topology, which bakes the names in.
"""

from __future__ import annotations

import contextlib
import functools
import json
import random
import uuid
from collections import Counter
from unittest import mock

import pytest
from examples import pageview_join, windowed_fraud

from kappaflow.spark import reprocess
from tests.spark.support import BASE_TS, latest_per_key, produce_records, read_all, run_streaming

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.timeout(300)]


def outputs(bootstrap: str, topic: str) -> Counter:
    return Counter((m.key(), m.value(), m.timestamp()[1], m.partition()) for m in read_all(bootstrap, topic))


def stores(bootstrap: str, topology, app_id: str) -> dict[str, dict[bytes, bytes]]:
    return {
        name: latest_per_key(read_all(bootstrap, f"{app_id}-{spec.name}"))
        for name, spec in topology.changelog_topics().items()
    }


def swap_topics(monkeypatch, module, names: list[str], kafka_topics, partitions: int) -> dict[str, str]:
    created = {}
    for constant in names:
        created[constant] = kafka_topics(getattr(module, constant).lower(), partitions=partitions)
        monkeypatch.setattr(module, constant, created[constant])
    return created


def payments(seed: int, n: int) -> list[tuple[bytes, bytes, int]]:
    """Payments of 12 cards over ~6 minutes, some out of order (within and beyond the 10s grace)."""
    rng = random.Random(seed)
    records = []
    for i in range(n):
        ts = BASE_TS + i * 700 + rng.choice([0, 0, 0, -5_000, -40_000])
        card = f"card-{rng.randrange(12)}"
        amount = rng.choice([0, 5.0, 20.0, 120.0, 600.0])
        records.append((card.encode(), json.dumps({"amount": amount, "merchant": "m"}).encode(), ts))
    return records


def test_windowed_fraud_equals_streaming(spark, kafka_bootstrap, kafka_topics, tmp_path, monkeypatch):
    topics = swap_topics(monkeypatch, windowed_fraud, ["INPUT_TOPIC"], kafka_topics, 2)
    out_a = kafka_topics("alerts-streaming", partitions=2)
    out_b = kafka_topics("alerts-spark", partitions=2)
    monkeypatch.setattr(windowed_fraud, "OUTPUT_TOPIC", out_a)
    streaming_topology = windowed_fraud.build_topology()
    monkeypatch.setattr(windowed_fraud, "OUTPUT_TOPIC", out_b)
    spark_topology = windowed_fraud.build_topology()
    suffix = uuid.uuid4().hex[:8]
    app_a, app_b = f"fraud-a-{suffix}", f"fraud-b-{suffix}"
    records = payments(7, 600)

    run_streaming(
        kafka_bootstrap,
        streaming_topology,
        app_a,
        str(tmp_path / "a"),
        [lambda: produce_records(kafka_bootstrap, topics["INPUT_TOPIC"], records)],
    )
    result = reprocess(
        spark_topology,
        {"application.id": app_b, "bootstrap.servers": kafka_bootstrap, "state.dir": str(tmp_path / "b")},
        spark=spark,
    )

    assert result.records_read == len(records)
    alerts = outputs(kafka_bootstrap, out_b)
    assert alerts, "the data is meant to raise alerts"
    assert alerts == outputs(kafka_bootstrap, out_a)
    assert stores(kafka_bootstrap, spark_topology, app_b) == stores(
        kafka_bootstrap, streaming_topology, app_a
    )


def build_pageview_join(names: dict[str, str]):
    """The join topology on other topic names. A module function, so Spark ships it by reference: the
    join topology holds weak references and cannot be pickled, and executors rebuild it with this."""
    with contextlib.ExitStack() as stack:
        for constant, topic in names.items():
            stack.enter_context(mock.patch.object(pageview_join, constant, topic))
        return pageview_join.build_topology()


def test_pageview_join_equals_streaming(spark, kafka_bootstrap, kafka_topics, tmp_path, monkeypatch):
    inputs = swap_topics(monkeypatch, pageview_join, ["VIEWS", "USERS", "CLICKS"], kafka_topics, 2)
    sinks = ["ENRICHED", "VIEW_CLICKS", "PER_REGION"]
    streaming_out = swap_topics(monkeypatch, pageview_join, sinks, kafka_topics, 2)
    streaming_topology = pageview_join.build_topology()
    spark_out = swap_topics(monkeypatch, pageview_join, sinks, kafka_topics, 2)
    spark_builder = functools.partial(build_pageview_join, {**inputs, **spark_out})
    spark_topology = spark_builder()
    suffix = uuid.uuid4().hex[:8]
    app_a, app_b = f"views-a-{suffix}", f"views-b-{suffix}"
    rng = random.Random(11)
    users = [(f"u{i}".encode(), json.dumps({"region": f"r{i % 4}"}).encode(), BASE_TS + i) for i in range(30)]
    # Views and clicks within 4 minutes of each other: inside the 5-minute join window, none late.
    views = [
        (
            f"u{rng.randrange(40)}".encode(),
            json.dumps({"page": f"/p{i % 9}"}).encode(),
            BASE_TS + 100_000 + i * 300,
        )
        for i in range(400)
    ]
    clicks = [
        (
            f"u{rng.randrange(40)}".encode(),
            json.dumps({"target": f"t{i}"}).encode(),
            BASE_TS + 100_150 + i * 1_200,
        )
        for i in range(100)
    ]

    def feed_users() -> None:
        produce_records(kafka_bootstrap, inputs["USERS"], users)

    def feed_activity() -> None:
        produce_records(kafka_bootstrap, inputs["VIEWS"], views)
        produce_records(kafka_bootstrap, inputs["CLICKS"], clicks)

    run_streaming(
        kafka_bootstrap, streaming_topology, app_a, str(tmp_path / "a"), [feed_users, feed_activity]
    )
    result = reprocess(
        spark_builder,
        {"application.id": app_b, "bootstrap.servers": kafka_bootstrap, "state.dir": str(tmp_path / "b")},
        spark=spark,
    )

    assert result.records_read == len(users) + len(views) + len(clicks)
    for sink in ["ENRICHED", "VIEW_CLICKS"]:
        found = outputs(kafka_bootstrap, spark_out[sink])
        assert found, sink
        assert found == outputs(kafka_bootstrap, streaming_out[sink]), sink
    per_region = latest_per_key(read_all(kafka_bootstrap, spark_out["PER_REGION"]))
    assert per_region == latest_per_key(read_all(kafka_bootstrap, streaming_out["PER_REGION"]))
    assert sum(int.from_bytes(v, "big") for v in per_region.values()) == len(views)
    assert stores(kafka_bootstrap, spark_topology, app_b) == stores(
        kafka_bootstrap, streaming_topology, app_a
    )
