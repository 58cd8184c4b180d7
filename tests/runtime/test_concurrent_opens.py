"""Stores initialized inside `concurrent_opens()` open their RocksDB databases on threads and get them
back when the block ends: the same store as an open on the calling thread, and an open that fails
raises the store's error once every other database is attached (so each can be closed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kappaflow.api.errors import InvalidStateStoreError
from kappaflow.state.concurrent_opens import ConcurrentOpens, concurrent_opens, current_opens
from kappaflow.state.kv_bytes import RocksDBKeyValueBytesStore
from tests.runtime.test_stores import FakeStoreContext


def test_stores_opened_in_the_block_are_open_when_it_ends(tmp_path: Path) -> None:
    stores = [RocksDBKeyValueBytesStore(f"s{i}") for i in range(5)]
    with concurrent_opens() as opens:
        assert current_opens() is opens
        for i, store in enumerate(stores):
            store.init(FakeStoreContext(tmp_path / str(i)), store)  # type: ignore[arg-type]
    assert current_opens() is None
    try:
        for i, store in enumerate(stores):
            assert store.is_open()
            store.put(b"k", b"%d" % i)
            store.checkpoint(i)
            assert store.get(b"k") == b"%d" % i and store.committed_changelog_offset() == i
    finally:
        for store in stores:
            store.close()
    outside = RocksDBKeyValueBytesStore("s0")  # reopened on the calling thread: the same contents
    outside.init(FakeStoreContext(tmp_path / "0"), outside)  # type: ignore[arg-type]
    try:
        assert outside.get(b"k") == b"0" and outside.committed_changelog_offset() == 0
    finally:
        outside.close()


def test_a_failed_open_is_raised_after_the_others_are_attached(tmp_path: Path) -> None:
    first, twin, third = (RocksDBKeyValueBytesStore(n) for n in ("s", "s", "t"))
    with pytest.raises(InvalidStateStoreError, match="cannot open RocksDB"):
        with concurrent_opens():
            first.init(FakeStoreContext(tmp_path), first)  # type: ignore[arg-type]
            opens = current_opens()
            assert opens is not None
            opens.wait()  # `first` holds the database's lock: its twin cannot open it
            twin.init(FakeStoreContext(tmp_path), twin)  # type: ignore[arg-type]
            third.init(FakeStoreContext(tmp_path / "t"), third)  # type: ignore[arg-type]
    assert (
        first.is_open() and not twin.is_open() and third.is_open()
    )  # submitted after, attached all the same
    first.close()
    third.close()


def test_the_order_of_attachment_is_the_order_of_submission() -> None:
    attached: list[int] = []
    opens = ConcurrentOpens()
    try:
        for i in range(6):
            opens.submit(lambda i=i: i, attached.append)
        opens.wait()
    finally:
        opens.close()
    assert attached == list(range(6))


def test_blocks_do_not_nest() -> None:
    with concurrent_opens(), pytest.raises(RuntimeError), concurrent_opens():
        pass
    assert current_opens() is None
