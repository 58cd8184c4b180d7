"""The broker a benchmark runs against: the one given with --bootstrap, else the project's own.

Every bench starts the same single-node KRaft broker (tests/harness/kafka_broker.py) on free ports when
no bootstrap address is given, and stops it at the end; this is that one piece, shared.

A fresh broker has no producer ids yet: the first idempotent producer's InitProducerId is answered
"coordinator load in progress" and librdkafka asks again later, so whichever engine ran first on it
stalled before its first send (the at_least_once word count of `bench/throughput.py`'s 50k lines ran at
0.53 of the hand-written floor that way, 0.99 on 200k lines). The broker started here hands out its
first producer id before any bench run: that start-up belongs to the broker, not to an engine.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import Producer
from tests.harness.kafka_broker import LocalKafkaBroker
from tests.harness.kafka_fixtures import free_port


@contextmanager
def bench_broker(bootstrap: str) -> Iterator[tuple[str, LocalKafkaBroker | None]]:
    """(bootstrap servers, the broker started here or None when `bootstrap` was given)."""
    if bootstrap:
        yield bootstrap, None
        return
    data_dir = Path(tempfile.mkdtemp(prefix="kafka-bench-"))
    broker = LocalKafkaBroker(free_port(), data_dir, controller_port=free_port())
    print("==> starting the broker", flush=True)
    broker.start()
    try:
        warm_producer_ids(broker.bootstrap_servers)
        yield broker.bootstrap_servers, broker
    finally:
        broker.stop()
        shutil.rmtree(data_dir, ignore_errors=True)  # a bench's log segments are hundreds of MB


def warm_producer_ids(bootstrap: str) -> None:
    """Block until the broker has handed out a producer id (a transactional producer's init waits for
    it, through the coordinator's loading; an idempotent producer's start does not wait)."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "bench-warm-producer-ids"})
    producer.init_transactions(120)
    producer.flush(10)
