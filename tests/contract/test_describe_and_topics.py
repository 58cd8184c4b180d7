"""`kappaflow describe --json` and the internal topics: the operator reads what the runtime writes, and
both sides name the topics and size them the same.

The operator plans and creates the internal topics from the published description
(`kappaflow_operator.topics.plan_internal_topics`); the runtime checks them from its own topology before
it starts (`kappaflow.runner.topics.prepare_topics`). A disagreement is a pod that refuses to start on
topics the operator made, so the two are compared on every example topology and some edge cases.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterable, Mapping
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from kappaflow import JoinWindows, Materialized, StreamsBuilder, StreamsConfig, Topology, serdes
from kappaflow.cli import main
from kappaflow.clients.admin import TopicPlan
from kappaflow.runner.topics import prepare_topics
from kappaflow_contract.describe import SCHEMA_VERSION
from kappaflow_contract.topics import changelog_topic, internal_topic_name, repartition_short_name
from kappaflow_operator.models import TopologyDescription
from kappaflow_operator.topics import internal_topic_names, plan_internal_topics

EXAMPLES = [
    "examples.wordcount:build_topology",
    "examples.pageview_join:build_topology",
    "examples.windowed_fraud:build_topology",
    "examples.queryable_app:build_topology",
]
APP = "app"


def _example(entry: str) -> Topology:
    module, attr = entry.split(":")
    topology: Topology = getattr(importlib.import_module(module), attr)()
    return topology


def _chained() -> Topology:
    """A repartition fed by a sub-topology that reads a repartition topic; an explicit count downstream."""
    s = serdes.String()
    builder = StreamsBuilder()
    counts = (
        builder.stream("words", key_serde=s, value_serde=s)
        .group_by(lambda k, v: v)
        .count(Materialized.as_("by-word"))
    )
    counts.to_stream().group_by(lambda k, v: str(v)).count(Materialized.as_("by-count"))
    builder.stream("other", key_serde=s, value_serde=s).repartition(
        number_of_partitions=6
    ).group_by_key().count(Materialized.as_("fixed"))
    return builder.build()


def _joined() -> Topology:
    """A stream-stream join after a key change: two repartition topics and two join stores."""
    s = serdes.String()
    builder = StreamsBuilder()
    left = builder.stream("left", key_serde=s, value_serde=s).select_key(lambda k, v: v)
    right = builder.stream("right", key_serde=s, value_serde=s)
    left.join(right, lambda a, b: a + b, JoinWindows.of_time_difference_and_grace(timedelta(minutes=1), 0))
    return builder.build()


TOPOLOGIES = {entry: _example(entry) for entry in EXAMPLES} | {"chained": _chained(), "joined": _joined()}


@pytest.mark.parametrize("entry", EXAMPLES)
def test_describe_json_of_every_example_parses_with_the_operators_model(
    entry: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["describe", entry, "--json"]) == 0
    out = capsys.readouterr().out
    description = TopologyDescription.parse(out)
    assert description.schema_version == SCHEMA_VERSION == json.loads(out)["schema_version"]
    topology = TOPOLOGIES[entry]
    assert description.source_topics == topology.source_topics()
    assert len(description.sub_topologies) == len(topology.sub_topologies())
    # the operator deletes (topicCleanupPolicy: Delete) exactly the topics the runtime uses
    assert internal_topic_names(description, APP) == sorted(topology.internal_topic_names(APP))


@pytest.mark.parametrize("name", ["chained", "joined"])
def test_describe_of_edge_cases_parses_too(name: str) -> None:
    TopologyDescription.model_validate(TOPOLOGIES[name].describe().to_dict())


def test_schema_version() -> None:
    data = TOPOLOGIES["chained"].describe().to_dict()
    current = TopologyDescription.model_validate(data)
    older = TopologyDescription.model_validate({k: v for k, v in data.items() if k != "schema_version"})
    assert older.schema_version == 1
    # a runtime that starts writing the version describes the same topology: pods do not roll
    assert older.fingerprint() == current.fingerprint()
    with pytest.raises(ValidationError, match="schema_version"):
        TopologyDescription.model_validate({**data, "schema_version": SCHEMA_VERSION + 1})


def test_topic_configs_are_strings_as_the_schema_says() -> None:
    """A store's log config given as numbers still describes to a document the operator accepts."""
    s = serdes.String()
    builder = StreamsBuilder()
    logged = Materialized.as_("c").with_logging_enabled({"retention.ms": 1000, "min.insync.replicas": 2})
    builder.stream("in", key_serde=s, value_serde=s).group_by_key().count(logged)
    data = builder.build().describe().to_dict()
    topic = TopologyDescription.model_validate(data).internal_topics[0]
    assert topic.config["retention.ms"] == "1000"


