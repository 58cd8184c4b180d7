"""Windowed fraud score: flag cards with too many or too large payments in one minute.

Reads payments from `payments` (key: card id, value: JSON `{"amount": 12.5, "merchant": "m1"}`), scores
each card per one-minute tumbling window with 10 seconds of grace for late payments, and - once the
window has closed, so each window yields exactly one final verdict - writes the cards whose score
crosses the threshold to `fraud-alerts` (key: `Windowed(card, window)` in Java's TimeWindowed layout,
value: JSON `{"payments": n, "total": amount, "score": s}`).

    kappaflow describe examples.windowed_fraud:build_topology
"""

from __future__ import annotations

from typing import Any

from kappaflow import BufferConfig, Materialized, StreamsBuilder, Suppressed, TimeWindows, Topology, serdes
from kappaflow.api.windowed_serdes import TimeWindowedSerde

INPUT_TOPIC = "payments"
OUTPUT_TOPIC = "fraud-alerts"
STORE = "payment-windows"
WINDOW_MS = 60_000
GRACE_MS = 10_000
SCORE_THRESHOLD = 1.0


def empty() -> dict[str, Any]:
    return {"payments": 0, "total": 0.0}


def add_payment(_card: str, payment: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    return {"payments": summary["payments"] + 1, "total": round(summary["total"] + payment["amount"], 2)}


def score(summary: dict[str, Any]) -> dict[str, Any]:
    """More than 5 payments or more than 1000 in a minute scores >= 1.0."""
    value = max(summary["payments"] / 5, summary["total"] / 1000)
    return {**summary, "score": round(value, 3)}


def build_topology() -> Topology:
    builder = StreamsBuilder()
    payments = builder.stream(INPUT_TOPIC, key_serde=serdes.String(), value_serde=serdes.Json())
    windows = TimeWindows.of_size_and_grace(WINDOW_MS, GRACE_MS)
    summaries = (
        payments.filter(lambda _card, payment: payment is not None and payment.get("amount", 0) > 0)
        .group_by_key()
        .windowed_by(windows)
        .aggregate(empty, add_payment, Materialized.as_(STORE).with_value_serde(serdes.Json()))
    )
    (
        summaries.suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to_stream()
        .map_values(score)
        .filter(lambda _window, verdict: verdict["score"] >= SCORE_THRESHOLD)
        .to(OUTPUT_TOPIC, key_serde=TimeWindowedSerde(serdes.String(), WINDOW_MS), value_serde=serdes.Json())
    )
    return builder.build()
