"""Versioned key-value stores (KIP-889/914): a table keeps its history, and a stream-table join reads the
table's value as of the stream record's time (Java's KStreamKTableJoin over a versioned table)."""

from __future__ import annotations

from typing import Any

import pytest

from kappaflow import Joined, Materialized, Stores, StreamsBuilder
from kappaflow.api.errors import TopologyError
from kappaflow.testing import TopologyTestDriver

CFG = {"default.key.serde": "String", "default.value.serde": "String"}


def topology(persistent: bool, left: bool) -> Any:
    builder = StreamsBuilder()
    make = (
        Stores.persistent_versioned_key_value_store
        if persistent
        else Stores.in_memory_versioned_key_value_store
    )
    table = builder.table("table", materialized=Materialized.as_(make("versioned", 100)))
    table.to_stream().to("table-out")
    stream = builder.stream("stream")
    join = stream.left_join if left else stream.join
    join(table, lambda s, t: f"{s}-{t}").to("out")
    return builder.build()


@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("left", [False, True])
def test_stream_join_reads_the_table_as_of_the_record_time(persistent: bool, left: bool) -> None:
    with TopologyTestDriver(topology(persistent, left), CFG) as driver:
        table, stream = driver.create_input_topic("table"), driver.create_input_topic("stream")
        out = driver.create_output_topic("out")

        def joined(ts: int) -> list[tuple[Any, Any, int]]:
            stream.pipe_input("a", "s", ts)
            return [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()]

        table.pipe_input("a", "A1", 10)
        table.pipe_input("a", "A2", 20)
        assert joined(15) == [("a", "s-A1", 15)]
        assert joined(25) == [("a", "s-A2", 25)]
        assert joined(5) == ([("a", "s-None", 5)] if left else [])  # no version yet at 5
        table.pipe_input("a", "A0", 8)  # out of order: becomes history, not the latest
        assert joined(9) == [("a", "s-A0", 9)]
        assert joined(30) == [("a", "s-A2", 30)]
        table.pipe_input("a", None, 40)  # a tombstone is a version too
        assert joined(45) == ([("a", "s-None", 45)] if left else [])
        assert joined(22) == [("a", "s-A2", 22)]
        table.pipe_input("b", "B", 200)  # stream time 200: history before 100 is gone
        assert joined(50) == ([("a", "s-None", 50)] if left else [])
        table_out = driver.create_output_topic("table-out").read_key_values_to_list()
        # every stored update is forwarded, the out-of-order one too (Java: with isLatest=false)
        assert table_out == [("a", "A1"), ("a", "A2"), ("a", "A0"), ("a", None), ("b", "B")]


def test_update_older_than_history_retention_is_dropped() -> None:
    with TopologyTestDriver(topology(True, False), CFG) as driver:
        table = driver.create_input_topic("table")
        table.pipe_input("a", "A1", 500)
        table.pipe_input("a", "old", 300)  # 300 < 500 - 100: not stored, not forwarded
        assert driver.create_output_topic("table-out").read_key_values_to_list() == [("a", "A1")]


@pytest.mark.parametrize("persistent", [True, False])
def test_latest_version_never_expires(persistent: bool) -> None:
    """A lookup older than the history retention still finds the key's latest version when that
    version is not newer than the lookup time (Java's RocksDBVersionedStore); older versions are gone."""
    with TopologyTestDriver(topology(persistent, True), CFG) as driver:
        table, stream = driver.create_input_topic("table"), driver.create_input_topic("stream")
        out = driver.create_output_topic("out")
        table.pipe_input("a", "A1", 10)
        table.pipe_input("a", "A2", 20)
        table.pipe_input("b", "B", 500)  # stream time 500: the retention boundary is 400
        stream.pipe_input("a", "s", 50)  # past the retention, but A2 (from 20) is still a's latest
        stream.pipe_input("a", "s", 15)  # A1 was history: expired, and the latest starts after 15
        stream.pipe_input("b", "s", 550)  # within the retention: B is valid from 500
        table.pipe_input("b", None, 600)  # a tombstone as the latest version: nothing to find
        stream.pipe_input("b", "s", 490)
        assert [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()] == [
            ("a", "s-A2", 50),
            ("a", "s-None", 15),
            ("b", "s-B", 550),
            ("b", "s-None", 490),
        ]


def test_history_is_restored_from_the_changelog() -> None:
    topo = topology(True, False)
    first = TopologyTestDriver(topo, CFG)
    table = first.create_input_topic("table")
    table.pipe_input("a", "A1", 10)
    table.pipe_input("a", "A2", 20)
    first.close()
    second = TopologyTestDriver(topo, CFG, restore_from=first)
    try:
        second.create_input_topic("stream").pipe_input("a", "s", 15)
        assert second.create_output_topic("out").read_key_values_to_list() == [("a", "s-A1")]
    finally:
        second.close()


