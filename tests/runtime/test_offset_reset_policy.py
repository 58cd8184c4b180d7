"""KIP-1106's decision, without a broker: which never-committed partitions start where (the broker test,
tests/kafka/test_offset_reset.py, runs it for real), and the API's validation."""

from __future__ import annotations

from datetime import timedelta

import pytest

from kappaflow import AutoOffsetReset, Consumed, StreamsBuilder, serdes
from kappaflow.api.errors import StreamsError, TopologyError
from kappaflow.runner.offset_reset import StartAt, start_positions


def test_start_positions_follow_each_topics_policy_for_uncommitted_partitions_only() -> None:
    policies = {
        "a": AutoOffsetReset.earliest(),
        "b": AutoOffsetReset.latest(),
        "c": AutoOffsetReset.by_duration(timedelta(minutes=1)),
    }
    partitions = [("a", 0), ("a", 1), ("b", 0), ("c", 0), ("plain", 0)]
    starts = start_positions(partitions, {("a", 1): 42, ("b", 0): -1001}, policies, now_ms=100_000)
    assert starts == {
        ("a", 0): StartAt("beginning"),  # ("a", 1) is committed: it resumes there
        ("b", 0): StartAt("end"),  # a negative (invalid) committed offset is no commit
        ("c", 0): StartAt("timestamp", 40_000),
    }  # "plain" has no policy: auto.offset.reset decides


def test_none_without_a_committed_offset_is_an_error_naming_the_partitions() -> None:
    policies = {"t": AutoOffsetReset.none()}
    assert start_positions([("t", 0)], {("t", 0): 5}, policies, 0) == {}
    with pytest.raises(StreamsError, match=r"no committed offset for t-0, t-2 .*AutoOffsetReset.none"):
        start_positions([("t", 2), ("t", 0)], {}, policies, 0)


def test_policies_reach_the_topology_and_bad_ones_are_refused() -> None:
    s = serdes.String()
    builder = StreamsBuilder()
    builder.stream("live", consumed=Consumed(s, s).with_offset_reset_policy(AutoOffsetReset.latest()))
    builder.stream("other", consumed=Consumed(s, s)).select_key(lambda k, v: v).group_by_key().count()
    recent = AutoOffsetReset.by_duration(timedelta(hours=1))
    builder.table("table", consumed=Consumed(s, s).with_offset_reset_policy(recent))
    topology = builder.build()
    assert topology.offset_reset_policies() == {"live": AutoOffsetReset.latest(), "table": recent}
    with pytest.raises(TopologyError, match="must not be negative"):
        AutoOffsetReset.by_duration(-1)
    with pytest.raises(TypeError, match="expected an AutoOffsetReset"):
        Consumed(s, s).with_offset_reset_policy("latest")  # type: ignore[arg-type]
