"""The node itself, as the other real-node tests rely on it: a non-root pod from a project image with a
volume from the default StorageClass, cluster DNS for Services, no route and no name resolution off the
machine, and an image that was never imported failing at the loopback registry."""

from __future__ import annotations

import pytest

from tests.harness.realnode import selftest
from tests.harness.realnode_fixtures import RealNode

pytestmark = [pytest.mark.realnode, pytest.mark.timeout(300)]


def test_pods_volumes_dns_and_the_network_rule(real_node: RealNode) -> None:
    namespace = real_node.create_namespace("node")
    try:
        times = selftest.check(namespace)
        print("node checks:", ", ".join(f"{k} {v:.1f}s" for k, v in times.items()))
    finally:
        real_node.kubectl("delete", "namespace", namespace, "--wait=false")
