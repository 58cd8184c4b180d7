"""KIP-960/968 versioned key queries on a store: a key as of a time, and a key's history between two times,
with Java's rules (a version valid from f until t overlaps [from, to] when f <= to and t > from; the latest
version never expires; tombstones are not versions), the query objects' builders, and the HTTP API's
parameter reading. The routed HTTP answer from a running app is tests/kafka/test_versioned_queries.py."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from kappaflow import Materialized, Stores, StreamsBuilder
from kappaflow.api.errors import InvalidStateStoreError
from kappaflow.query import MultiVersionedKeyQuery, ResultOrder, VersionedKeyQuery, VersionedRecord
from kappaflow.query.versioned import query_from_params, run_multi_versioned, run_versioned, version_json
from kappaflow.state.versioned import default_segment_interval, expired_versions, select_versions
from kappaflow.testing import TopologyTestDriver

CFG = {"default.key.serde": "String", "default.value.serde": "String"}
HISTORY = 100


def prices(history: int = HISTORY) -> Any:
    builder = StreamsBuilder()
    builder.table(
        "prices", materialized=Materialized.as_(Stores.in_memory_versioned_key_value_store("p", history))
    )
    return builder.build()


@pytest.fixture
def store() -> Any:
    """A versioned store after: k=a@10, k=b@20, k=tombstone@30, k=c@40, k=b2@25 (out of order), j=x@5."""
    with TopologyTestDriver(prices(), CFG) as driver:
        topic = driver.create_input_topic("prices")
        for key, value, ts in [
            ("k", "a", 10),
            ("k", "b", 20),
            ("k", None, 30),
            ("k", "c", 40),
            ("k", "b2", 25),
        ]:
            topic.pipe_input(key, value, ts)
        topic.pipe_input("j", "x", 5)
        yield driver.get_state_store("p")


def test_as_of_and_latest(store: Any) -> None:
    def at(ts: int | None) -> VersionedRecord[Any] | None:
        query = VersionedKeyQuery.with_key("k")
        return run_versioned(store, query if ts is None else query.as_of(ts))

    assert at(None) == VersionedRecord("c", 40)
    assert at(9) is None
    assert at(10) == VersionedRecord("a", 10, 20)
    assert at(24) == VersionedRecord("b", 20, 25)
    assert at(27) == VersionedRecord("b2", 25, 30)
    assert at(30) is None  # deleted then
    assert at(1000) == VersionedRecord("c", 40)


def test_history_is_the_versions_overlapping_the_range_newest_first_by_default(store: Any) -> None:
    def history(query: MultiVersionedKeyQuery[str, Any]) -> list[tuple[Any, int, int | None]]:
        return [(r.value, r.timestamp, r.valid_to) for r in run_multi_versioned(store, query)]

    everything = MultiVersionedKeyQuery.with_key("k")
    assert history(everything) == [("c", 40, None), ("b2", 25, 30), ("b", 20, 25), ("a", 10, 20)]
    assert history(everything.with_ascending_timestamps())[0] == ("a", 10, 20)
    assert history(everything.with_descending_timestamps()) == history(everything)
    # [20, 25): b ends at 25, so a range starting at 25 misses it; "to" is inclusive of a start
    assert history(everything.from_time(25).to_time(40)) == [("c", 40, None), ("b2", 25, 30)]
    assert history(everything.from_time(19).to_time(20)) == [("b", 20, 25), ("a", 10, 20)]
    assert history(everything.from_time(30).to_time(39)) == []  # only the deletion was valid then
    assert history(everything.to_time(9)) == []
    assert history(MultiVersionedKeyQuery.with_key("absent")) == []
    with pytest.raises(ValueError, match="must not be after"):
        run_multi_versioned(store, everything.from_time(50).to_time(40))


def test_the_latest_version_never_expires_but_older_ones_do() -> None:
    with TopologyTestDriver(prices(history=10), CFG) as driver:
        topic = driver.create_input_topic("prices")
        topic.pipe_input("k", "old", 0)
        topic.pipe_input("k", "new", 5)
        topic.pipe_input("other", "advance", 500)  # stream time 500: retention boundary 490
        store = driver.get_state_store("p")
        assert run_versioned(store, VersionedKeyQuery.with_key("k").as_of(100)) == VersionedRecord("new", 5)
        assert run_versioned(store, VersionedKeyQuery.with_key("k").as_of(3)) is None
        old_range = MultiVersionedKeyQuery.with_key("k").from_time(0).to_time(100)
        assert run_multi_versioned(store, old_range) == [VersionedRecord("new", 5)]
        assert run_multi_versioned(store, old_range.to_time(4)) == []


def test_query_objects_are_immutable_values() -> None:
    base = MultiVersionedKeyQuery.with_key("k")
    ranged = base.from_time(datetime(2026, 1, 1, tzinfo=UTC)).to_time(1_767_225_600_500)
    assert base.from_timestamp is None and base.result_order is ResultOrder.ANY
    assert (ranged.from_timestamp, ranged.to_timestamp) == (1_767_225_600_000, 1_767_225_600_500)
    assert VersionedKeyQuery.with_key("k").as_of(7) == VersionedKeyQuery("k", 7)
    with pytest.raises(ValueError, match="needs a key"):
        VersionedKeyQuery.with_key(None)
    with pytest.raises(ValueError, match="aware"):
        base.from_time(datetime(2026, 1, 1))


def test_a_plain_store_refuses_versioned_queries() -> None:
    builder = StreamsBuilder()
    builder.table("prices", materialized="plain")
    with TopologyTestDriver(builder.build(), CFG) as driver:
        with pytest.raises(InvalidStateStoreError, match="not a versioned store"):
            run_versioned(driver.get_state_store("plain"), VersionedKeyQuery.with_key("k"))


def test_select_versions_is_javas_overlap_rule() -> None:
    starts = [10, 20, 30]  # valid [10,20), [20,30), [30, forever)
    assert select_versions(starts, None, None, boundary=0) == [0, 1, 2]
    assert select_versions(starts, 20, 20, boundary=0) == [1]
    assert select_versions(starts, 19, 29, boundary=0) == [0, 1]
    assert select_versions(starts, 35, None, boundary=0) == [2]
    assert select_versions(starts, 0, 25, boundary=25) == [0, 1]  # reaching the boundary: all stored rows
    assert select_versions(starts, 0, 24, boundary=25) == []  # wholly before it: only the latest counts
    assert select_versions(starts, 0, 40, boundary=50) == [2]  # the latest never expires
    assert select_versions([], None, None, boundary=0) == []


def test_http_parameters() -> None:
    assert query_from_params("version", "k", {}) == VersionedKeyQuery("k")
    assert query_from_params("version", "k", {"as_of": "12"}) == VersionedKeyQuery("k", 12)
    assert query_from_params(
        "versions", "k", {"from": "1", "to": "9", "order": "asc"}
    ) == MultiVersionedKeyQuery("k", 1, 9, ResultOrder.ASCENDING)
    assert query_from_params("versions", "k", {}).result_order is ResultOrder.DESCENDING  # type: ignore[union-attr]
    for bad in ({"as_of": "yesterday"},):
        with pytest.raises(ValueError, match="epoch milliseconds"):
            query_from_params("version", "k", bad)
    with pytest.raises(ValueError, match="'asc' or 'desc'"):
        query_from_params("versions", "k", {"order": "up"})
    with pytest.raises(ValueError, match="must not be after"):
        query_from_params("versions", "k", {"from": "9", "to": "1"})
    assert version_json(VersionedRecord("v", 3, 8)) == {"value": "v", "timestamp": 3, "valid_to": 8}


def test_worker_processes_answer_versioned_calls_from_the_keys_task() -> None:
    """With `num.stream.threads` > 1 the parent's view forwards each call to the worker holding the key's
    task: `get_versions(key, ...)` by its key, `query(q)` by the query's key - never to every worker."""
    from kappaflow.runner.workers import ForwardedStore

    class Pool:
        def __init__(self) -> None:
            self.routed: list[tuple[str, str | None]] = []

        def call_for_key(self, call: Any, task_id: str | None) -> Any:
            self.routed.append((call[0], task_id))
            return []

        def call_all(self, call: Any) -> list[Any]:
            raise AssertionError(f"{call[0]} went to every worker")

    pool = Pool()
    view = ForwardedStore(pool, lambda method, args: (method, args), lambda key: f"0_{key}")  # type: ignore[arg-type]
    view.get("k", 5)
    view.get_versions("j", 1, 2, True)
    view.query(MultiVersionedKeyQuery.with_key("q"))
    assert pool.routed == [("get", "0_k"), ("get_versions", "0_j"), ("query", "0_q")]


