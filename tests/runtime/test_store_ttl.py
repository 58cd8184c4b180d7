"""Key-value stores with a time-to-live (kappaflow.state.ttl), in TopologyTestDriver: what expires and
when, the changelog and downstream tombstones, the bounded sweep, restoration, and that the native
aggregation and the Python drain (`--python-drain`) give the same results."""

from __future__ import annotations

from typing import Any

import pytest

from kappaflow import (
    Materialized,
    Record,
    SessionWindows,
    Stores,
    StreamsBuilder,
    TimeWindows,
    Topology,
    serdes,
)
from kappaflow.api.errors import TopologyError
from kappaflow.state.timestamped import ValueAndTimestamp
from kappaflow.state.ttl import EXPIRED_METRIC, ExpiryIndex
from kappaflow.testing import TopologyTestDriver

S, L = serdes.String(), serdes.Long()
CONFIG = {"application.id": "ttl"}
CHANGELOG = "ttl-counts-changelog"


def count_topology(materialized: Materialized) -> Topology:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).group_by_key().count(materialized).to_stream().to(
        "out", value_serde=L
    )
    return builder.build()


def _text(raw: bytes | None) -> str:
    return raw.decode() if raw else ""


def changelog(driver: TopologyTestDriver) -> list[tuple[str, int | None, int]]:
    """The store's changelog as (key, count or None for a tombstone, record timestamp)."""
    return [
        (
            r.key.decode() if r.key else "",
            None if r.value is None else L.deserialize("t", r.value),
            r.timestamp,
        )
        for r in driver.produced[CHANGELOG]
    ]


def test_an_entry_not_written_for_the_ttl_expires_by_stream_time() -> None:
    topology = count_topology(Materialized.as_("counts").with_ttl(100))
    with TopologyTestDriver(topology, CONFIG) as driver:
        source = driver.create_input_topic("in", S, S)
        source.pipe_input("a", "x", 0)
        source.pipe_input("a", "x", 50)
        source.pipe_input("b", "x", 149)  # a was written at 50: 99 ms ago, still live
        store = driver.get_key_value_store("counts")
        assert store.to_dict() == {"a": 2, "b": 1}
        source.pipe_input("b", "x", 150)  # stream time 150: a's TTL is up
        assert store.to_dict() == {"b": 2}
        # the changelog tombstone carries the expiry instant (last write + TTL), not the commit's time
        assert ("a", None, 150) in changelog(driver)[-2:]
        source.pipe_input("a", "x", 160)  # a new entry: the count starts over
        assert store.get("a") == 1
        outputs = driver.create_output_topic("out", S, L).read_key_values_to_map()
        assert outputs == {"a": 1, "b": 2}  # no downstream tombstone unless asked for
        assert driver.metrics().counter(EXPIRED_METRIC, store="counts", task="0_0") == 1.0


def test_a_write_renews_the_entry() -> None:
    topology = count_topology(Materialized.as_("counts").with_ttl(100))
    with TopologyTestDriver(topology, CONFIG) as driver:
        source = driver.create_input_topic("in", S, S)
        for t in (0, 90, 180, 270):
            source.pipe_input("a", "x", t)
        assert driver.get_key_value_store("counts").get("a") == 4
        assert all(value is not None for _, value, _ in changelog(driver))


def test_a_table_forwards_expiry_downstream_when_asked() -> None:
    topology = count_topology(Materialized.as_("counts").with_ttl(100, emit_tombstones=True))
    with TopologyTestDriver(topology, CONFIG) as driver:
        source = driver.create_input_topic("in", S, S)
        source.pipe_input("a", "x", 0)
        source.pipe_input("b", "x", 100)
        records = driver.create_output_topic("out", S, L).read_records_to_list()
        seen = [(r.key, r.value, r.timestamp) for r in records]
        assert seen == [("a", 1, 0), ("b", 1, 100), ("a", None, 100)]


