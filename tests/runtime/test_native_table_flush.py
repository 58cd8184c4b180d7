"""A cached table's batched flush in the native core (runtime/native/src/table_flush.rs) against its Python
references: `ThreadCache.split_flush` (the flushed entries as the columns a logged store writes) and
`FlushedBatch.__iter__` with `TupleForwarder._flush_batch_to_stage` (the entries typed, made changes and
handed to the table's one child). The same topologies give the same records (keys, values, timestamps,
headers) either way, and a direct call fails where the Python loop fails, with the nodes left as it
leaves them."""

from __future__ import annotations

from typing import Any

import pytest

from kappaflow import Materialized, StreamsBuilder, serdes
from kappaflow.api.record import Headers
from kappaflow.dsl import table_processors
from kappaflow.dsl.change import Change
from kappaflow.state.api import RecordContext
from kappaflow.state.cache import NOT_DECODED, CacheEntry, ThreadCache
from kappaflow.state.flushed_batch import FlushedBatch
from kappaflow.state.timestamped import ValueAndTimestampSerde
from kappaflow.tasks.native import NativeCore, StatelessPlan
from kappaflow.testing import TestRecord, TopologyTestDriver
from kappaflow.topology.topology import Topology
from tests.native_support import require_native_core

S, L, INT = serdes.String(), serdes.Long(), serdes.Integer()


@pytest.fixture
def core() -> NativeCore:
    return require_native_core()


def context_at(offset: int) -> RecordContext:
    return RecordContext(1000 + offset, "in", 0, offset, Headers([("h", str(offset).encode())]))


def flushed_pairs(core: NativeCore) -> list[tuple[bytes, Any]]:
    """The native cache's flush of five dirty entries: updates, a delete, a decoded copy, one rewritten
    (so flushed in the order last written)."""
    cache = core.ThreadCache(1 << 20, NOT_DECODED, 480)
    flushed: list[tuple[bytes, Any]] = []
    cache.add_dirty_entry_flush_listener("ns", flushed.extend)
    cache.put("ns", b"a", b"1", True, context_at(0))
    cache.put("ns", b"gone", None, True, context_at(1))
    cache.put("ns", b"b", b"2", True, context_at(2), "two")
    cache.put("ns", b"never", None, True, context_at(3))
    cache.put("ns", b"a", b"3", True, context_at(4))
    cache.flush("ns")
    assert [key for key, _ in flushed] == [b"gone", b"b", b"never", b"a"]
    return flushed


@pytest.mark.parametrize("send_old", [False, True])
@pytest.mark.parametrize("listened", [False, True])
@pytest.mark.parametrize("expiring", [False, True])
def test_split_flush_is_the_python_twins(
    core: NativeCore, send_old: bool, listened: bool, expiring: bool
) -> None:
    """The old values read (deletes, or all when sent; not of expired keys), a delete of a key never held
    left out, the rest in flush order with their record contexts and decoded copies."""
    held = {b"a": b"0", b"gone": b"9", b"b": b"1"}
    reads: list[tuple[str, bytes]] = []

    def read_old(key: bytes) -> bytes | None:
        reads.append(("read", key))
        return held.get(key)

    def live(key: bytes) -> bool:
        reads.append(("live", key))
        return key != b"b"

    pairs = flushed_pairs(core)
    args = (read_old if listened else None, send_old, live if expiring else None)
    native = core.ThreadCache.split_flush(pairs, *args)
    native_reads, reads[:] = list(reads), []
    python = ThreadCache.split_flush(pairs, *args)
    assert native == python and native_reads == reads
    writes, olds, decodeds = native
    assert [key for key, _, _ in writes] == (
        [b"gone", b"b", b"a"] if listened else [b"gone", b"b", b"never", b"a"]
    )
    assert all(write[2] is python_write[2] for write, python_write in zip(writes, python[0], strict=True))
    assert decodeds[1] == "two" and decodeds[0] is NOT_DECODED
    if listened and send_old:
        assert olds == [b"9", None if expiring else b"1", b"0"]


def test_split_flush_needs_native_entries(core: NativeCore) -> None:
    """The native twin reads the native cache's entries; anything else is a TypeError, not a wrong batch."""
    entry = CacheEntry(b"1", True, context_at(0), 10)
    with pytest.raises(TypeError):
        core.ThreadCache.split_flush([(b"a", entry)], None, False, None)


def source_table() -> Topology:
    """A cached source table: updates and tombstones (of held and of never-held keys) to its changelog."""
    builder = StreamsBuilder()
    table = builder.table("in", key_serde=S, value_serde=S, materialized=Materialized.as_("t"))
    table.to_stream().to("out", key_serde=S, value_serde=S)
    return builder.build()


