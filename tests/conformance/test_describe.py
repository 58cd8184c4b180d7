"""Differential naming: kappaflow's `describe()` text and internal topic names against Kafka Streams 4.3.1's.

Generated node names are what internal topic and store names are built from, so a kappaflow app and its
Java twin must name every node, store and topic alike (issue 27, item 8): a team moving an app from one
to the other keeps its changelogs and repartition topics. The Java half (java/Describe.java) writes, for
every topology of scenarios.json and for the Java twins of the example apps, `Topology.describe()`'s text
and the internal topics `InternalTopologyBuilder` plans for application id "app" into
describe_golden.json; here the Python twins must give the same text, byte for byte, and the same topics.
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from kappaflow import Topology
from tests.conformance import java_golden
from tests.conformance.topologies import build

SCENARIOS: list[dict[str, Any]] = json.loads(java_golden.SCENARIOS.read_text())["scenarios"]
GOLDEN: dict[str, Any] = json.loads(java_golden.DESCRIBE_GOLDEN.read_text())
APP = "app"

# Topologies whose description does not match Java's yet, by scenario id, with the reason; strict xfail.
PENDING: dict[str, str] = {}


def _scenario_topology(scenario: dict[str, Any]) -> Topology:
    topology, _ = build(scenario["topology"], scenario.get("params", {}))
    return topology


def _example_topology(entry: str) -> Topology:
    module, attr = entry.split(":")
    topology: Topology = getattr(importlib.import_module(module), attr)()
    return topology


def _cases() -> list[Any]:
    cases = []
    for scenario in SCENARIOS:
        marks = []
        if scenario["id"] in PENDING:
            marks.append(pytest.mark.xfail(reason=PENDING[scenario["id"]], strict=True))
        cases.append(pytest.param("scenarios", scenario["id"], id=scenario["id"], marks=marks))
    cases.extend(pytest.param("examples", entry, id=entry) for entry in sorted(GOLDEN["examples"]))
    return cases


def _topology(kind: str, key: str) -> Topology:
    if kind == "examples":
        return _example_topology(key)
    return _scenario_topology(next(s for s in SCENARIOS if s["id"] == key))


@pytest.mark.parametrize(("kind", "key"), _cases())
def test_describe_and_internal_topics_match_kafka_streams(kind: str, key: str) -> None:
    expected = GOLDEN[kind][key]
    topology = _topology(kind, key)
    text = str(topology.describe())
    assert text == expected["describe"], f"{key}: describe() differs from Kafka Streams'"
    assert sorted(topology.internal_topic_names(APP)) == expected["internal_topics"]


def test_every_topology_has_a_golden_description() -> None:
    assert sorted(GOLDEN["scenarios"]) == sorted(s["id"] for s in SCENARIOS)
    assert set(PENDING) <= {s["id"] for s in SCENARIOS}
    examples = {e.split(":")[0] for e in GOLDEN["examples"]}
    # every example app has its Java twin (run_wordcount.py runs wordcount's topology, it has none of its own)
    modules = {f"examples.{p.stem}" for p in (java_golden.ROOT / "examples").glob("*.py")}
    assert examples == modules - {"examples.__init__", "examples.run_wordcount"}


@pytest.mark.skipif(
    not (java_golden.java_available() and java_golden.jars_cached()) and not os.environ.get("CI"),
    reason="needs javac/java 17+ and the cached Kafka Streams jars",
)
def test_describe_golden_file_is_current(tmp_path: Path) -> None:
    """Regenerate describe_golden.json from the Java half: scenarios, Java twins and golden cannot drift."""
    fresh = tmp_path / "describe_golden.json"
    java_golden.write_golden(fresh, main_class="Describe")
    assert json.loads(fresh.read_text()) == GOLDEN, (
        "describe_golden.json is stale: run `make conformance-golden`"
    )
