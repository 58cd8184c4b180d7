"""A user topology on Avro and Protobuf topics through the real registry, read back by a Java consumer.

The issue's bar: a topology reads and writes Avro and Protobuf topics through a registry the project
starts (Apicurio, tests/harness/schema_registry.py), and a Java consumer using the same schemas reads
them (tests/registry/RegistryJavaPeer.java: Kafka's consumer, Apache Avro and protobuf-java decode the
Confluent framing and re-encode each record, which must give back the very bytes Python wrote, and
Apicurio's Java AvroKafkaDeserializer decodes the Avro ones too). Some input is written by Java
(Apicurio's AvroKafkaSerializer in Confluent-compatible mode), so the bytes are checked both ways. Poison
records go to the dead-letter topic with their bytes, and a store written with one schema version stays
readable, locally and restored from its changelog, by the next compatible version.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient

from kappaflow import StreamsBuilder, serdes
from kappaflow.dsl import Materialized
from kappaflow.runner import KafkaStreams
from tests.harness.java_registry_peer import read_topic as java_read_topic
from tests.harness.java_registry_peer import write_topic as java_write_topic
from tests.kafka.streams_support import fast_config, read_topic, wait_running
from tests.registry.apps import topology
from tests.registry.schemas import (
    PAGE_COUNT,
    PAGE_COUNT_V2,
    PAGE_VIEW_V1,
    CustomerTotal,
    OrderPlaced,
    PageView,
)

pytestmark = [pytest.mark.kafka, pytest.mark.registry, pytest.mark.timeout(240)]


def test_avro_and_protobuf_topics_round_trip_and_java_reads_the_outputs(
    kafka_bootstrap, kafka_topics, schema_registry_url, tmp_path
):
    url = schema_registry_url
    views, orders = kafka_topics("views"), kafka_topics("orders")
    page_counts, customer_totals = kafka_topics("page-counts"), kafka_topics("customer-totals")
    dead = kafka_topics("dead")
    config = fast_config(
        kafka_bootstrap,
        f"registry-{uuid.uuid4().hex[:8]}",
        str(tmp_path),
        **{
            "default.deserialization.exception.handler": "log_and_continue",
            "errors.dead.letter.queue.topic.name": dead,
        },
    )
    view_serde = serdes.Avro(url, PAGE_VIEW_V1, record_class=PageView)
    order_serde = serdes.Protobuf(url, OrderPlaced)
    unframed = b"not avro at all"
    unknown_schema = b"\x00\x7f\xff\xff\xf0" + b"\x02a"
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(views, key=b"ann", value=view_serde.serialize(views, PageView("ann", "home", 0)))
    producer.produce(views, key=b"poison-1", value=unframed)
    producer.produce(views, key=b"poison-2", value=unknown_schema)
    for order_id, customer, cents in [("o1", "c1", 250), ("o2", "c2", 100), ("o3", "c1", 50)]:
        order = OrderPlaced(order_id=order_id, customer=customer, cents=cents)
        producer.produce(orders, key=order_id.encode(), value=order_serde.serialize(orders, order))
    assert producer.flush(10) == 0
    # The next views come from Java: Apicurio's AvroKafkaSerializer, registering its own copy of the schema.
    java_write_topic(
        kafka_bootstrap,
        url,
        views,
        PAGE_VIEW_V1,
        [
            ("bob", {"user": "bob", "page": "home", "millis": 1}),
            ("ann", {"user": "ann", "page": "cart", "millis": 2}),
        ],
    )

    app = KafkaStreams(topology(url, views, orders, page_counts, customer_totals), config)
    app.start()
    try:
        wait_running(app)
        counts = read_topic(kafka_bootstrap, page_counts, expected=3, timeout=60)
        totals = read_topic(kafka_bootstrap, customer_totals, expected=3, timeout=60)
        dlq = read_topic(kafka_bootstrap, dead, expected=2, timeout=30)
    finally:
        app.close(30)

    # Python reads what the topology wrote, through the same serdes.
    count_key, count_value = serdes.Avro(url, '"string"', is_key=True), serdes.Avro(url, PAGE_COUNT)
    assert [
        (count_key.deserialize(page_counts, m.key()), count_value.deserialize(page_counts, m.value()))
        for m in counts
    ] == [
        ("home", {"page": "home", "views": 1}),
        ("home", {"page": "home", "views": 2}),
        ("cart", {"page": "cart", "views": 1}),
    ]
    total_serde = serdes.Protobuf(url, CustomerTotal)
    decoded_totals = [total_serde.deserialize(customer_totals, m.value()) for m in totals]
    assert [(t.customer, t.cents, t.orders) for t in decoded_totals] == [
        ("c1", 250, 1),
        ("c2", 100, 1),
        ("c1", 300, 2),
    ]

    # The poison records went to the dead-letter topic with their bytes, naming why they failed.
    assert [(m.key(), m.value()) for m in dlq] == [(b"poison-1", unframed), (b"poison-2", unknown_schema)]
    messages = [dict(m.headers())["__kappaflow.error.message"].decode() for m in dlq]
    assert dict(dlq[0].headers())["__kappaflow.error.class"] == b"DeserializationError"
    assert "no Confluent framing" in messages[0]
    assert f"schema id {0x7FFFFFF0}" in messages[1]

    # A Java consumer decodes the same topics with the registry's schemas, byte for byte.
    java_counts = java_read_topic(kafka_bootstrap, url, page_counts, expected=3)
    assert [(r["key"]["record"], r["value"]["record"]) for r in java_counts] == [
        ("home", {"page": "home", "views": 1}),
        ("home", {"page": "home", "views": 2}),
        ("cart", {"page": "cart", "views": 1}),
    ]
    assert all(r["key"]["apicurio_record"] == r["key"]["record"] for r in java_counts)
    assert all(r["value"]["apicurio_record"] == r["value"]["record"] for r in java_counts)
    assert {r["value"]["record_name"] for r in java_counts} == {"dev.kappaflow.test.PageCount"}
    assert all(r["key"]["reencoded_equal"] and r["value"]["reencoded_equal"] for r in java_counts)
    latest = SchemaRegistryClient({"url": url}).get_latest_version(f"{page_counts}-value")
    assert {r["value"]["schema_id"] for r in java_counts} == {latest.schema_id}
    java_totals = java_read_topic(kafka_bootstrap, url, customer_totals, expected=3)
    assert [r["key"] for r in java_totals] == ["c1", "c2", "c1"]
    assert [r["value"]["record"] for r in java_totals] == [
        {"customer": "c1", "cents": 250, "orders": 1},
        {"customer": "c2", "cents": 100, "orders": 1},
        {"customer": "c1", "cents": 300, "orders": 2},
    ]
    assert {r["value"]["record_name"] for r in java_totals} == {"dev.kappaflow.test.CustomerTotal"}
    assert all(r["value"]["reencoded_equal"] for r in java_totals)


def counting(url: str, source: str, sink: str, count_schema: str) -> Any:
    """Counts views per user into an Avro store; the v2 schema also records the last page seen."""
    view_serde = serdes.Avro(url, PAGE_VIEW_V1, record_class=PageView)
    count_serde = serdes.Avro(url, count_schema)
    v2 = count_schema == PAGE_COUNT_V2

    def add(user: str, view: PageView, count: dict[str, Any]) -> dict[str, Any]:
        updated = {"page": user, "views": count["views"] + 1}
        if v2:
            updated["last_user"] = f"{count.get('last_user')}->{view.page}"
        return updated

    builder = StreamsBuilder()
    (
        builder.stream(source, key_serde=serdes.String(), value_serde=view_serde)
        .group_by_key()
        .aggregate(
            lambda: {"page": "", "views": 0},
            add,
            Materialized.as_("per-user").with_value_serde(count_serde).with_caching_disabled(),
        )
        .to_stream()
        .to(sink, key_serde=serdes.String(), value_serde=count_serde)
    )
    return builder.build()


@pytest.mark.parametrize("restore", ["local-state", "from-changelog"])
def test_state_written_with_v1_is_read_by_a_compatible_v2(
    kafka_bootstrap, kafka_topics, schema_registry_url, tmp_path, restore
):
    """v1 counts sit in RocksDB and the changelog as v1 bytes; after the upgrade to v2 (a new nullable
    field) the store reads them through the registry (writer v1, reader v2: the field takes its default),
    whether the instance kept its local state or restores it from the changelog on a new volume."""
    url = schema_registry_url
    source, sink = kafka_topics("views"), kafka_topics("counts")
    app_id = f"evolve-{uuid.uuid4().hex[:8]}"
    view_serde = serdes.Avro(url, PAGE_VIEW_V1, record_class=PageView)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})

    def send(*pages: str) -> None:
        for page in pages:
            producer.produce(source, key=b"ann", value=view_serde.serialize(source, PageView("ann", page, 0)))
        assert producer.flush(10) == 0

    first = KafkaStreams(
        counting(url, source, sink, PAGE_COUNT), fast_config(kafka_bootstrap, app_id, str(tmp_path / "a"))
    )
    first.start()
    try:
        wait_running(first)
        send("home", "cart")
        assert len(read_topic(kafka_bootstrap, sink, expected=2, timeout=60)) == 2
    finally:
        first.close(30)

    state_dir = tmp_path / ("a" if restore == "local-state" else "b")
    second = KafkaStreams(
        counting(url, source, sink, PAGE_COUNT_V2), fast_config(kafka_bootstrap, app_id, str(state_dir))
    )
    second.start()
    try:
        wait_running(second)
        send("checkout")
        out = read_topic(kafka_bootstrap, sink, expected=3, timeout=60)
    finally:
        second.close(30)
    reader = serdes.Avro(url, PAGE_COUNT_V2)
    assert [reader.deserialize(sink, m.value()) for m in out] == [
        {"page": "ann", "views": 1, "last_user": None},
        {"page": "ann", "views": 2, "last_user": None},
        {"page": "ann", "views": 3, "last_user": "None->checkout"},
    ]
