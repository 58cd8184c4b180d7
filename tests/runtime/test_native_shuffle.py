"""A Spark task's repartitioned records through the native core (`ShuffleSend`, `shuffled_records`,
`ShuffledCursor`: runtime/native/src/shuffle.rs, shuffled_cursor.rs) against the Python references in
kappaflow.spark.batches and the Python collector: the same bytes, slots, order and record tuples, and the
same errors."""

from __future__ import annotations

import random
from typing import Any

import pytest

from kappaflow import StreamsBuilder, serdes
from kappaflow.api.record import Headers
from kappaflow.spark.batches import (
    Emitted,
    batch_records,
    decode_batch,
    decode_records,
    encode_records,
    shuffled_batches,
    shuffled_input,
    upstream_runs,
)
from kappaflow.spark.executor import SparkCollector, StageJob, run_task
from kappaflow.tasks.native import NativeCore
from tests.native_support import require_native_core

S = serdes.String()


@pytest.fixture
def core() -> NativeCore:
    return require_native_core()


def random_records(rng: random.Random, n: int, ascending: bool = True) -> list[Emitted]:
    records: list[Emitted] = []
    stamp = rng.randint(-5, 5)
    for i in range(n):
        stamp = stamp + rng.randint(0, 3) if ascending else rng.randint(-5, 40)
        key = None if rng.random() < 0.1 else f"k{rng.randint(0, 30)}".encode()
        value = None if rng.random() < 0.1 else bytes(rng.randrange(256) for _ in range(rng.randint(0, 9)))
        headers = None
        if rng.random() < 0.2:
            headers = [(f"h{j}-é", None if j == 1 else b"v%d" % i) for j in range(rng.randint(1, 3))]
        records.append((stamp, key, value, headers))
    return records


def random_runs(rng: random.Random, most: int, ascending: bool) -> list[list[Any]]:
    """One to four upstream runs of up to `most` random records each, every run cut into two payloads."""
    runs: list[list[Any]] = []
    for _run in range(rng.randint(1, 4)):
        records = random_records(rng, rng.randint(0, most), ascending)
        cut = rng.randint(0, len(records))
        runs.append([encode_records(records[:cut]), encode_records(records[cut:])])
    return runs


def job(changelogs: list[str] | None = None) -> StageJob:
    counts = {"app-r": 3, "app-s": 2}
    return StageJob(
        lambda: None,  # type: ignore[arg-type, return-value]
        {},
        0,
        counts,
        ["app-r", "app-s"],
        changelogs or [],
        {},
        None,
        key_splits={"app-r": 4},
    )


def sent(
    collector: SparkCollector, records: list[tuple[str, Emitted, int | None]]
) -> dict[Any, list[Emitted]]:
    for topic, (stamp, key, value, headers), partition in records:
        collector.send(topic, key, value, Headers(headers) if headers else None, stamp, partition)
    rows = collector.shuffle_rows()
    return {(row[2], row[1]): batch_records(row[4]) for row in rows}


def test_native_buffers_hold_the_records_and_slots_of_the_python_collector(core):
    rng = random.Random(5)
    records = [
        (rng.choice(["app-r", "app-s"]), record, rng.choice([None, None, None, 1]))
        for record in random_records(rng, 600)
    ]
    native, python = SparkCollector(job(), 2, native=True), SparkCollector(job(), 2, native=False)
    assert native.send is not python.send and type(native.send).__name__ == "ShuffleSend"
    from_native, from_python = sent(native, records), sent(python, records)
    assert from_native == from_python
    assert native.repartitioned == python.repartitioned == 600
    # the payloads are the reference encoding of those records, byte for byte
    again = SparkCollector(job(), 2, native=True)
    for topic, (stamp, key, value, headers), partition in records:
        again.send(topic, key, value, Headers(headers) if headers else None, stamp, partition)
    for topic, slot, count, payload in again._native_shuffle.take():  # type: ignore[union-attr]
        assert payload == encode_records(from_python[(topic, slot)])
        assert count == len(from_python[(topic, slot)])
        assert decode_records(payload) == from_python[(topic, slot)]


