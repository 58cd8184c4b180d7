"""Root test configuration: harness fixtures for the real Kafka broker and Kubernetes control plane.

Each tier's fixtures live in a plugin module under tests/harness so that the unit tier imports nothing
heavy; the fixtures start their servers lazily, only when a test asks for them.
"""

from __future__ import annotations

import os
import sys

import pytest

#: The in-process operator's periods in the tests: its resync (status refresh, autoscaler ticks) and how
#: soon a handler waiting on a Job, topics or a Spark run looks again (x5 after an error). The operator
#: reads both once, when its modules are first imported, and test modules import them at collection
#: (test_chart, test_leader_election_kube): set here, before any test module loads, or every in-process
#: operator of the session runs at the production 15 s and 3 s and each wait takes that much longer.
OPERATOR_PERIODS = {"KAPPAFLOW_OPERATOR_RESYNC_SECONDS": "2", "KAPPAFLOW_OPERATOR_RETRY_SECONDS": "1"}
for _name, _seconds in OPERATOR_PERIODS.items():
    os.environ.setdefault(_name, _seconds)

pytest_plugins = [
    "tests.harness.kafka_fixtures",
    "tests.harness.kube_fixtures",
    "tests.harness.registry_fixtures",
    "tests.harness.realnode_fixtures",
]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--python-drain",
        action="store_true",
        help="run the tasks' drain loop in Python although the native core (kappaflow_native) is "
        "installed: `make test` runs the in-process tiers once more this way, so both loops pass them",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--python-drain"):
        sys.modules["kappaflow_native"] = None  # type: ignore[assignment]  # makes its import fail


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The --python-drain pass hides the native core, so the tests comparing the core with the Python
    paths (marked `native_core`) cannot run there: deselected, not skipped (they ran in the first pass)."""
    if not config.getoption("--python-drain"):
        return
    kept = [item for item in items if item.get_closest_marker("native_core") is None]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept
