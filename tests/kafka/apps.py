"""Applications the Kafka-tier tests run in subprocesses (`kappaflow run tests.kafka.apps:...`)."""

from __future__ import annotations

import os
from typing import Any

from tests.kafka.streams_support import wordcount_topology


def wordcount() -> Any:
    return wordcount_topology(os.environ["WC_INPUT"], os.environ["WC_OUTPUT"])


def keycount() -> Any:
    """Counts per record key, with no repartition: one sub-topology whose only transactional writes are
    its changelog and the output (tests/kafka/test_eos_restore.py holds a transaction open with it)."""
    from kappaflow import Materialized, StreamsBuilder, serdes

    builder = StreamsBuilder()
    stream = builder.stream(os.environ["WC_INPUT"], key_serde=serdes.String(), value_serde=serdes.String())
    counts = stream.group_by_key().count(Materialized.as_("counts").with_value_serde(serdes.Long()))
    counts.to_stream().to(os.environ["WC_OUTPUT"], key_serde=serdes.String(), value_serde=serdes.Long())
    return builder.build()


def failing_on_boom() -> Any:
    """Passes lines through, but a line "boom" raises in the processor: its stream thread (worker) dies
    and the default uncaught-exception answer, SHUTDOWN_CLIENT, stops the instance."""
    from kappaflow import StreamsBuilder, serdes

    def check(line: str) -> str:
        if line == "boom":
            raise RuntimeError("boom")
        return line

    builder = StreamsBuilder()
    stream = builder.stream(os.environ["WC_INPUT"], key_serde=serdes.String(), value_serde=serdes.String())
    checked = stream.map_values(check)
    checked.to(os.environ["WC_OUTPUT"], key_serde=serdes.String(), value_serde=serdes.String())
    return builder.build()


def async_wordcount() -> Any:
    """The chaos word count with asynchronous calls (tests/kafka/chaos.py): each line goes through an
    `async def` that sleeps 0-20 ms (unordered: results complete out of order), then the words are
    counted and each count goes through another (per key), so calls are in flight at every kill."""
    import asyncio
    import random

    from kappaflow import Materialized, Ordering, StreamsBuilder, serdes

    async def line_lookup(line: str) -> str:
        await asyncio.sleep(random.uniform(0.0, 0.02))
        return line

    async def count_lookup(count: int) -> int:
        await asyncio.sleep(random.uniform(0.0, 0.02))
        return count

    builder = StreamsBuilder()
    lines = builder.stream(os.environ["WC_INPUT"], key_serde=serdes.String(), value_serde=serdes.String())
    looked_up = lines.map_values_async(line_lookup, max_in_flight=32, ordering=Ordering.NONE)
    words = looked_up.flat_map_values(lambda line: line.lower().split())
    grouped = words.group_by(lambda _k, word: word, key_serde=serdes.String(), value_serde=serdes.String())
    counts = grouped.count(Materialized.as_("counts").with_value_serde(serdes.Long()))
    checked = counts.to_stream().map_values_async(count_lookup, max_in_flight=32)
    checked.to(os.environ["WC_OUTPUT"], key_serde=serdes.String(), value_serde=serdes.Long())
    return builder.build()


def versioned_prices() -> Any:
    """A versioned table of prices and a plain one of stock (tests/kafka/test_versioned_queries.py)."""
    from tests.kafka.test_versioned_queries import topology

    return topology(os.environ["VQ_PRICES"], os.environ["VQ_STOCK"])
