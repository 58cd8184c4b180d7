"""Root test configuration: harness fixtures for the real Kafka broker and Kubernetes control plane.

Each tier's fixtures live in a plugin module under tests/harness so that the unit tier imports nothing
heavy; the fixtures start their servers lazily, only when a test asks for them.

No test is rerun on failure: a server-tier test that misses a deadline under load is a bug to find (a
wait on the wrong condition, a restore that stops early), not noise to retry away. A test with a real,
explained timing race may carry its own `@pytest.mark.flaky(reruns=1)` next to the explanation.
"""

from __future__ import annotations

pytest_plugins = [
    "tests.harness.kafka_fixtures",
    "tests.harness.kube_fixtures",
]
