"""A registry that cannot be reached is not a poison record: the task fails instead of skipping.

With log_and_continue handlers, a DeserializationError or a processing error is skipped (to the
dead-letter topic when one is set). A registry outage would then drop every good record for its length,
so registry serdes raise SchemaRegistryUnavailableError, which no handler swallows. No registry runs here:
the URL points at a closed port.
"""

from __future__ import annotations

import socket

import pytest

from kappaflow import SchemaRegistryUnavailableError, StreamsBuilder, serdes
from kappaflow.testing import TopologyTestDriver
from tests.registry.schemas import PAGE_COUNT, PAGE_VIEW_V1

pytestmark = pytest.mark.timeout(60)

SKIP_FAILURES = {
    "default.deserialization.exception.handler": "log_and_continue",
    "processing.exception.handler": "log_and_continue",
}


@pytest.fixture
def dead_registry() -> dict[str, str | int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # nothing listens there now; no retries, so each attempt fails at once
    return {"url": f"http://127.0.0.1:{port}", "max.retries": 0}


def test_source_fails_the_task_instead_of_skipping_good_records(dead_registry):
    builder = StreamsBuilder()
    builder.stream(
        "views", key_serde=serdes.String(), value_serde=serdes.Avro(dead_registry, PAGE_VIEW_V1)
    ).to("out", key_serde=serdes.String(), value_serde=serdes.Json())
    with TopologyTestDriver(builder.build(), SKIP_FAILURES) as driver:
        views = driver.create_input_topic("views", serdes.String(), serdes.Bytes())
        out = driver.create_output_topic("out", serdes.String(), serdes.Json())
        views.pipe_input("a", b"unframed: a poison record, skipped by the handler")
        assert out.is_empty()
        with pytest.raises(SchemaRegistryUnavailableError, match="could not be reached or failed"):
            views.pipe_input("b", b"\x00\x00\x00\x00\x01\x02a")


def test_sink_fails_the_task_instead_of_skipping_the_record(dead_registry):
    builder = StreamsBuilder()
    builder.stream("in", key_serde=serdes.String(), value_serde=serdes.Json()).to(
        "out", key_serde=serdes.String(), value_serde=serdes.Avro(dead_registry, PAGE_COUNT)
    )
    with TopologyTestDriver(builder.build(), SKIP_FAILURES) as driver:
        source = driver.create_input_topic("in", serdes.String(), serdes.Json())
        with pytest.raises(SchemaRegistryUnavailableError, match="topic 'out'"):
            source.pipe_input("home", {"page": "home", "views": 1})
