"""The real-node tier: the project's images as containers on a real kubelet, with volumes, DNS, Services,
the chart's operator and Kafka as pods. Fixtures here are shared by the tier's modules: Kafka and the
operator are deployed once per session, each test uses namespaces of its own."""

from __future__ import annotations

import pytest

from tests.harness.realnode_fixtures import RealNode
from tests.realnode.cluster import ClusterKafka, deploy_kafka, install_operator


@pytest.fixture(scope="session")
def cluster_kafka(real_node: RealNode) -> ClusterKafka:
    return deploy_kafka(real_node)


@pytest.fixture(scope="session")
def operator_release(real_node: RealNode, cluster_kafka: ClusterKafka) -> str:
    """The operator installed with its Helm chart (two replicas, one leader); its namespace."""
    install_operator(real_node, replicas=2)
    return "kappaflow-system"