def test_one_name_per_fact() -> None:
    assert changelog_topic("wc", "counts") == "wc-counts-changelog"
    assert internal_topic_name("wc", repartition_short_name("counts")) == "wc-counts-repartition"
    wordcount = TOPOLOGIES["examples.wordcount:build_topology"]
    assert sorted(wordcount.internal_topic_names("wc")) == ["wc-counts-changelog", "wc-counts-repartition"]


# ----------------------------------------------------------------- the partition rule, from both sides
class _Admin:
    """The admin calls `prepare_topics` makes, answered from `counts`; remembers what it would create."""

    def __init__(self, counts: Mapping[str, int]) -> None:
        self.counts = dict(counts)
        self.wanted: dict[str, int] = {}

    def require_topics(self, topics: Iterable[str]) -> dict[str, int]:
        return {t: self.counts[t] for t in set(topics)}

    def partition_counts(self, topics: Iterable[str], settle_s: float = 0.0) -> dict[str, int]:
        """The output and dead-letter topics `prepare_topics` checks: here they all exist."""
        return {t: self.counts.get(t, 1) for t in topics}

    def ensure(self, plans: list[TopicPlan], wanted: Mapping[str, int], create: bool, rf: int = -1) -> None:
        self.wanted = dict(wanted)

    @staticmethod
    def check_copartitioned(groups: list[list[str]], counts: Mapping[str, int]) -> None:
        pass  # co-partitioning is the runtime's own check, not part of the rule compared here


def _runtime_counts(topology: Topology, counts: Mapping[str, int]) -> dict[str, int]:
    admin = _Admin(counts)
    config = StreamsConfig({"application.id": APP, "bootstrap.servers": "unused:9092"})
    prepare_topics(topology, config, admin)  # type: ignore[arg-type]
    return admin.wanted


def _operator_counts(topology: Topology, counts: Mapping[str, int]) -> dict[str, int]:
    description = TopologyDescription.parse(topology.describe().to_json())
    plan = plan_internal_topics(description, APP, counts)
    assert plan.ready, plan.problems()
    return {spec.name: spec.partitions for spec in plan.to_create}


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_partition_rule_gives_the_same_counts_on_both_sides(name: str, data: st.DataObject) -> None:
    topology = TOPOLOGIES[name]
    counts = {t: data.draw(st.integers(1, 64), label=t) for t in sorted(set(topology.source_topics()))}
    runtime = _runtime_counts(topology, counts)
    assert runtime == _operator_counts(topology, counts)
    assert set(runtime) == set(topology.internal_topic_names(APP))


def test_the_rule_itself() -> None:
    chained = TOPOLOGIES["chained"]
    counts = _runtime_counts(chained, {"words": 3, "other": 2})
    assert counts[changelog_topic(APP, "fixed")] == 6  # an explicit count flows downstream
    assert counts[changelog_topic(APP, "by-count")] == 3  # through two repartition topics
    joined = _runtime_counts(TOPOLOGIES["joined"], {"left": 4, "right": 4})
    assert set(joined.values()) == {4}


def test_replicated_internal_topics_require_two_in_sync_replicas_from_three():
    from kappaflow_contract.topics import replicated_topic_config

    compacted = {"cleanup.policy": "compact"}
    assert replicated_topic_config(compacted, 3) == {"cleanup.policy": "compact", "min.insync.replicas": "2"}
    assert replicated_topic_config(compacted, 5)["min.insync.replicas"] == "2"
    for one_broker in (-1, 1, 2):  # the broker's default, and factors where 2 would block on one loss
        assert replicated_topic_config(compacted, one_broker) == compacted
    assert replicated_topic_config({"min.insync.replicas": "3"}, 3) == {"min.insync.replicas": "3"}
