"""Stream-stream joins, checked against Kafka Streams' documented join semantics (3.1+)."""

from __future__ import annotations

import pytest

from kappaflow import StreamsBuilder
from kappaflow.dsl.windows import JoinWindows
from kappaflow.testing import TopologyTestDriver

CFG = {"default.key.serde": "String", "default.value.serde": "String"}


def join_topology(kind: str, windows: JoinWindows, store_type: str = "rocksdb"):
    builder = StreamsBuilder()
    left = builder.stream("left")
    right = builder.stream("right")
    method = {"inner": left.join, "left": left.left_join, "outer": left.outer_join}[kind]
    method(right, lambda lv, rv: f"{lv}+{rv}", windows, store_type=store_type).to("out")
    return builder.build()


def out(driver):
    return [(r.key, r.value, r.timestamp) for r in driver.create_output_topic("out").read_records_to_list()]


# The Kafka Streams documentation's join table: all records share one key and one window.
DOC_SEQUENCE = [
    (1, "left", None), (2, "right", None), (3, "left", "A"), (4, "right", "a"), (5, "left", "B"),
    (6, "right", "b"), (7, "left", None), (8, "right", None), (9, "left", "C"), (10, "right", "c"),
    (11, "left", None), (12, "right", None), (13, "left", None), (14, "right", "d"), (15, "left", "D"),
]  # fmt: skip
DOC_INNER = [
    ("A+a", 4), ("B+a", 5), ("A+b", 6), ("B+b", 6), ("C+a", 9), ("C+b", 9), ("A+c", 10), ("B+c", 10),
    ("C+c", 10), ("A+d", 14), ("B+d", 14), ("C+d", 14), ("D+a", 15), ("D+b", 15), ("D+c", 15), ("D+d", 15),
]  # fmt: skip


def pipe_doc(driver) -> None:
    topics = {"left": driver.create_input_topic("left"), "right": driver.create_input_topic("right")}
    for ts, side, value in DOC_SEQUENCE:
        topics[side].pipe_input("k", value, ts)


@pytest.mark.parametrize("kind", ["inner", "left", "outer"])
@pytest.mark.parametrize("store_type", ["rocksdb", "memory"])
def test_documented_sequence_has_no_spurious_results(kind: str, store_type: str) -> None:
    # Since 3.1, left/outer joins emit (A, null) only when A's window closes without a match: within one
    # open window every variant emits exactly the inner join's results.
    with TopologyTestDriver(join_topology(kind, JoinWindows.of_time_difference_and_grace(100, 0), store_type),
                            CFG) as driver:  # fmt: skip
        pipe_doc(driver)
        assert out(driver) == [("k", v, ts) for v, ts in DOC_INNER]
        node = "KSTREAM-OUTERTHIS-0000000004" if kind == "outer" else "KSTREAM-JOINTHIS-0000000004"
        dropped = driver.metrics().counter(
            "dropped-records-total", reason="null-key-or-value", task="0_0", node=node
        )
        assert dropped == 4


def test_inclusive_window_bounds_and_max_timestamp() -> None:
    with TopologyTestDriver(join_topology("inner", JoinWindows.of_time_difference_and_grace(10, 100)),
                            CFG) as driver:  # fmt: skip
        left, right = driver.create_input_topic("left"), driver.create_input_topic("right")
        left.pipe_input("k", "L", 100)
        right.pipe_input("k", "r90", 90)  # 100 - 10: inside (inclusive)
        right.pipe_input("k", "r110", 110)  # 100 + 10: inside (inclusive)
        right.pipe_input("k", "r111", 111)  # outside
        right.pipe_input("k", "r89", 89)  # outside
        right.pipe_input("other", "x", 100)  # other key
        assert out(driver) == [("k", "L+r90", 100), ("k", "L+r110", 110)]


def test_left_join_emits_unmatched_when_window_closes() -> None:
    with TopologyTestDriver(join_topology("left", JoinWindows.of_time_difference_and_grace(10, 5)),
                            CFG) as driver:  # fmt: skip
        left, right = driver.create_input_topic("left"), driver.create_input_topic("right")
        left.pipe_input("k1", "A", 0)
        left.pipe_input("k2", "B", 5)
        right.pipe_input("k2", "b", 12)  # matches B (|12 - 5| <= 10): B will never be emitted alone
        assert out(driver) == [("k2", "B+b", 12)]
        left.pipe_input("k3", "C", 15)  # stream time 15 = 0 + 10 + 5: A's window is not closed yet
        assert out(driver) == []
        right.pipe_input("k9", "z", 16)  # stream time 16 > 15: A closes, C does not
        assert out(driver) == [("k1", "A+None", 0)]
        left.pipe_input("k4", "D", 31)  # closes C (15 + 15 < 31)
        assert out(driver) == [("k3", "C+None", 15)]


