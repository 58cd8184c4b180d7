"""The registry tests' topology, shared by the streaming test and the Spark reprocessing test."""

from __future__ import annotations

from typing import Any

from kappaflow import StreamsBuilder, serdes
from kappaflow.dsl import Materialized
from tests.registry.schemas import PAGE_COUNT, PAGE_VIEW_V1, CustomerTotal, OrderPlaced, PageView


def count_view(page: str, view: PageView, count: dict[str, Any]) -> dict[str, Any]:
    return {"page": page, "views": count["views"] + 1}


def add_order(customer: str, order: Any, total: Any) -> Any:
    return CustomerTotal(customer=customer, cents=total.cents + order.cents, orders=total.orders + 1)


def topology(url: str, views: str, orders: str, page_counts: str, customer_totals: str) -> Any:
    view_serde = serdes.Avro(url, PAGE_VIEW_V1, record_class=PageView)
    count_serde = serdes.Avro(url, PAGE_COUNT)
    order_serde = serdes.Protobuf(url, OrderPlaced)
    total_serde = serdes.Protobuf(url, CustomerTotal)
    builder = StreamsBuilder()
    (
        builder.stream(views, key_serde=serdes.String(), value_serde=view_serde)
        .group_by(lambda _, view: view.page, key_serde=serdes.String(), value_serde=view_serde)
        .aggregate(
            lambda: {"page": "", "views": 0},
            count_view,
            Materialized.as_("page-counts").with_value_serde(count_serde).with_caching_disabled(),
        )
        .to_stream()
        .to(page_counts, key_serde=serdes.Avro(url, '"string"', is_key=True), value_serde=count_serde)
    )
    (
        builder.stream(orders, key_serde=serdes.String(), value_serde=order_serde)
        .group_by(lambda _, order: order.customer, key_serde=serdes.String(), value_serde=order_serde)
        .aggregate(
            CustomerTotal,
            add_order,
            Materialized.as_("customer-totals").with_value_serde(total_serde).with_caching_disabled(),
        )
        .to_stream()
        .to(customer_totals, key_serde=serdes.String(), value_serde=total_serde)
    )
    return builder.build()
