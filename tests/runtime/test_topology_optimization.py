"""`topology.optimization` through `StreamsBuilder.build(props)` (issue 27 item 10), beyond what the
Java-golden conformance suite (`opt-` scenarios) compares: what each rewrite changes in the compiled
topology, in the internal topics the runtime and the operator create, and in restoration.

`reuse.ktable.source.topics` makes a source table's input topic its store's changelog, so restoring reads
the input: only up to the committed input offset (as Kafka Streams does; past it lie records the task
will process again), and without its null-key records (the table never stored them)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from kappaflow import Materialized, Stores, StreamsBuilder, Topology
from kappaflow.api.metrics import Metrics
from kappaflow.api.serdes import String
from kappaflow.dsl.windows import JoinWindows
from kappaflow.runner.changelog_reader import ChangelogReader
from kappaflow.runner.managed_task import ManagedTask
from kappaflow.tasks.state_manager import ProcessorStateManager, StoreMetadata
from kappaflow.testing import TopologyTestDriver
from tests.runtime.test_runner_parts import (
    FakeMessage,
    FakeRestoreConsumer,
    FakeStateManager,
    FixedBounds,
    RestoringTask,
)

S = String()
ALL = {"topology.optimization": "all"}


def _table_app(props: dict[str, Any] | None, materialized: Materialized | str | None = "users") -> Topology:
    builder = StreamsBuilder()
    users = builder.table("users", key_serde=S, value_serde=S, materialized=materialized)
    builder.stream("views", key_serde=S, value_serde=S).join(users, lambda v, u: f"{v}/{u}").to(
        "out", value_serde=S
    )
    return builder.build(props)


def test_a_reused_source_topic_is_the_changelog_and_no_internal_topic() -> None:
    topology = _table_app(ALL)
    assert topology.source_changelogs == {"users": "users"}
    assert topology.changelog_topics() == {} and topology.internal_topic_names("app") == []
    # what the runtime and the operator create internal topics from
    assert topology.describe().to_dict()["internal_topics"] == []
    # the flag alone does the same; none, another flag or no props leave the changelog
    assert _table_app({"topology.optimization": "reuse.ktable.source.topics"}).source_changelogs
    for props in (
        {"topology.optimization": "none"},
        {"topology.optimization": "merge.repartition.topics"},
        None,
    ):
        assert _table_app(props).internal_topic_names("app") == ["app-users-changelog"]


def test_an_unnamed_table_is_reused_once_a_join_materialized_it() -> None:
    topology = _table_app(ALL, materialized=None)
    (store,) = topology.source_changelogs
    assert store.startswith("users-STATE-STORE-") and topology.internal_topic_names("app") == []
    # a table nothing reads the values of has no store in Java: nothing to reuse
    builder = StreamsBuilder()
    builder.table("users", key_serde=S, value_serde=S).to_stream().to("out")
    assert builder.build(ALL).source_changelogs == {}


def test_a_versioned_source_table_keeps_its_changelog() -> None:
    """Its changelog holds the versioned store's rows, not the topic's records: restoring it from the
    topic would corrupt it, so kappaflow keeps the changelog where Java reuses the topic."""
    builder = StreamsBuilder()
    versioned = Materialized.as_(Stores.persistent_versioned_key_value_store("users", 1000))
    builder.table("users", key_serde=S, value_serde=S, materialized=versioned).to_stream().to("out")
    topology = builder.build(ALL)
    assert topology.source_changelogs == {} and topology.internal_topic_names("app") == [
        "app-users-changelog"
    ]


def test_the_driver_writes_no_changelog_and_restores_the_table_from_its_input() -> None:
    config = {"application.id": "app"}
    first = TopologyTestDriver(_table_app(ALL), config)
    users = first.create_input_topic("users", S, S)
    users.pipe_input("u1", "ann")
    users.pipe_input(None, "nobody")  # dropped by the table: must not be restored either
    users.pipe_input("u2", "bob")
    users.pipe_input("u1", "anna")
    assert not [t for t in first.produced if t.endswith("-changelog")]
    first.close()
    second = TopologyTestDriver(_table_app(ALL), config, restore_from=first)
    try:
        assert second.get_key_value_store("users").to_dict() == {"u1": "anna", "u2": "bob"}
        second.create_input_topic("views", S, S).pipe_input("u2", "home")
        assert second.create_output_topic("out", S, S).read_key_value() == ("u2", "home/bob")
    finally:
        second.close()


def test_the_committed_input_offset_is_the_stores_offset_and_writes_to_the_topic_are_not(
    tmp_path: Path,
) -> None:
    manager = ProcessorStateManager(tmp_path, 0, lambda store: store, source_changelogs=frozenset({"users"}))
    for name in ("users", "counts"):
        manager.stores[name] = StoreMetadata(name, None, lambda records: None, True, name, 0)
    manager.stores["users"].source_topic = True
    assert manager.source_changelog_partitions() == {("users", 0)}
    manager.record_written({("users", 0): 41, ("counts", 0): 9})  # a sink writing to the table's own input
    assert manager.offset("users") is None and manager.offset("counts") == 10
    manager.record_consumed({("users", 0): 17, ("views", 0): 3})
    assert manager.offset("users") == 17 and manager.offset("counts") == 10


class SourceStateManager(FakeStateManager):
    """The fake's one store, restored from a source topic (its changelog partition is an input's)."""

    def source_changelog_partitions(self) -> set[tuple[str, int]]:
        return {self.TP}


class NullKeyMessage(FakeMessage):
    def key(self) -> Any:
        return None


def _source_reader(batches: list[list[FakeMessage]], committed: int | None, standby: bool = False) -> Any:
    consumer = FakeRestoreConsumer(batches)
    asked: list[list[tuple[str, int]]] = []

    def committed_offsets(tps: list[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
        asked.append(tps)
        return dict.fromkeys(tps, committed)

    reader = ChangelogReader(
        consumer,  # type: ignore[arg-type]
        Metrics(),
        FixedBounds((0, 10)),
        committed_offsets=committed_offsets,
    )
    task = RestoringTask(SourceStateManager(None))
    managed = ManagedTask(task, lock=None, standby=standby)  # type: ignore[arg-type]
    reader.register(managed)
    return reader, consumer, managed, task, asked


def test_restoring_from_a_source_topic_stops_at_the_committed_offset() -> None:
    tp = FakeStateManager.TP
    log = [
        FakeMessage(tp, 0, b"a"),
        NullKeyMessage(tp, 1),
        FakeMessage(tp, 2, b"b"),
        FakeMessage(tp, 3, b"c"),
    ]
    # records 4..9 exist (high watermark 10) but the group committed 4: the task processes them again
    log += [FakeMessage(tp, o, b"later") for o in range(4, 10)]
    reader, consumer, managed, task, asked = _source_reader([log], committed=4)
    assert asked == [[tp]] and managed.end_offsets[tp] == 4 and consumer.assigned == [(tp[0], tp[1], -2)]
    assert reader.step() == [managed] and task.restored
    assert task.state_manager.applied == [b"a", b"b", b"c"]
    assert reader.step() == [] and task.state_manager.checkpoints == [4] and consumer.assigned == []


def test_nothing_committed_restores_nothing_and_a_standby_leaves_source_topics_alone() -> None:
    _reader, consumer, managed, _task, _asked = _source_reader([], committed=None)
    assert not managed.pending and consumer.assigned == []
    _reader, consumer, managed, _task, asked = _source_reader([], committed=7, standby=True)
    assert asked == [] and not managed.pending and consumer.assigned == []


def _self_join(optimization: str, windows: JoinWindows, kind: str = "join") -> Topology:
    builder = StreamsBuilder()
    stream = builder.stream("in", key_serde=S, value_serde=S)
    getattr(stream, kind)(stream, lambda a, b: f"{a}+{b}", windows).to("out", value_serde=S)
    return builder.build({"topology.optimization": optimization})


def test_a_self_join_keeps_one_store_and_one_join_processor() -> None:
    windows = JoinWindows.of_time_difference_and_grace(5, 3)
    plain, single = _self_join("none", windows), _self_join("single.store.self.join", windows)
    assert len(plain.stores) == 2 and len(single.stores) == 1
    assert [n for n in single.nodes if "JOIN" in n] == []  # the merge node joins
    assert single.internal_topic_names("app") == ["app-KSTREAM-JOINTHIS-0000000003-store-changelog"]
    # Java rewrites a left self-join too (every record matches itself) and drops its outer-join store
    assert len(_self_join("all", windows, "left_join").stores) == 1


def test_a_self_join_emits_what_the_two_store_join_emits() -> None:
    """KIP-862's promise, on random keys, out-of-order and duplicate times and asymmetric windows. Not
    for a record as late as the retention: Java's self-join leaves out its join with itself at exactly
    `stream time - retention + 1` where the two-store join, whose store still holds it, does not (the
    `opt-self-join-retention-boundary` scenarios pin both against Java)."""
    rng = random.Random(862)
    for before, after, grace in ((5, 5, 3), (2, 7, 0), (0, 4, 10)):
        windows = JoinWindows.of_time_difference_and_grace(before, grace).after(after)
        inputs = [(rng.choice("abc"), f"v{i}", i // 3 + rng.randrange(0, 3)) for i in range(150)]
        results = []
        for optimization in ("none", "single.store.self.join"):
            with TopologyTestDriver(_self_join(optimization, windows)) as driver:
                topic = driver.create_input_topic("in", S, S)
                for key, value, ts in inputs:
                    topic.pipe_input(key, value, ts)
                results.append(driver.create_output_topic("out", S, S).read_records_to_list())
        assert [(r.key, r.value, r.timestamp) for r in results[0]] == [
            (r.key, r.value, r.timestamp) for r in results[1]
        ]


def _rekeyed_app(optimization: str) -> Topology:
    """One key change feeding a filtered count, a reduce, a stream-table join and a windowed count."""
    builder = StreamsBuilder()
    users = builder.table("users", key_serde=S, value_serde=S, materialized="users")
    keyed = builder.stream("in", key_serde=S, value_serde=S).select_key(lambda k, v: v[:1])
    keyed.filter(lambda k, v: not v.endswith("x")).group_by_key().count("counts").to_stream().map_values(
        str
    ).to("out", value_serde=S)
    keyed.group_by_key().reduce(lambda a, c: a + c, "concat").to_stream().to("out", value_serde=S)
    keyed.join(users, lambda v, u: f"{v}/{u}").to("out", value_serde=S)
    keyed.repartition().to("copied", value_serde=S)  # a user's repartition is never merged
    return builder.build({"topology.optimization": optimization})


def test_merged_repartitions_share_one_topic_and_give_the_same_results() -> None:
    merged, plain = _rekeyed_app("merge.repartition.topics"), _rekeyed_app("none")
    assert len([t for t in plain.internal_topics if t.endswith("-repartition")]) == 4
    repartitions = {t for t in merged.internal_topics if t.endswith("-repartition")}
    (own,) = repartitions - {"counts-repartition"}
    assert "counts-repartition" in repartitions and own.startswith("KSTREAM-REPARTITION-")
    assert merged.copartition_groups and all("counts-repartition" in g for g in merged.copartition_groups)
    rng = random.Random(27)
    inputs = [("in", f"k{i}", rng.choice(["ant", "bee", "axe", "box", "cat"]), i) for i in range(60)]
    inputs += [("users", key, f"user-{key}", i) for i, key in enumerate("abc")]
    rng.shuffle(inputs)
    results = []
    for topology in (plain, merged):
        with TopologyTestDriver(
            topology, {"default.key.serde": "String", "default.value.serde": "String"}
        ) as driver:
            topics = {t: driver.create_input_topic(t, S, S) for t in ("in", "users")}
            for topic, key, value, ts in inputs:
                topics[topic].pipe_input(key, value, ts)
            out = driver.create_output_topic("out", S, S).read_records_to_list()
            results.append(sorted((r.key, r.value, r.timestamp) for r in out))
    assert results[0] == results[1] and results[0]


def test_a_value_change_between_key_change_and_grouping_keeps_the_repartition() -> None:
    builder = StreamsBuilder()
    keyed = builder.stream("in", key_serde=S, value_serde=S).select_key(lambda k, v: v[:1])
    keyed.map_values(str.upper).group_by_key().count("upper")
    keyed.group_by_key().count()
    topology = builder.build({"topology.optimization": "all"})
    (generated,) = [t for t in topology.internal_topics if t != "upper-repartition"]
    assert generated.startswith("KSTREAM-AGGREGATE-STATE-STORE-")
    # the lone mergeable one is still replaced, its nodes named after its topic as Java names them
    assert f"{generated}-filter" in topology.nodes and f"{generated}-source" in topology.nodes
