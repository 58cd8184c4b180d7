"""examples/async_enrichment.py against its real local HTTP profile service (a subprocess on loopback),
in the test driver: every click enriched in order per user; a lookup that fails after its retries goes
to the dead-letter topic."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from examples.async_enrichment import CLICKS, ENRICHED, build_topology

from kappaflow import serdes
from kappaflow.testing import TopologyTestDriver

S = serdes.String()
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def profile_service() -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "examples.async_enrichment", "serve", str(port)], cwd=ROOT
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(10)


def test_clicks_are_enriched_over_http_and_failures_go_to_the_dead_letter_topic(profile_service):
    config = {
        "processing.exception.handler": "log_and_continue",
        "errors.dead.letter.queue.topic.name": "dlq",
    }
    with TopologyTestDriver(build_topology(profile_service), config) as driver:
        clicks = driver.create_input_topic(CLICKS, S, S)
        clicks.pipe_key_value_list([("ann", "/home"), ("bo", "/cart"), ("nobody", "/x"), ("ann", "/pay")])
        out = [
            (k, json.loads(v))
            for k, v in driver.create_output_topic(ENRICHED, S, S).read_key_values_to_list()
        ]
        assert out == [
            ("ann", {"user": "ann", "page": "/home", "region": "region-0"}),
            ("bo", {"user": "bo", "page": "/cart", "region": "region-2"}),
            ("ann", {"user": "ann", "page": "/pay", "region": "region-0"}),
        ]
        (dead,) = driver.create_output_topic("dlq", S, S).read_records_to_list()
        assert dead.key == "nobody" and b"404" in (
            dead.headers.last_header("__kappaflow.error.message") or b""
        )
