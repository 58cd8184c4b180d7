"""Differential naming: kappaflow's `describe()` text and internal topic names against Kafka Streams 4.3.1's.

Generated node names are what internal topic and store names are built from, so a kappaflow app and its
Java twin must name every node, store and topic alike (issue 27, item 8): a team moving an app from one
to the other keeps its changelogs and repartition topics. The Java half (java/Describe.java) writes, for
every topology of scenarios.json and for the Java twins of the example apps, `Topology.describe()`'s text
and the internal topics `InternalTopologyBuilder` plans for application id "app" into
describe_golden.json, with the generated names `ensure.explicit.internal.resource.naming` (KIP-1111) would
refuse; here the Python twins must give the same text, byte for byte, the same topics and the same refusal.
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from kappaflow import Materialized, StreamsBuilder, Topology
from kappaflow.api.errors import TopologyError
from kappaflow.topology.naming import unnamed_internal_resources
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
    # KIP-1111: ensure.explicit.internal.resource.naming refuses the same topologies, naming what Java names
    unnamed = unnamed_internal_resources(topology)
    assert bool(unnamed) == bool(expected["unnamed"])
    named_by_java = _names(expected["unnamed"].removeprefix("Invalid topology: "))
    # Java also lists a foreign-key join's output store, which it names but never builds unless materialized
    assert {n for n in named_by_java if not n.startswith(_UNBUILT)} <= _names(unnamed.message())


_UNBUILT = "KTABLE-FK-JOIN-OUTPUT-STATE-STORE-"


def _names(message: str) -> set[str]:
    """The resource names of a `Following ... has not been named: a, b` message."""
    return {n for line in message.splitlines() if ": " in line for n in line.split(": ", 1)[1].split(", ")}


def test_every_topology_has_a_golden_description() -> None:
    assert sorted(GOLDEN["scenarios"]) == sorted(s["id"] for s in SCENARIOS)
    assert set(PENDING) <= {s["id"] for s in SCENARIOS}
    examples = {e.split(":")[0] for e in GOLDEN["examples"]}
    # every example app has its Java twin (run_wordcount.py runs wordcount's topology, it has none of its
    # own; async_enrichment uses map_values_async, which Kafka Streams does not have)
    modules = {f"examples.{p.stem}" for p in (java_golden.ROOT / "examples").glob("*.py")}
    assert examples == modules - {"examples.__init__", "examples.run_wordcount", "examples.async_enrichment"}


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


def test_build_with_explicit_naming_refuses_generated_names_and_names_them() -> None:
    """KIP-1111 through the public API: `build(props)` raises naming each resource, and builds the named
    twin (the example apps, named as Java's examples are) without complaint."""
    props = {"ensure.explicit.internal.resource.naming": "true"}
    builder = StreamsBuilder()
    keyed = builder.stream("in").select_key(lambda k, v: v)
    keyed.group_by_key().count().to_stream().to("out")
    with pytest.raises(TopologyError) as refused:
        builder.build(props)
    store = "KSTREAM-AGGREGATE-STATE-STORE-0000000002"  # named before its processor, as in Java
    assert str(refused.value).splitlines()[1:] == [
        f"Following changelog topic(s) has not been named: {store}-changelog",
        f"Following state store(s) has not been named: {store}",
        f"Following repartition topic(s) has not been named: {store}-repartition",
    ]
    builder.build()  # without props, or with the key false, nothing is checked (Java's default)
    builder.build({"ensure.explicit.internal.resource.naming": False})
    named = StreamsBuilder()
    named.stream("in").select_key(lambda k, v: v).group_by_key().count(Materialized.as_("counts"))
    assert named.build(props).internal_topic_names(APP) == ["app-counts-repartition", "app-counts-changelog"]
