"""Spark reprocessing of a topology whose topics, repartitions and stores carry registry serdes.

The topology is pickled to Spark's Python workers; its Avro and Protobuf serdes travel as configuration
and rebuild their registry clients there (kappaflow/api/registry_serdes.py). The outputs decode to the
same aggregates the streaming runtime computes.
"""

from __future__ import annotations

import uuid

import pytest

from kappaflow import serdes
from kappaflow.spark import reprocess
from tests.registry.apps import topology
from tests.registry.schemas import PAGE_COUNT, PAGE_VIEW_V1, CustomerTotal, OrderPlaced, PageView
from tests.spark.support import BASE_TS, produce_records, read_all

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.registry, pytest.mark.timeout(300)]


def test_reprocessing_reads_and_writes_registry_framed_topics(
    spark, kafka_bootstrap, kafka_topics, schema_registry_url, tmp_path
):
    url = schema_registry_url
    views, orders = kafka_topics("views", partitions=2), kafka_topics("orders", partitions=2)
    page_counts, totals = kafka_topics("page-counts", partitions=2), kafka_topics("totals", partitions=2)
    view_serde = serdes.Avro(url, PAGE_VIEW_V1, record_class=PageView)
    order_serde = serdes.Protobuf(url, OrderPlaced)
    pages = ["home", "cart", "home", "search", "home", "cart"]
    produce_records(
        kafka_bootstrap,
        views,
        [
            (f"u{i % 3}".encode(), view_serde.serialize(views, PageView(f"u{i % 3}", page, i)), BASE_TS + i)
            for i, page in enumerate(pages)
        ],
    )
    produce_records(
        kafka_bootstrap,
        orders,
        [
            (
                f"o{i}".encode(),
                order_serde.serialize(
                    orders, OrderPlaced(order_id=f"o{i}", customer=f"c{i % 2}", cents=10 * i)
                ),
                BASE_TS + i,
            )
            for i in range(5)
        ],
    )

    result = reprocess(
        topology(url, views, orders, page_counts, totals),
        {
            "application.id": f"registry-spark-{uuid.uuid4().hex[:8]}",
            "bootstrap.servers": kafka_bootstrap,
            "state.dir": str(tmp_path),
        },
        spark=spark,
    )

    assert result.records_read == len(pages) + 5
    count_serde, total_serde = serdes.Avro(url, PAGE_COUNT), serdes.Protobuf(url, CustomerTotal)
    key_serde = serdes.Avro(url, '"string"', is_key=True)
    latest_counts = {
        key_serde.deserialize(page_counts, m.key()): count_serde.deserialize(page_counts, m.value())
        for m in read_all(kafka_bootstrap, page_counts)
    }
    assert latest_counts == {
        "home": {"page": "home", "views": 3},
        "cart": {"page": "cart", "views": 2},
        "search": {"page": "search", "views": 1},
    }
    latest_totals = {
        m.key(): total_serde.deserialize(totals, m.value()) for m in read_all(kafka_bootstrap, totals)
    }
    assert {k: (t.cents, t.orders) for k, t in latest_totals.items()} == {b"c0": (60, 3), b"c1": (40, 2)}