def clearing_sums() -> Topology:
    """Sums of value lengths that clear a key (a None aggregate: its tombstone) at every fifth update."""
    builder = StreamsBuilder()
    sums = (
        builder.stream("in", key_serde=S, value_serde=S)
        .group_by_key()
        .aggregate(
            lambda: 0,
            lambda _k, v, total: None if total is None or total % 5 == 4 else total + len(v),
            Materialized.as_("sums").with_value_serde(L),
        )
    )
    sums.to_stream().to("out", key_serde=S, value_serde=L)
    return builder.build()


def integer_keyed_counts() -> Topology:
    """Counts under Integer keys (deserialized by the serde, not decoded as UTF-8)."""
    builder = StreamsBuilder()
    counts = (
        builder.stream("in", key_serde=S, value_serde=S)
        .group_by(lambda _k, v: len(v), key_serde=INT, value_serde=S)
        .count(Materialized.as_("c"))
    )
    counts.to_stream().to("out", key_serde=INT, value_serde=L)
    return builder.build()


def inputs() -> list[TestRecord[str, str | None]]:
    records: list[TestRecord[str, str | None]] = []
    for i in range(400):
        key = f"k{(i * 7) % 23}"
        value = None if i % 11 == 5 else "v" * (1 + i % 9)
        records.append(TestRecord(key, value, 1000 + 13 * i, Headers([("i", str(i).encode())])))
    records.append(TestRecord("never-held", None, 9000))
    return records


def run_flushes(topology: Topology, native: bool) -> list[tuple[Any, Any, int, list[tuple[str, bytes]]]]:
    """The topology's output records, the cache small enough that evictions flush between commits."""
    config = {"kappaflow.native.enabled": native, "statestore.cache.max.bytes": 4000}
    with TopologyTestDriver(topology, config) as driver:
        source = driver.create_input_topic("in", S, S)
        for record in inputs():
            if record.value is None and topology is not source_table_topology:
                continue  # a stream's null value is dropped by the grouping: nothing to compare
            source.pipe_record(record)
        key_serde: Any = INT if topology is integer_topology else S
        out = driver.create_output_topic("out", key_serde, serdes.Bytes())
        return [(r.key, r.value, r.timestamp, list(r.headers)) for r in out.read_records_to_list()]


source_table_topology = source_table()
integer_topology = integer_keyed_counts()


@pytest.mark.parametrize(
    "topology",
    [source_table_topology, clearing_sums(), integer_topology],
    ids=["table", "clearing-sums", "integer-keys"],
)
def test_a_flushed_table_reaches_its_native_child_as_in_python(
    core: NativeCore, monkeypatch: pytest.MonkeyPatch, topology: Topology
) -> None:
    taken: list[str] = []
    plan = table_processors.TableFlushPlan

    def counted(*fields: Any) -> Any:
        taken.append(fields[3])
        return plan(*fields)

    monkeypatch.setattr(table_processors, "TableFlushPlan", counted)
    native = run_flushes(topology, True)
    assert taken, "no batched flush went to the native child"
    taken.clear()
    python = run_flushes(topology, False)
    assert not taken
    assert native == python
    assert len(native) > 50
    if topology is not integer_topology:  # counts are never deleted
        assert any(value is None for _, value, _, _ in native)  # tombstones of held keys reach the sink
    assert all(key != "never-held" for key, _, _, _ in native)  # not of a key never held


class Context:
    """The slots of a task context a native stage and a table flush set."""

    __slots__ = ("current", "current_node", "failed_node")

    def __init__(self) -> None:
        self.current: Any = None
        self.current_node: Any = "previous"
        self.failed_node: Any = None


def peek_stage(core: NativeCore, context: Context, action: Any) -> Any:
    plan = StatelessPlan("peek", action, False, "PEEK", context, lambda *_: None, lambda r, _: r)  # type: ignore[arg-type]
    return core.StatelessStage(plan)


def batch_of(context: Context, keys: list[bytes], olds: list[bytes | None] | None = None) -> FlushedBatch:
    """A flush of timestamped Longs: the entry at index i holds i at timestamp i + 1."""
    writes = [(key, long_at(i, i + 1), context_at(i)) for i, key in enumerate(keys)]
    value_serde = ValueAndTimestampSerde(L)

    def set_record_context(record_context: RecordContext) -> None:
        context.current = record_context

    return FlushedBatch(
        writes,
        olds if olds is not None else [None] * len(keys),
        [NOT_DECODED] * len(keys),
        "t",
        True,
        S.deserialize,
        value_serde.deserialize,
        set_record_context,
    )


def long_at(value: int, timestamp: int) -> bytes:
    return timestamp.to_bytes(8, "big") + value.to_bytes(8, "big")