def test_old_versions_expire_a_segment_at_a_time_as_in_java() -> None:
    """A version is filed under the segment of its end; a segment wholly before the retention boundary goes.
    Until then a history query still returns versions that ended before the boundary (Java's too: the
    vq-late-puts-beyond-retention conformance scenario)."""
    assert [default_segment_interval(ms) for ms in (10, 60_000, 100_000, 3_600_000, 86_400_000)] == [
        2_000,
        20_000,
        20_000,
        300_000,
        3_600_000,
    ]
    starts = [0, 1_500, 2_500, 9_000]  # ends 1_500 (segment 0), 2_500 (1), 9_000 (4); the latest never ends
    assert expired_versions(starts, boundary=1_999, segment_interval_ms=2_000) == []
    assert expired_versions(starts, boundary=2_000, segment_interval_ms=2_000) == [0]
    assert expired_versions(starts, boundary=9_999, segment_interval_ms=2_000) == [0, 1_500]  # 9_000: live
    assert expired_versions(starts, boundary=10_000, segment_interval_ms=2_000) == [0, 1_500, 2_500]
    assert expired_versions(starts, boundary=-5, segment_interval_ms=2_000) == []
    with TopologyTestDriver(prices(history=10), CFG) as driver:
        topic = driver.create_input_topic("prices")
        for value, ts in (("a", 100), ("b", 105), ("c", 120), ("d", 5_000)):
            topic.pipe_input("k", value, ts)
        store = driver.get_state_store("p")
        # stream time 5_000, boundary 4_990: segment 0 (ends before 2_000) is gone, the rest is history
        assert run_multi_versioned(store, MultiVersionedKeyQuery.with_key("k")) == [
            VersionedRecord("d", 5_000),
            VersionedRecord("c", 120, 5_000),
        ]
