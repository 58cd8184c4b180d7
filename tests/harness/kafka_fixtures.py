"""Pytest fixtures for the real local Kafka broker (a plugin loaded by tests/conftest.py).

The broker is session-scoped because a JVM start costs seconds; isolation between tests comes from
uniquely named topics (``kafka_topics``) and group ids, not from fresh brokers. Nothing starts unless a
test asks for ``kafka_broker``/``kafka_bootstrap``, so the unit tier stays free of Java. Setting
``KAPPAFLOW_TEST_BOOTSTRAP=host:port`` points the fixtures at an already running broker (for example
one from ``make kafka-up``) instead of starting one.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Mapping

import pytest

from tests.harness.kafka_broker import BrokerError, LocalKafkaBroker

TopicFactory = Callable[..., str]


def free_port() -> int:
    """A port free on 127.0.0.1 right now (the OS picks it; a race with other processes is possible)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafkaBroker | None]:
    """The session's broker, or None when ``KAPPAFLOW_TEST_BOOTSTRAP`` names an external one."""
    if os.environ.get("KAPPAFLOW_TEST_BOOTSTRAP"):
        yield None
        return
    last_error: BrokerError | None = None
    # Free ports are picked by binding port 0 and releasing it, so another process may grab one before
    # the JVM binds it: retry with new ports rather than fail the whole session on that race.
    for attempt in range(3):
        broker = LocalKafkaBroker(
            free_port(),
            tmp_path_factory.mktemp(f"kafka{attempt}"),
            controller_port=free_port(),
        )
        try:
            broker.start()
        except BrokerError as err:
            last_error = err
            continue
        try:
            yield broker
        finally:
            broker.stop()
        return
    raise last_error if last_error is not None else BrokerError("Kafka broker did not start")


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker: LocalKafkaBroker | None) -> str:
    """``bootstrap.servers`` for clients in tests."""
    external = os.environ.get("KAPPAFLOW_TEST_BOOTSTRAP")
    if external:
        return external
    assert kafka_broker is not None
    return kafka_broker.bootstrap_servers


def wait_for_topics(admin: object, names: list[str], timeout: float = 30.0) -> None:
    """Block until metadata shows every topic with all partitions led (a new topic is usable then)."""
    deadline = time.monotonic() + timeout
    while True:
        metadata = admin.list_topics(timeout=5)  # type: ignore[attr-defined]
        ready = [
            name
            for name in names
            if name in metadata.topics
            and metadata.topics[name].error is None
            and metadata.topics[name].partitions
            and all(p.leader >= 0 for p in metadata.topics[name].partitions.values())
        ]
        if len(ready) == len(names):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topics not ready after {timeout}s: {sorted(set(names) - set(ready))}")
        time.sleep(0.05)


@pytest.fixture
def kafka_topics(kafka_bootstrap: str, request: pytest.FixtureRequest) -> Iterator[TopicFactory]:
    """A factory: ``create(prefix, partitions=1, config=None) -> name`` makes a uniquely named topic.

    Names are ``<prefix>-<test name>-<random>``, so repeated and parallel sessions against an external
    broker never collide. The topics are deleted after the test (best effort: a shared external broker
    should not fill up, while a broken delete must not fail a passing test).
    """
    # NewTopic is re-exported by confluent_kafka.admin without __all__, so mypy --strict needs the ignore.
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    created: list[str] = []
    test_name = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60].strip("-")

    def create(name_prefix: str, partitions: int = 1, config: Mapping[str, str] | None = None) -> str:
        name = f"{name_prefix}-{test_name}-{uuid.uuid4().hex[:8]}"
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1, config=dict(config or {}))],
            operation_timeout=30,
        )
        futures[name].result(timeout=60)
        created.append(name)
        wait_for_topics(admin, [name])
        return name

    yield create
    if created:
        for future in admin.delete_topics(created, operation_timeout=30).values():
            try:
                future.result(timeout=30)
            except Exception as err:
                print(f"kafka_topics: could not delete a topic: {err}")


__all__ = ["TopicFactory", "free_port", "kafka_bootstrap", "kafka_broker", "kafka_topics", "wait_for_topics"]