def test_take_flush_forwards_each_entry_under_its_record_context(core: NativeCore) -> None:
    context = Context()
    seen: list[tuple[Any, ...]] = []
    stage = peek_stage(
        core, context, lambda k, v: seen.append((k, v, context.current.offset, context.current_node))
    )
    plan = table_processors.TableFlushPlan(context, "TABLE", "CHILD", "CHILD", None, True)  # type: ignore[arg-type]
    stage.take_flush(batch_of(context, [b"x", b"y"], [None, long_at(5, 0)]), plan)
    assert seen == [
        ("x", Change(0, None), 0, "CHILD"),
        ("y", Change(1, 5), 1, "CHILD"),
    ]
    assert context.current_node == "previous" and context.failed_node is None


def test_take_flush_fails_where_the_python_loop_fails(core: NativeCore) -> None:
    """A raising child is named and ends the flush; an entry that does not decode (a String key that is
    not UTF-8) fails in the table's node; columns of different lengths are refused before any entry. The
    previous current node is back every time."""
    context = Context()
    seen: list[str] = []

    def refuse_y(key: str, _value: Any) -> None:
        if key == "y":
            raise ValueError("no y")
        seen.append(key)

    stage = peek_stage(core, context, refuse_y)
    plan = table_processors.TableFlushPlan(context, "TABLE", "CHILD", "CHILD", None, False)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no y"):
        stage.take_flush(batch_of(context, [b"x", b"y", b"z"]), plan)
    assert seen == ["x"] and context.failed_node == "PEEK" and context.current_node == "previous"

    context.failed_node = None
    with pytest.raises(UnicodeDecodeError):
        stage.take_flush(batch_of(context, [b"\xff"]), plan)
    assert context.failed_node is None and context.current_node == "previous"

    uneven = batch_of(context, [b"x"], [None, None])
    with pytest.raises(ValueError, match="1 writes, 2 old values"):
        stage.take_flush(uneven, plan)
    with pytest.raises(ValueError):
        list(uneven)  # the Python twin's zip(strict=True)
    assert seen == ["x"]


def flushed_writes() -> list[tuple[bytes, bytes | None, RecordContext]]:
    """Writes of a timestamped store: values, a delete, a negative timestamp, values shorter than a
    timestamp (not written by a timestamped store, but split the same way both ways)."""
    return [
        (b"a", long_at(7, 1_700_000_000_000), context_at(0)),
        (b"gone", None, context_at(1)),
        (b"old", (-5).to_bytes(8, "big", signed=True) + b"v", context_at(2)),
        (b"short", b"\xff\x01", context_at(3)),
        (b"empty", b"", context_at(4)),
    ]


@pytest.mark.parametrize("timestamped", [False, True])
def test_log_writes_is_the_python_twins(core: NativeCore, timestamped: bool) -> None:
    from kappaflow.state.kv_wrapped import log_writes

    native: list[tuple[Any, ...]] = []
    python: list[tuple[Any, ...]] = []
    core.log_writes(lambda *record: native.append(record), "t-changelog", 3, flushed_writes(), timestamped)
    log_writes(lambda *record: python.append(record), "t-changelog", 3, flushed_writes(), timestamped)
    assert native == python
    if timestamped:
        assert native[0] == ("t-changelog", b"a", long_at(7, 0)[8:], 1_700_000_000_000, 3)
        assert native[1] == ("t-changelog", b"gone", None, 1001, 3)  # a delete: its record's timestamp
        assert native[2][2:4] == (b"v", -5) and native[3][2:4] == (b"", -255)
    else:
        assert [record[3] for record in native] == [1000, 1001, 1002, 1003, 1004]


def test_log_writes_through_a_native_changelog_sender(core: NativeCore) -> None:
    """Through a `ProduceSend`'s bound `changelog`, the records are produced natively (its count) and
    what it leaves to Python (as `changelog` called from Python would) reaches its fallback with
    `send_changelog`'s arguments."""
    from confluent_kafka import Producer

    from kappaflow.runner.native_produce import confluent_version, mapped_librdkafka

    class Clients:
        def __init__(self) -> None:
            self.changelog_producer = Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})

        def serve_reports(self) -> None:
            return None

    clients, fallback = Clients(), []
    library = mapped_librdkafka()
    assert library is not None
    send = core.ProduceSend(
        clients,
        lambda *record: fallback.append(record),
        lambda err, msg: None,
        Producer,
        confluent_version(),
        library,
        "changelog_producer",
    )
    writes = flushed_writes()
    writes.append(("text", b"v", context_at(5)))  # type: ignore[arg-type]  # a str key: Python's turn
    core.log_writes(send.changelog, "t-changelog", 0, writes, True)
    assert send.sent == 3  # a, gone, empty; a negative timestamp and a str key go through Python
    assert fallback == [
        ("t-changelog", b"old", b"v", -5, 0),
        ("t-changelog", b"short", b"", -255, 0),
        ("t-changelog", "text", b"", int.from_bytes(b"v", "big", signed=True), 0),
    ]
    clients.changelog_producer.purge()
    clients.changelog_producer.flush(5)
