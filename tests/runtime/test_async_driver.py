"""The asynchronous DSL operations in TopologyTestDriver, with the real tasks: the driver holds every call
until the test completes it, so each ordering, the commit watermark, backpressure and the error paths are
checked in a chosen completion order, with no dependence on timing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kappaflow import Ordering, Record, StreamsBuilder, serdes
from kappaflow.api.errors import ProcessingError
from kappaflow.tasks.async_executor import CallOutcome
from kappaflow.testing import TopologyTestDriver

S = serdes.String()
DEAD = "dead-letters"


async def upper(value: str) -> str:
    await asyncio.sleep(0)
    return value.upper()


def topology(attach: Any) -> Any:
    """in -> filter (fused) -> the async operation -> map_values (fused) -> out."""
    builder = StreamsBuilder()
    stream = builder.stream("in", key_serde=S, value_serde=S).filter(lambda k, v: v != "skip")
    attach(stream).map_values(lambda v: f"<{v}>").to("out", key_serde=S, value_serde=S)
    return builder.build()


def driver(attach: Any, manual: bool = True, **config: Any) -> TopologyTestDriver:
    return TopologyTestDriver(
        topology(attach), config or None, async_completion="manual" if manual else "auto"
    )


def pipe(d: TopologyTestDriver, pairs: list[tuple[str, str]]) -> None:
    d.create_input_topic("in", S, S).pipe_key_value_list(pairs)


def out(d: TopologyTestDriver) -> list[tuple[str, str]]:
    return d.create_output_topic("out", S, S).read_key_values_to_list()


def by_value(d: TopologyTestDriver, *values: str) -> list[Any]:
    pending = d.pending_async_calls()
    return [next(c for c in pending if c.args[-1] == v) for v in values]


@pytest.mark.parametrize("fusion", [True, False], ids=["fused", "generic"])
def test_auto_mode_matches_the_synchronous_operation(fusion):
    """Async or blocking function, with or without the key: the same outputs as map_values (the fused
    stages before and after the async node are entered from both sides)."""

    def blocking(key: str, value: str) -> str:
        return f"{key}:{value}"

    pairs = [("a", "x"), ("b", "skip"), ("a", "y"), ("c", "z")]
    config = {"kappaflow.fusion.enabled": fusion}
    with driver(lambda s: s.map_values_async(upper), manual=False, **config) as d:
        pipe(d, pairs)
        assert out(d) == [("a", "<X>"), ("a", "<Y>"), ("c", "<Z>")]
        assert d.pending_async_calls() == []
    with driver(lambda s: s.map_values_async(blocking), manual=False, **config) as d:
        pipe(d, pairs)
        assert out(d) == [("a", "<a:x>"), ("a", "<a:y>"), ("c", "<c:z>")]
    with driver(lambda s: s.map_values(blocking), manual=False, **config) as d:
        pipe(d, pairs)
        assert out(d) == [("a", "<a:x>"), ("a", "<a:y>"), ("c", "<c:z>")]


def test_per_key_ordering_keeps_each_keys_order_whatever_completes_first():
    with driver(lambda s: s.map_values_async(upper)) as d:
        pipe(d, [("a", "a1"), ("b", "b1"), ("a", "a2"), ("b", "b2")])
        assert [c.args for c in d.pending_async_calls()] == [("a1",), ("b1",)]  # a2, b2 wait their turn
        d.complete_async_calls(by_value(d, "b1"))
        assert out(d) == [("b", "<B1>")]
        assert [c.args for c in d.pending_async_calls()] == [("a1",), ("b2",)]
        d.complete_async_calls(by_value(d, "b2", "a1"))
        assert out(d) == [("b", "<B2>"), ("a", "<A1>")]
        d.complete_async_calls()
        assert out(d) == [("a", "<A2>")]


def test_per_partition_and_none_orderings():
    with driver(lambda s: s.map_values_async(upper, ordering=Ordering.PER_PARTITION)) as d:
        pipe(d, [("a", "a1"), ("b", "b1"), ("a", "a2")])
        assert len(d.pending_async_calls()) == 3  # concurrent, one key or not
        d.complete_async_calls(by_value(d, "a2", "b1"))
        assert out(d) == []  # behind a1
        d.complete_async_calls()
        assert out(d) == [("a", "<A1>"), ("b", "<B1>"), ("a", "<A2>")]
    with driver(lambda s: s.map_values_async(upper, ordering="none")) as d:
        pipe(d, [("a", "a1"), ("a", "a2")])
        d.complete_async_calls(by_value(d, "a2", "a1"))
        assert out(d) == [("a", "<A2>"), ("a", "<A1>")]


def test_exactly_once_emits_only_below_the_commit_watermark():
    config = {"processing.guarantee": "exactly_once_v2"}
    with driver(lambda s: s.map_values_async(upper, ordering=Ordering.NONE), **config) as d:
        pipe(d, [("a", "a1"), ("b", "b1"), ("c", "c1")])
        d.complete_async_calls(by_value(d, "c1", "b1"))
        assert out(d) == []  # a1 (offset 0) still in flight: nothing above it may be committed
        d.complete_async_calls()
        assert out(d) == [("a", "<A1>"), ("b", "<B1>"), ("c", "<C1>")]


def test_commits_stop_at_the_oldest_record_in_flight():
    with driver(lambda s: s.map_values_async(upper)) as d:
        pipe(d, [("a", "a1"), ("b", "b1"), ("c", "c1")])
        (task,) = d._tasks.values()  # the driver commits after every record
        assert task.committed_offsets[("in", 0)] == 0
        d.complete_async_calls(by_value(d, "b1", "c1"))
        assert task.committed_offsets[("in", 0)] == 0 and task.commit_needed()
        d.complete_async_calls()
        assert task.committed_offsets[("in", 0)] == 3 and not task.commit_needed()


def test_backpressure_holds_records_in_the_task_at_max_in_flight():
    with driver(lambda s: s.map_values_async(upper, max_in_flight=2, ordering="none")) as d:
        pipe(d, [("k", f"v{i}") for i in range(5)])
        (task,) = d._tasks.values()
        assert [c.args for c in d.pending_async_calls()] == [("v0",), ("v1",)]
        assert task.async_saturated() and task.buffered() == 3  # not accepted: still in the queue
        d.complete_async_calls(by_value(d, "v1"))
        assert [c.args for c in d.pending_async_calls()] == [("v0",), ("v2",)]
        d.complete_async_calls()
        d.complete_async_calls()
        d.complete_async_calls()
        assert [v for _, v in out(d)] == ["<V1>", "<V0>", "<V2>", "<V3>", "<V4>"]
        assert task.buffered() == 0


def test_flat_map_and_process_values_async():
    async def split(value: str) -> list[str]:
        return value.split()

    async def stamp(record: Record[str, str]) -> Record[str, str]:
        return record.with_value(record.value * 2).with_timestamp(record.timestamp + 1)

    with driver(lambda s: s.flat_map_values_async(split)) as d:
        pipe(d, [("a", "x y z"), ("b", "")])
        d.complete_async_calls()
        assert out(d) == [("a", "<x>"), ("a", "<y>"), ("a", "<z>")]
    with driver(lambda s: s.process_values_async(stamp), manual=False) as d:
        d.create_input_topic("in", S, S).pipe_input("a", "q", timestamp=10)
        (record,) = d.create_output_topic("out", S, S).read_records_to_list()
        assert (record.key, record.value, record.timestamp) == ("a", "<qq>", 11)


def test_a_failed_or_timed_out_call_goes_to_the_handler_and_the_dead_letter_topic():
    attempts: dict[str, int] = {}

    async def flaky(value: str) -> str:
        attempts[value] = attempts.get(value, 0) + 1
        if value == "slow":
            await asyncio.sleep(30)
        if value == "bad" or (value == "flaky" and attempts[value] < 3):
            raise ConnectionError(f"{value} failed")
        return value

    config = {
        "processing.exception.handler": "log_and_continue",
        "errors.dead.letter.queue.topic.name": DEAD,
    }
    attach = lambda s: s.map_values_async(flaky, timeout=50, retries=2, backoff=1)  # noqa: E731
    with driver(attach, manual=False, **config) as d:
        pipe(d, [("k", "flaky"), ("k", "bad"), ("k", "slow"), ("k", "ok")])
        assert out(d) == [("k", "<flaky>"), ("k", "<ok>")]  # flaky made it on its third attempt
        assert attempts == {"flaky": 3, "bad": 3, "slow": 3, "ok": 1}
        dead = d.create_output_topic(DEAD, S, S).read_records_to_list()
        assert [r.value for r in dead] == ["bad", "slow"]
        errors = [r.headers.last_header("__kappaflow.error.message") for r in dead]
        assert b"ConnectionError: bad failed" in errors[0] and b"timed out after 50 ms" in errors[1]
        assert [r.headers.last_header("__kappaflow.source.offset") for r in dead] == [b"1", b"2"]
    with driver(lambda s: s.map_values_async(flaky)) as d:  # the default handler fails
        pipe(d, [("k", "bad")])
        with pytest.raises(ProcessingError, match="bad failed"):
            d.complete_async_calls()


def test_closing_cancels_calls_in_flight_without_late_results():
    with driver(lambda s: s.map_values_async(upper)) as d:
        pipe(d, [("a", "a1"), ("b", "b1")])
        (task,) = d._tasks.values()
        pending = d.pending_async_calls()
        task.close(clean=True)
        assert d.pending_async_calls() == []  # cancelled
        for call in pending:  # a call that finishes anyway, after the close: its result is dropped
            call.done(CallOutcome("late"))
        assert task.deliver_async() == 0 and out(d) == []


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"max_in_flight": 0}, ValueError, "max_in_flight must be"),
        ({"ordering": "by-key"}, ValueError, "ordering must be"),
        ({"timeout": "1s"}, TypeError, "timeout must be"),
        ({"timeout": 0}, ValueError, "timeout must be at least"),
        ({"retries": -1}, ValueError, "retries must be"),
        ({"backoff": -5}, ValueError, "backoff must not"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, error, match):
    stream = StreamsBuilder().stream("in", key_serde=S, value_serde=S)
    with pytest.raises(error, match=match):
        stream.map_values_async(upper, **kwargs)