def test_a_table_join_sees_the_expiry() -> None:
    builder = StreamsBuilder()
    table = builder.table(
        "users",
        key_serde=S,
        value_serde=S,
        materialized=Materialized.as_("users").with_ttl(100, emit_tombstones=True),
    )
    other = builder.table("scores", key_serde=S, value_serde=S)
    table.join(other, lambda user, score: f"{user}:{score}").to_stream().to("joined", value_serde=S)
    with TopologyTestDriver(builder.build(), CONFIG) as driver:
        driver.create_input_topic("scores", S, S).pipe_input("k", "9", 0)
        driver.create_input_topic("users", S, S).pipe_input("k", "ann", 0)
        driver.create_input_topic("scores", S, S).pipe_input("z", "1", 100)  # advances stream time
        assert [
            (r.key, r.value) for r in driver.create_output_topic("joined", S, S).read_records_to_list()
        ] == [
            ("k", "ann:9"),
            ("k", None),
        ]


def test_expiry_is_swept_in_bounded_batches_while_reads_hide_it_at_once() -> None:
    topology = count_topology(Materialized.as_("counts").with_ttl(100, max_expired_per_commit=2))
    with TopologyTestDriver(topology, CONFIG) as driver:
        source = driver.create_input_topic("in", S, S)
        for i in range(5):
            source.pipe_input(f"k{i}", "x", i)
        source.pipe_input("late", "x", 1000)  # all five are due; one commit may delete two
        store = driver.get_key_value_store("counts")
        assert store.to_dict() == {"late": 1}
        assert [key for key, value, _ in changelog(driver) if value is None] == ["k0", "k1"]
        source.pipe_input("late", "x", 1000)
        source.pipe_input("late", "x", 1000)
        assert [key for key, value, _ in changelog(driver) if value is None] == ["k0", "k1", "k2", "k3", "k4"]
        assert driver.metrics().counter(EXPIRED_METRIC, store="counts", task="0_0") == 5.0


def test_restoration_replays_the_expiry() -> None:
    topology = count_topology(Materialized.as_("counts").with_ttl(100).with_store_type("memory"))
    first = TopologyTestDriver(topology, CONFIG)
    source = first.create_input_topic("in", S, S)
    source.pipe_input("a", "x", 0)
    source.pipe_input("b", "x", 120)
    first.close()
    second = TopologyTestDriver(topology, CONFIG, restore_from=first)
    try:
        assert second.get_key_value_store("counts").to_dict() == {"b": 1}  # a's tombstone was restored
        second.create_input_topic("in", S, S).pipe_input("c", "x", 230)  # b, written at 120, expired
        assert second.get_key_value_store("counts").to_dict() == {"c": 1}
        assert ("b", None, 220) in changelog(second)
    finally:
        second.close()


def test_restored_entries_expire_by_their_own_timestamps() -> None:
    """Entries the changelog restores but the first driver never swept (batch of one) expire after the
    restart by the timestamp they carry, exactly as they would have without it."""
    topology = count_topology(Materialized.as_("counts").with_ttl(100, max_expired_per_commit=1))
    first = TopologyTestDriver(topology, CONFIG)
    source = first.create_input_topic("in", S, S)
    for key in "abc":
        source.pipe_input(key, "x", 0)
    source.pipe_input("z", "x", 500)  # expires a, and closing (a commit) b; c stays unswept
    first.close()
    assert [key for key, value, _ in changelog(first) if value is None] == ["a", "b"]
    second = TopologyTestDriver(topology, CONFIG, restore_from=first)
    try:
        second.create_input_topic("in", S, S).pipe_input("z", "x", 500)
        assert second.get_key_value_store("counts").to_dict() == {"z": 2}
        assert [(key, t) for key, value, t in changelog(second) if value is None] == [("c", 100)]
    finally:
        second.close()


def test_wall_clock_ttl_expires_without_input() -> None:
    topology = count_topology(Materialized.as_("counts").with_ttl(1000, clock="wall_clock"))
    with TopologyTestDriver(topology, CONFIG, initial_wall_clock_time=10_000) as driver:
        source = driver.create_input_topic("in", S, S)
        source.pipe_input("a", "x", 0)
        driver.advance_wall_clock_time(999)
        assert driver.get_key_value_store("counts").get("a") == 1
        driver.advance_wall_clock_time(1)
        assert driver.get_key_value_store("counts").get("a") is None
        source.pipe_input("b", "x", 0)  # the next commit sweeps it (stream time never moved)
        assert ("a", None, 11_000) in changelog(driver)


