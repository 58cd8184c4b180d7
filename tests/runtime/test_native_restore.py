"""The native restore path (`kappaflow_native.ChangelogMessages`) against its Python references: the
changelog reader's `_by_partition` and the RocksDB store's `restore_messages` loop. The same consumed
messages in, the same batches, ends, errors and store contents out, on the edges: tombstones (of live
and missing keys), missing and empty keys, empty and large values, any timestamp, timestamped and plain
stores, confluent-kafka's own `Message` (read from its struct) and other types (read through their
accessors)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import KafkaError
from hypothesis import given, settings
from hypothesis import strategies as st

from kappaflow.api.errors import StreamsError
from kappaflow.runner import routing
from kappaflow.runner.changelog_reader import ChangelogReader
from kappaflow.state.kv_bytes import InMemoryKeyValueBytesStore
from kappaflow.tasks.native import ChangelogMessages, installed_core
from tests.native_support import require_native_core
from tests.runtime.test_bulk_restore import Consumed, open_rocksdb


@pytest.fixture(scope="module")
def native() -> ChangelogMessages:
    found = routing.changelog_messages(require_native_core())
    assert found is not None  # the pinned confluent-kafka's layout is known
    return found


class SubMessage(confluent_kafka.Message):
    """A subclass may override an accessor: it is read through the accessors, never the struct."""

    def value(self) -> bytes:
        return b"overridden"


def message(
    key: bytes | None,
    value: bytes | None,
    timestamp: int = 0,
    offset: int = 0,
    partition: int = 0,
    **more: Any,
) -> confluent_kafka.Message:
    return confluent_kafka.Message(
        topic=more.pop("topic", "log"),
        partition=partition,
        offset=offset,
        key=key,
        value=value,
        timestamp=(confluent_kafka.TIMESTAMP_CREATE_TIME, timestamp),
        **more,
    )


LARGE = bytes(range(256)) * 4096  # 1 MiB

# Overwrites; a tombstone of a live key and of a missing one; a missing key and an empty key (both b"");
# an empty value; a large value; the smallest, negative, -1 (no timestamp) and largest timestamps; a
# subclass and a plain object with the accessors among confluent-kafka's own messages.
EDGES: list[Any] = [
    message(b"b", b"1", 10),
    message(b"a", b"1", 11),
    message(b"b", b"2", 12),
    message(b"c", b"", -(2**63)),
    message(b"a", None, 13),
    message(b"zz", None, 14),
    message(None, b"nokey", -1),
    Consumed("log", 0, 7, None, None, 17),  # a tombstone of the missing key: b"" deleted
    message(b"", b"empty key", 15),
    message(b"big", LARGE, 2**63 - 1),
    SubMessage(topic="log", partition=0, offset=9, key=b"sub", value=b"ignored", timestamp=(1, 16)),
    Consumed("log", 0, 10, b"fake", b"accessors", -5),
    Consumed("log", 0, 11, b"b", None, 18),
    message(b"c", b"2", -7),
]


def restored(messages: list[Any], timestamped: bool, writer: ChangelogMessages | None) -> list[Any]:
    with tempfile.TemporaryDirectory() as directory:
        store = open_rocksdb(Path(directory), "s", timestamped)
        try:
            store.restore_messages(messages, writer)
            return list(store.all())
        finally:
            store.close()


@pytest.mark.parametrize("timestamped", [False, True])
def test_native_restore_writes_what_the_python_loop_writes(
    native: ChangelogMessages, timestamped: bool
) -> None:
    python = restored(EDGES, timestamped, None)
    assert restored(EDGES, timestamped, native) == python
    reference = InMemoryKeyValueBytesStore("mem", timestamped=timestamped)
    reference.restore_batch([(m.key() or b"", m.value(), m.timestamp()[1]) for m in EDGES])
    assert python == list(reference.all())
    contents = dict(python)
    assert set(contents) == {b"", b"c", b"big", b"sub", b"fake"}
    prefix = (lambda ts: ts.to_bytes(8, "big", signed=True)) if timestamped else (lambda ts: b"")
    assert contents[b"big"] == prefix(2**63 - 1) + LARGE
    assert contents[b""] == prefix(15) + b"empty key"
    assert contents[b"sub"] == prefix(16) + b"overridden"
    assert contents[b"fake"] == prefix(-5) + b"accessors"


def test_a_value_the_store_cannot_take_fails_the_same_way(native: ChangelogMessages) -> None:
    """A value that is no bytes (never from the client) raises as the Python loop raises: rocksdict
    refuses it in a plain store, `bytes + str` in a timestamped one."""
    for timestamped, expected in ((False, ValueError), (True, TypeError)):
        failures = []
        for writer in (None, native):
            with pytest.raises(expected) as caught:
                restored([message(b"k", "text")], timestamped, writer)  # type: ignore[arg-type]
            failures.append(str(caught.value))
        assert failures[0] == failures[1]


changelogs = st.lists(
    st.tuples(
        st.one_of(st.none(), st.sampled_from([b"", b"a", b"b", b"c"])),
        st.one_of(st.none(), st.binary(max_size=3)),
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
        st.booleans(),  # confluent-kafka's Message, or an object with its accessors
    ),
    max_size=40,
)


@settings(max_examples=40, deadline=None)
@given(changelog=changelogs, timestamped=st.booleans())
def test_native_restore_matches_the_python_loop_on_any_changelog(
    native: ChangelogMessages,
    changelog: list[tuple[bytes | None, bytes | None, int, bool]],
    timestamped: bool,
) -> None:
    messages = [
        message(k, v, ts, i) if real else Consumed("log", 0, i, k, v, ts)
        for i, (k, v, ts, real) in enumerate(changelog)
    ]
    assert restored(messages, timestamped, native) == restored(messages, timestamped, None)


def eof(partition: int, offset: int, topic: str = "log") -> confluent_kafka.Message:
    return message(None, None, 0, offset, partition, topic=topic, error=KafkaError(KafkaError._PARTITION_EOF))


def test_native_split_gives_the_batches_and_ends_of_by_partition(native: ChangelogMessages) -> None:
    """Interleaved runs of partitions and changelogs (one the same partition number of another topic),
    ends of partition between and after them, passing errors, and fake messages among real ones."""
    a = [message(b"k", b"v", 0, i, 0) for i in range(4)]
    b = [message(b"k", b"v", 0, i, 1) for i in range(3)]
    other = message(b"k", b"v", 0, 0, 0, topic="other")
    passing = message(None, None, partition=3, error=KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    fake = Consumed("log", 1, 9, b"k", b"v")
    consumed = [
        a[0],
        a[1],
        b[0],
        other,
        a[2],
        eof(1, 5),
        b[1],
        passing,
        a[3],
        fake,
        b[2],
        eof(1, 11),
        eof(0, 4),
    ]
    python = ChangelogReader._by_partition(consumed)
    split = ChangelogReader._split_natively(native, consumed)
    assert split == python
    assert [(tp, len(run)) for tp, run in split[0].items()] == [
        (("log", 0), 4),
        (("log", 1), 4),
        (("other", 0), 1),
    ]
    assert split[0][("log", 1)] == [b[0], b[1], fake, b[2]]
    assert split[1] == {("log", 1): 11, ("log", 0): 4}
    assert ChangelogReader._split_natively(native, []) == ({}, {})


def test_native_split_raises_on_a_fatal_error_as_by_partition_does(native: ChangelogMessages) -> None:
    fatal = message(None, None, partition=3, error=KafkaError(KafkaError._FATAL, fatal=True))
    consumed = [message(b"k", b"v"), fatal, message(b"k", b"w", offset=1)]
    for split in (ChangelogReader._by_partition, lambda m: ChangelogReader._split_natively(native, m)):
        with pytest.raises(StreamsError, match="restoring from log-3 failed"):
            split(consumed)


def test_restoring_falls_back_to_the_python_loops_where_the_core_cannot_read_the_struct(
    native: ChangelogMessages, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    core = installed_core()
    assert core is not None
    assert routing.changelog_messages(None) is None  # kappaflow.native.enabled=false, or no core
    with pytest.raises(ValueError, match="is not the confluent-kafka"):  # the version alone is not trusted
        core.ChangelogMessages(SubMessage, str(confluent_kafka.version()))
    monkeypatch.setattr(confluent_kafka, "version", lambda: "9.9.9")
    assert routing.changelog_messages(core) is None
    assert "restored changelog records read through their accessors: confluent-kafka 9.9.9" in caplog.text


def test_the_store_takes_the_native_writer_through_the_state_manager(
    native: ChangelogMessages, tmp_path: Path
) -> None:
    """The reader hands its writer down: `restore_messages(store, records, next_offset, writer)`."""
    from kappaflow.tasks.state_manager import ProcessorStateManager

    calls: list[int] = []

    class Counting:
        def write(self, batch: Any, messages: list[Any], timestamped: bool) -> None:
            calls.append(len(messages))
            native.write(batch, messages, timestamped)

    manager = ProcessorStateManager(tmp_path, 0, lambda s: f"app-{s}-changelog")
    store = open_rocksdb(tmp_path, "s", True)
    try:
        manager.register(store, store.restore_batch, store.restore_messages)
        manager.restore_messages("s", EDGES, len(EDGES), Counting())
        assert calls == [len(EDGES)] and manager.offset("s") == len(EDGES)
        assert list(store.all()) == restored(EDGES, True, None)
    finally:
        store.close()