def test_outer_join_emits_both_sides_at_close_and_late_records_at_once() -> None:
    with TopologyTestDriver(join_topology("outer", JoinWindows.of_time_difference_and_grace(10, 0)),
                            CFG) as driver:  # fmt: skip
        left, right = driver.create_input_topic("left"), driver.create_input_topic("right")
        right.pipe_input("k1", "a", 1)
        left.pipe_input("k2", "B", 2)
        left.pipe_input("k3", "C", 50)
        assert out(driver) == [("k1", "None+a", 1), ("k2", "B+None", 2)]
        right.pipe_input("k4", "late", 20)  # its window [10, 30] closed (stream time 50): emitted now
        assert out(driver) == [("k4", "None+late", 20)]


def test_asymmetric_windows() -> None:
    windows = JoinWindows.of_time_difference_and_grace(0, 0).before(5).after(0)
    with TopologyTestDriver(join_topology("inner", windows), CFG) as driver:
        left, right = driver.create_input_topic("left"), driver.create_input_topic("right")
        left.pipe_input("k", "L", 10)
        right.pipe_input("k", "r5", 5)  # 10 - 5: joins
        right.pipe_input("k", "r11", 11)  # after 0: does not join
        assert out(driver) == [("k", "L+r5", 10)]


def test_unmatched_left_record_survives_restart() -> None:
    topology = join_topology("left", JoinWindows.of_time_difference_and_grace(10, 0), "memory")
    first = TopologyTestDriver(topology, CFG)
    first.create_input_topic("left").pipe_input("k", "A", 0)
    first.close()
    second = TopologyTestDriver(topology, CFG, restore_from=first)
    try:
        second.create_input_topic("left").pipe_input("x", "X", 100)
        assert out(second) == [("k", "A+None", 0)]
    finally:
        second.close()


def test_repartition_and_copartition_group() -> None:
    builder = StreamsBuilder()
    left = builder.stream("left").select_key(lambda k, v: v)
    right = builder.stream("right")
    left.join(right, lambda k, lv, rv: f"{k}:{lv}+{rv}", JoinWindows.of_time_difference_and_grace(10, 0)).to(
        "out"
    )
    topology = builder.build()
    assert "KSTREAM-KEY-SELECT-0000000001-repartition" in topology.internal_topics
    assert {"KSTREAM-KEY-SELECT-0000000001-repartition", "right"} in topology.copartition_groups
    with TopologyTestDriver(topology, CFG) as driver:
        driver.create_input_topic("right").pipe_input("v1", "R", 1)
        driver.create_input_topic("left").pipe_input("ignored", "v1", 2)
        assert out(driver) == [("v1", "v1:v1+R", 2)]


def test_null_keys_advance_time_and_outer_sides_emit_them_at_once() -> None:
    with TopologyTestDriver(join_topology("left", JoinWindows.of_time_difference_and_grace(10, 0)),
                            CFG) as driver:  # fmt: skip
        left, right = driver.create_input_topic("left"), driver.create_input_topic("right")
        left.pipe_input("k", "A", 0)
        left.pipe_input(None, "N", 5)  # left side of a left join: emitted now (KIP-962)
        right.pipe_input(None, "n", 30)  # inner side: dropped, but it advances stream time...
        left.pipe_input("j", "B", 30)  # ...so this record (at stream time) closes A's window
        assert out(driver) == [(None, "N+None", 5), ("k", "A+None", 0)]


def test_unmatched_records_with_one_key_side_and_time_all_survive_a_restart_in_javas_list_bytes() -> None:
    """The outer-join store keeps a list per [time][side][key] (Java's ListValueStore): several unmatched
    records with the same key, side and timestamp are all restored and all emitted, in arrival order; the
    changelog holds the whole list as Java's ListSerde writes it."""
    topology = join_topology("outer", JoinWindows.of_time_difference_and_grace(10, 0), "memory")
    first = TopologyTestDriver(topology, CFG)
    left = first.create_input_topic("left")
    left.pipe_input("k", "A1", 5)
    left.pipe_input("k", "A2", 5)
    first.create_input_topic("right").pipe_input("j", "R", 12)  # matches nothing, closes no window yet
    first.close()
    changelog = [r for topic, records in first.produced.items() if "OUTERSHARED" in topic for r in records]
    # [8-byte time][is-left][key] -> [VARIABLE_SIZE][count][len][is-left][value]...: the second write is
    # the whole list of two
    assert changelog[1].key == (5).to_bytes(8, "big") + b"\x01k"
    assert (
        changelog[1].value
        == b"\x01" + (2).to_bytes(4, "big") + b"\x00\x00\x00\x03\x01A1\x00\x00\x00\x03\x01A2"
    )
    second = TopologyTestDriver(topology, CFG, restore_from=first)
    try:
        second.create_input_topic("left").pipe_input("x", "X", 100)
        assert out(second) == [("k", "A1+None", 5), ("k", "A2+None", 5), ("j", "None+R", 12)]
    finally:
        second.close()