class Remember:
    def __init__(self, timestamped: bool) -> None:
        self.timestamped = timestamped

    def init(self, context: Any) -> None:
        self.store = context.get_state_store("seen")

    def process(self, record: Record[Any, Any]) -> None:
        value = ValueAndTimestamp(record.value, record.timestamp) if self.timestamped else record.value
        self.store.put(record.key, value)

    def close(self) -> None:
        pass


@pytest.mark.parametrize("timestamped", [False, True])
def test_processor_api_store_with_ttl(timestamped: bool) -> None:
    supplier = Stores.persistent_key_value_store("seen")
    make = Stores.timestamped_key_value_store_builder if timestamped else Stores.key_value_store_builder
    topology = Topology()
    topology.add_source("src", "in", key_serde=S, value_serde=S)
    topology.add_processor("remember", lambda: Remember(timestamped), "src")
    topology.add_state_store(make(supplier, S, S).with_ttl(50).with_caching_enabled(), "remember")
    with TopologyTestDriver(topology, CONFIG) as driver:
        source = driver.create_input_topic("in", S, S)
        source.pipe_input("a", "1", 0)
        source.pipe_input("b", "2", 30)
        source.pipe_input("c", "3", 60)
        keys = [k for k, _ in driver.get_key_value_store("seen").all()]
        assert keys == ["b", "c"]
        tombstones = [(r.key, r.timestamp) for r in driver.produced["ttl-seen-changelog"] if r.value is None]
        assert tombstones == [(b"a", 50)]


def test_ttl_store_is_not_taken_by_the_native_aggregation() -> None:
    """The fused stage inlines cached reads and writes that would bypass the TTL layer: a TTL store
    must not offer it a binding (under `--python-drain` there is no native core at all)."""
    topology = count_topology(Materialized.as_("counts").with_ttl(100))
    with TopologyTestDriver(topology, CONFIG) as driver:
        assert driver.get_state_store("counts").cached_binding() is None


def test_bad_ttl_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="ttl must be at least 1 ms"):
        Materialized.as_("c").with_ttl(0)
    with pytest.raises(TypeError, match="ttl must be a timedelta"):
        Materialized.as_("c").with_ttl("1h")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="clock must be"):
        Materialized.as_("c").with_ttl(10, clock="cpu")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_expired_per_commit"):
        Materialized.as_("c").with_ttl(10, max_expired_per_commit=0)
    builder = StreamsBuilder()
    windowed = (
        builder.stream("in", key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_with_no_grace(10))
    )
    with pytest.raises(TopologyError, match="with_ttl applies to key-value stores"):
        windowed.count(Materialized.as_("w").with_ttl(10))
    sessions = (
        builder.stream("in2", key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(10))
    )
    with pytest.raises(TopologyError, match="with_ttl applies to key-value stores"):
        sessions.count(Materialized.as_("s").with_ttl(10))


def test_expiry_index_takes_the_oldest_due_entries_and_skips_stale_ones() -> None:
    index = ExpiryIndex()
    for i, key in enumerate([b"a", b"b", b"c", b"d"]):
        index.touch(key, i * 10)
    index.touch(b"a", 100)  # rewritten: its old heap pair (0) is stale
    index.remove(b"b")  # deleted
    assert index.take_due(now=130, ttl_ms=100, limit=1) == [(b"c", 20)]
    assert index.take_due(now=130, ttl_ms=100, limit=10) == [(b"d", 30)]
    assert index.take_due(now=199, ttl_ms=100, limit=10) == []
    assert index.take_due(now=200, ttl_ms=100, limit=10) == [(b"a", 100)]
    assert len(index) == 0
    for round_ in range(3000):  # a hot key's rewrites never grow the heap without bound
        index.touch(b"hot", round_)
    assert len(index._heap) <= 2 * len(index) + 1024
