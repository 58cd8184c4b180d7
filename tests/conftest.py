"""Root test configuration: harness fixtures for the real Kafka broker and Kubernetes control plane.

Each tier's fixtures live in a plugin module under tests/harness so that the unit tier imports nothing
heavy; the fixtures start their servers lazily, only when a test asks for them.
"""

from __future__ import annotations

pytest_plugins = [
    "tests.harness.kafka_fixtures",
    "tests.harness.kube_fixtures",
    "tests.harness.registry_fixtures",
]