def test_other_records_reach_the_python_send_and_bad_ones_name_the_topic(core):
    collector = SparkCollector(job(changelogs=["app-store-changelog"]), 0, native=True)
    collector.send_changelog("app-store-changelog", b"k", b"v", 5, 0)  # compacted by the Python send
    assert collector.compacted == {("app-store-changelog", 0): {b"k": (b"v", 5)}}
    with pytest.raises(
        TypeError, match="repartition topic 'app-r': a serialized key must be bytes or None, not str"
    ):
        collector.send("app-r", "text", b"v", None, 1, None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="header 0: the value must be bytes or None"):
        collector.send("app-r", b"k", b"v", Headers([("h", "text")]), 1, None)  # type: ignore[list-item]
    collector.send("app-r", b"k", bytearray(b"ba"), None, 2, None)
    ((_topic, _slot, count, payload),) = collector._native_shuffle.take()  # type: ignore[union-attr]
    assert count == 1 and decode_records(payload) == [(2, b"k", b"ba", None)]  # nothing of the failed ones


def test_native_reading_merges_and_numbers_like_the_reference(core):
    rng = random.Random(11)
    for ascending in (True, False):
        for _ in range(40):
            runs = random_runs(rng, 30, ascending)
            expected = shuffled_input(runs, None)
            got = core.shuffled_records(runs, Headers)
            assert got == expected
            assert all(type(record[4]) is Headers for record in got)


def test_the_cursor_hands_the_merge_over_in_batches_numbered_on(core):
    """ShuffledCursor.take(n) n records at a time is the whole merge cut into pieces, offsets numbered on
    across them, and so are shuffled_batches' native and reference paths."""
    rng = random.Random(12)
    for ascending in (True, False):
        for _ in range(30):
            runs = random_runs(rng, 40, ascending)
            expected = shuffled_input(runs, None)
            size = rng.randint(1, 12)
            cursor = core.ShuffledCursor(runs, Headers)
            pieces = []
            while piece := cursor.take(size):
                assert len(piece) <= size
                pieces.append(piece)
            assert cursor.take(size) == []  # read to its end, it stays there
            assert [r for piece in pieces for r in piece] == expected
            assert all(len(piece) == size for piece in pieces[:-1])
            for installed in (core, None):
                batches = list(shuffled_batches(runs, installed, size))
                assert [len(b) for b in batches] == [len(p) for p in pieces]
                assert [r for b in batches for r in b] == expected


def test_a_truncated_payload_is_refused(core):
    payload = encode_records([(1, b"key", b"value", [("h", b"x")])])
    for cut in (3, 10, len(payload) - 1):
        with pytest.raises(ValueError, match="ends inside a record"):
            core.shuffled_records([[payload[:cut]]], Headers)
        with pytest.raises(ValueError, match="ends inside a record"):
            decode_records(payload[:cut])
        with pytest.raises(ValueError, match="ends inside a record"):
            core.ShuffledCursor([[payload[:cut]]], Headers).take(10)


def test_a_task_sends_and_reads_the_same_through_both_paths(core):
    """run_task of a stage that repartitions (the fused native sink stage calls the shuffle buffers),
    then the reading side of both outputs: the same records per slot in the same order."""
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).flat_map(
        lambda k, v: [(w, w) for w in v.split()]
    ).repartition(key_serde=S, value_serde=S)
    topology = builder.build()
    (repartition,) = [topology.resolve_topic(t, "shuffle-app") for t in topology.internal_topics]
    rows = [(0, "in", 0, i, 1000 + i, b"k", f"a{i % 7} b{i % 5} c".encode(), None) for i in range(300)]
    by_path = {}
    for native in (True, False):
        stage = StageJob(
            app=topology,
            config={
                "application.id": "shuffle-app",
                "bootstrap.servers": "unused:9092",
                "kappaflow.native.enabled": native,
            },
            subtopology=0,
            partition_counts={"in": 1, repartition: 2},
            repartition_topics=[repartition],
            changelog_topics=[],
            producer={},
            state_root=None,
            key_splits={repartition: 2},
        )
        out = run_task(stage, topology, 0, rows)  # type: ignore[arg-type]
        assert out[-1][0] == "S"
        shuffled = {row[1]: row[4] for row in out[:-1]}
        assert sum(len(batch_records(b)) for b in shuffled.values()) == 900
        by_path[native] = {
            slot: shuffled_input(upstream_runs([decode_batch(b)]), core if native else None)
            for slot, b in shuffled.items()
        }
        assert all(isinstance(decode_batch(b)[2], bytes if native else list) for b in shuffled.values())
    assert by_path[True] == by_path[False]
    assert sorted(by_path[True]) == [0, 1, 2, 3]
