"""Pytest fixture for the real Schema Registry (Apicurio, see tests/harness/schema_registry.py).

Session-scoped and lazy like the broker: the JVM starts (about 8 s) only when a test asks for
``schema_registry_url``, and every test shares it, isolated by uniquely named topics and so subjects.
``KAPPAFLOW_TEST_SCHEMA_REGISTRY=http://host:port/apis/ccompat/v7`` points the tests at a running one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.harness.kafka_fixtures import free_port
from tests.harness.schema_registry import LocalSchemaRegistry, RegistryError


@pytest.fixture(scope="session")
def schema_registry_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The Confluent-compatible base URL of the session's registry."""
    external = os.environ.get("KAPPAFLOW_TEST_SCHEMA_REGISTRY")
    if external:
        yield external
        return
    last_error: RegistryError | None = None
    for attempt in range(2):  # a free port may be taken between picking and binding it
        registry = LocalSchemaRegistry(free_port(), tmp_path_factory.mktemp(f"registry{attempt}"))
        try:
            registry.start()
        except RegistryError as err:
            last_error = err
            continue
        try:
            yield registry.url
        finally:
            registry.stop()
        return
    raise last_error if last_error is not None else RegistryError("schema registry did not start")
