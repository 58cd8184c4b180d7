"""Root test configuration: harness fixtures for the real Kafka broker and Kubernetes control plane.

Each tier's fixtures live in a plugin module under tests/harness so that the unit tier imports nothing
heavy; the fixtures start their servers lazily, only when a test asks for them.
"""

from __future__ import annotations

import os

#: The in-process operator's resync period (status refresh, autoscaler ticks) in the tests.
#: kappaflow_operator.main reads it once, at its first import, and test modules import it at collection
#: (test_chart, test_leader_election_kube): set here, before any test module loads, or every in-process
#: operator of the session resyncs at the 15 s production default and each wait for a pass takes that long.
OPERATOR_RESYNC_SECONDS = "2"
os.environ.setdefault("KAPPAFLOW_OPERATOR_RESYNC_SECONDS", OPERATOR_RESYNC_SECONDS)

pytest_plugins = [
    "tests.harness.kafka_fixtures",
    "tests.harness.kube_fixtures",
    "tests.harness.registry_fixtures",
]
