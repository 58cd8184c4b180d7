"""Root test configuration: harness fixtures for the real Kafka broker and Kubernetes control plane.

Each tier's fixtures live in a plugin module under tests/harness so that the unit tier imports nothing
heavy; the fixtures start their servers lazily, only when a test asks for them.
"""

from __future__ import annotations

import pytest

pytest_plugins = [
    "tests.harness.kafka_fixtures",
    "tests.harness.kube_fixtures",
    "tests.harness.registry_fixtures",
]

_SERVER_TIERS = ("kafka", "kube", "spark", "registry")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests against real servers (broker, control plane, Spark, and the e2e tier that uses all of them)
    wait on processes sharing two cores; under a full run one of them occasionally misses a deadline.
    They get one rerun, reported by pytest as `rerun`, so a timing flake is visible without failing CI.
    The unit tier is deterministic and gets none."""
    for item in items:
        server_test = any(item.get_closest_marker(tier) for tier in _SERVER_TIERS)
        if server_test or "tests/e2e/" in item.nodeid:
            item.add_marker(pytest.mark.flaky(reruns=1, reruns_delay=2))
