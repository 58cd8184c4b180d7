"""The broker a benchmark runs against: the one given with --bootstrap, else the project's own.

Every bench starts the same single-node KRaft broker (tests/harness/kafka_broker.py) on free ports when
no bootstrap address is given, and stops it at the end; this is that one piece, shared.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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
        yield broker.bootstrap_servers, broker
    finally:
        broker.stop()
        shutil.rmtree(data_dir, ignore_errors=True)  # a bench's log segments are hundreds of MB