def grace_topology(left: bool) -> Any:
    builder = StreamsBuilder()
    table = builder.table(
        "table", materialized=Materialized.as_(Stores.persistent_versioned_key_value_store("versioned", 100))
    )
    stream = builder.stream("stream")
    join = stream.left_join if left else stream.join
    join(table, lambda s, t: f"{s}-{t}", Joined.grace_period(10)).to("out")
    return builder.build()


@pytest.mark.parametrize("left", [False, True])
def test_grace_period_waits_for_late_table_updates(left: bool) -> None:
    """KIP-923: a stream record joins once stream time passes its time + grace, so the table update at 15
    arriving after the stream record at 20 is still seen; a record already past the grace joins at once."""
    with TopologyTestDriver(grace_topology(left), CFG) as driver:
        table, stream = driver.create_input_topic("table"), driver.create_input_topic("stream")
        out = driver.create_output_topic("out")

        def piped(value: str, ts: int) -> list[tuple[Any, Any, int]]:
            stream.pipe_input("a", value, ts)
            return [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()]

        table.pipe_input("a", "A1", 10)
        assert piped("s20", 20) == []  # buffered until stream time 30
        table.pipe_input("a", "A2", 15)  # late table update
        assert piped("s25", 25) == []
        assert piped("s31", 31) == [("a", "s20-A2", 20)]  # without the grace it would be s20-A1
        assert piped("s5", 5) == ([("a", "s5-None", 5)] if left else [])  # too late to wait: joins now
        assert piped("s40", 40) == [("a", "s25-A2", 25)]  # s31 waits until stream time 41


def test_grace_period_needs_a_versioned_table() -> None:
    builder = StreamsBuilder()
    table = builder.table("table")
    with pytest.raises(TopologyError, match="KTable must be versioned to use a grace period"):
        builder.stream("stream").join(table, lambda s, t: s, Joined.grace_period(10))


def test_joined_options_chain_like_java():
    """`withGracePeriod` is an instance method in Java: chaining it keeps the other options."""
    joined = Joined.as_("j").with_grace_period(10)
    assert (joined.name, joined.grace_period_ms) == ("j", 10)
    assert Joined.grace_period(5).grace_period_ms == 5
    with pytest.raises(ValueError, match="grace period"):
        Joined.as_("j").with_grace_period(-1)


@pytest.mark.parametrize("persistent", [True, False])
def test_latest_version_answers_lookups_past_the_retention_in_a_store(persistent: bool) -> None:
    """Java's versioned stores answer a lookup from the latest version whenever it is not newer than
    the lookup time, however far behind the history retention (only older versions expire)."""
    with TopologyTestDriver(topology(persistent, True), CFG) as driver:
        table, stream = driver.create_input_topic("table"), driver.create_input_topic("stream")
        out = driver.create_output_topic("out")
        table.pipe_input("a", "A1", 10)
        table.pipe_input("b", "B", 1000)  # stream time 1000: the retention boundary is 900
        stream.pipe_input("a", "s", 20)  # behind the boundary, but A1 is a's latest version
        stream.pipe_input("a", "s", 5)  # before A1: nothing, and the history there has expired
        assert out.read_key_values_to_list() == [("a", "s-A1"), ("a", "s-None")]


def test_table_join_drops_and_counts_an_out_of_order_version() -> None:
    """KIP-914: an update older than the key's latest version is not the table's current value, so a
    table-table join emits nothing for it and counts it as dropped."""
    builder = StreamsBuilder()
    versioned = Stores.persistent_versioned_key_value_store
    left = builder.table("left", materialized=Materialized.as_(versioned("left-store", 100)))
    right = builder.table("right", materialized=Materialized.as_(versioned("right-store", 100)))
    left.join(right, lambda a, b: f"{a}+{b}").to_stream().to("out")
    with TopologyTestDriver(builder.build(), CFG) as driver:
        left_in, right_in = driver.create_input_topic("left"), driver.create_input_topic("right")
        out = driver.create_output_topic("out")
        left_in.pipe_input("a", "l1", 10)
        right_in.pipe_input("a", "r1", 10)
        left_in.pipe_input("a", "l0", 5)
        right_in.pipe_input("a", "r0", 5)
        assert out.read_key_values_to_list() == [("a", "l1+r1")]
        assert driver.metrics().counter("dropped-records-total", reason="out-of-order-version") == 2


def test_suppress_is_refused_on_a_versioned_table_and_below_one() -> None:
    """As Java's InternalStreamsBuilder: a suppression buffer would emit versions out of order, so both a
    versioned table and a table inheriting versioned semantics (a filter below one) refuse it."""
    from kappaflow import BufferConfig, Suppressed

    builder = StreamsBuilder()
    table = builder.table(
        "table", materialized=Materialized.as_(Stores.in_memory_versioned_key_value_store("v", 100))
    )
    for below in (table, table.filter(lambda _k, v: v is not None)):
        with pytest.raises(TopologyError, match=r"suppress\(\) is only supported for non-versioned KTables"):
            below.suppress(Suppressed.until_time_limit(10, BufferConfig.unbounded()))
    builder.table("plain").suppress(
        Suppressed.until_time_limit(10, BufferConfig.unbounded())
    )  # a plain table still may
