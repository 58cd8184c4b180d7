"""The real-node tier: the project's images as containers on a real kubelet, with volumes, DNS, Services,
the chart's operator and Kafka as pods. Fixtures here are shared by the tier's modules: Kafka and the
operator are deployed once per session, each test uses namespaces of its own.

Most tests run on the single broker of examples/k8s/kafka/kafka.yaml. Tests that ask for `kafka3` (a
broker's failure needs replicas to fail over to) get the three brokers of kafka-3.yaml in a namespace of
the session's own; when any selected test asks for it, it is applied together with the single broker at
the session's start, so its brokers start while the single one does instead of inside the test.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.harness.realnode_fixtures import RealNode
from tests.realnode.cluster import ClusterKafka, deploy_kafka, install_operator
from tests.realnode.kafka3 import start_kafka3, wait_kafka3

_KAFKA3_WANTED = pytest.StashKey[bool]()


@pytest.hookimpl(trylast=True)  # after `-k`/`-m` deselected what does not run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    config.stash[_KAFKA3_WANTED] = any("kafka3" in getattr(item, "fixturenames", ()) for item in items)


@pytest.fixture(scope="session")
def kafka3_namespace() -> str:
    return f"kafka3-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="session")
def cluster_kafka(real_node: RealNode, kafka3_namespace: str, pytestconfig: pytest.Config) -> ClusterKafka:
    if pytestconfig.stash.get(_KAFKA3_WANTED, False):
        start_kafka3(real_node, kafka3_namespace)
    return deploy_kafka(real_node)


@pytest.fixture(scope="session")
def kafka3(real_node: RealNode, cluster_kafka: ClusterKafka, kafka3_namespace: str) -> Iterator[ClusterKafka]:
    """The three brokers, Ready, with the example's topics (3 replicas each)."""
    start_kafka3(real_node, kafka3_namespace)  # a no-op when the session's start applied it
    try:
        yield wait_kafka3(real_node, kafka3_namespace)
    finally:  # the node may be the user's, left running: no brokers idling on after the tier
        real_node.kubectl("delete", "namespace", kafka3_namespace, "--wait=false", check=False)


@pytest.fixture(scope="session")
def operator_release(real_node: RealNode, cluster_kafka: ClusterKafka) -> str:
    """The operator installed with its Helm chart (two replicas, one leader); its namespace."""
    install_operator(real_node, replicas=2)
    return "kappaflow-system"
