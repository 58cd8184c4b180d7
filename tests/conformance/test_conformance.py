"""Differential conformance: every scenario of scenarios.json, run through kappaflow's TopologyTestDriver,
must produce exactly what Kafka Streams 4.3.1's TopologyTestDriver produced (golden.json): the same records
on the same topics, with the same keys, values and timestamps, after the same input, and the same store
contents. The Java half (java/, java_golden.py) writes golden.json; ``make conformance-golden`` refreshes it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from kappaflow.api.serdes import Long, String
from kappaflow.testing import TopologyTestDriver
from tests.conformance import java_golden
from tests.conformance.topologies import build

SCENARIOS: list[dict[str, Any]] = json.loads(java_golden.SCENARIOS.read_text())["scenarios"]
GOLDEN: dict[str, Any] = json.loads(java_golden.GOLDEN.read_text())

# Scenarios that do not match Java yet, each listed by id with the reason, reported as xfail(strict): the
# moment one matches it turns into a failure and must be removed from here. Nothing is skipped silently.
PENDING: dict[str, str] = {}

CACHE_BYTES = 10 * 1024 * 1024


def run_scenario(scenario: dict[str, Any]) -> dict[str, Any]:
    """Pipe the scenario's steps through kappaflow; collect outputs per step and the requested stores."""
    topology, outputs = build(scenario["topology"], scenario.get("params", {}))
    config = {
        "application.id": "conformance",
        "default.key.serde": "String",
        "default.value.serde": "String",
        "statestore.cache.max.bytes": CACHE_BYTES if scenario.get("cache", True) else 0,
    }
    if scenario.get("handler") == "continue":
        config["processing.exception.handler"] = "log_and_continue"
    records: list[list[Any]] = []
    keys: set[str] = set()
    with TopologyTestDriver(topology, config, initial_wall_clock_time=0) as driver:
        inputs: dict[str, Any] = {}
        readers = {
            name: driver.create_output_topic(name, String(), Long() if kind == "long" else String())
            for name, kind in outputs.items()
        }
        for index, step in enumerate(scenario["steps"]):
            topic = step[0]
            if topic == "@wall":
                driver.advance_wall_clock_time(step[1])
            else:
                if topic not in inputs:
                    inputs[topic] = driver.create_input_topic(topic, String(), String())
                if step[1] is not None:
                    keys.add(step[1])
                inputs[topic].pipe_input(step[1], step[2], step[3])
            for name, reader in readers.items():
                for record in reader.read_records_to_list():
                    records.append([index, name, record.key, record.value, record.timestamp])
        result: dict[str, Any] = {"records": records}
        if "stores" in scenario:
            result["stores"] = {
                name: dump_store(driver, kind, name, keys) for kind, name in scenario["stores"]
            }
    return result


def _windowed(key: Any) -> str:
    return f"{key.key}@{key.window.start}/{key.window.end}"


def dump_store(driver: TopologyTestDriver, kind: str, name: str, keys: set[str]) -> list[list[Any]]:
    if kind == "kv":
        return [[key, value] for key, value in driver.get_key_value_store(name).all()]
    if kind == "window":
        return [[_windowed(key), value] for key, value in driver.get_window_store(name).all()]
    if kind == "session":
        view = driver.get_session_store(name)
        return [[_windowed(key), value] for wanted in sorted(keys) for key, value in view.fetch(wanted)]
    raise ValueError(f"unknown store kind {kind!r}")


def _describe(records: list[list[Any]]) -> str:
    return "\n".join(f"  after #{r[0]} {r[1]}: {r[2]!r} -> {r[3]!r} @ {r[4]}" for r in records)


def _params() -> list[Any]:
    params = []
    for scenario in SCENARIOS:
        marks = []
        if scenario["id"] in PENDING:
            marks.append(pytest.mark.xfail(reason=PENDING[scenario["id"]], strict=True))
        params.append(pytest.param(scenario, id=scenario["id"], marks=marks))
    return params


@pytest.mark.parametrize("scenario", _params())
def test_matches_kafka_streams(scenario: dict[str, Any]) -> None:
    expected = GOLDEN["scenarios"][scenario["id"]]
    actual = run_scenario(scenario)
    if actual["records"] != expected["records"]:
        pytest.fail(
            f"{scenario['id']}: output differs from Kafka Streams\n"
            f"Kafka Streams:\n{_describe(expected['records'])}\nkappaflow:\n{_describe(actual['records'])}"
        )
    assert actual.get("stores") == expected.get("stores")


def test_every_scenario_has_a_golden_result() -> None:
    assert sorted(GOLDEN["scenarios"]) == sorted(s["id"] for s in SCENARIOS)
    assert set(PENDING) <= {s["id"] for s in SCENARIOS}


def _java_ready() -> bool:
    return java_golden.java_available() and java_golden.jars_cached()


# Skipped only outside CI: `make test` compiles the Java half first (`conformance-jars`).
@pytest.mark.skipif(
    not _java_ready() and not os.environ.get("CI"),
    reason="needs javac/java 17+ and the cached Kafka Streams jars",
)
def test_golden_file_is_current(tmp_path: Path) -> None:
    """Regenerate the golden file from the Java half and compare: scenarios.json, the Java topologies and
    golden.json cannot drift apart unnoticed."""
    fresh = tmp_path / "golden.json"
    java_golden.write_golden(fresh)
    assert json.loads(fresh.read_text()) == GOLDEN, "golden.json is stale: run `make conformance-golden`"
