"""`StreamTask.ready_to_process`: Kafka Streams' idling rule for tasks that read several partitions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kappaflow import StreamsBuilder, serdes
from kappaflow.api.config import StreamsConfig
from kappaflow.api.metrics import Metrics
from kappaflow.api.processor import TaskId
from kappaflow.api.record import Headers
from kappaflow.state.cache import ThreadCache
from kappaflow.tasks.drain import RawRecord
from kappaflow.tasks.task import LAGGING_STALL_MS, StreamTask

S = serdes.String()


class Collected:
    def __init__(self) -> None:
        self.sent: list[tuple[str, Any, Any]] = []

    def send(self, topic: str, key: Any, value: Any, headers: Any, timestamp: int, partition: Any) -> None:
        if topic == "out":  # not the table's changelog
            self.sent.append((topic, key, value))

    def send_changelog(self, topic: str, key: Any, value: Any, timestamp: int, partition: int) -> None:
        self.send(topic, key, value, None, timestamp, partition)

    def partition_count(self, topic: str) -> int:
        return 1


def _join_task(tmp_path: Path, idle_ms: int) -> tuple[StreamTask, Collected]:
    builder = StreamsBuilder()
    rows = builder.table("rows", key_serde=S, value_serde=S)
    builder.stream("clicks", key_serde=S, value_serde=S).join(rows, lambda c, r: f"{c}+{r}").to(
        "out", key_serde=S, value_serde=S
    )
    config = StreamsConfig({"application.id": "app", "state.dir": str(tmp_path), "max.task.idle.ms": idle_ms})
    collected = Collected()
    task = StreamTask(
        TaskId(0, 0), builder.build(), config, collected, ThreadCache(0), Metrics(), tmp_path, lambda: 0
    )
    task.initialize()
    task.complete_restoration()
    return task, collected


def _lags(**by_topic: int | None) -> Any:
    return lambda topic, partition: by_topic[topic]


def test_both_inputs_buffered_is_ready_and_processes_in_timestamp_order(tmp_path: Path) -> None:
    task, collected = _join_task(tmp_path, 0)
    task.add_records("rows", 0, [RawRecord(0, 10, b"k", b"row", Headers())])
    task.add_records("clicks", 0, [RawRecord(0, 20, b"k", b"click", Headers())])
    assert task.ready_to_process(0, _lags(rows=0, clicks=0))
    assert task.process_buffered(fetched_lag=_lags(rows=0, clicks=0), now_ms=0) == 2
    assert collected.sent == [("out", b"k", b"click+row")]


def test_an_empty_input_with_lag_holds_the_task_until_its_records_arrive(tmp_path: Path) -> None:
    task, collected = _join_task(tmp_path, 0)
    task.add_records("clicks", 0, [RawRecord(0, 20, b"k", b"click", Headers())])
    lags = _lags(rows=5, clicks=0)
    assert not task.ready_to_process(0, lags)
    assert task.process_buffered(fetched_lag=lags, now_ms=0) == 0
    task.add_records("rows", 0, [RawRecord(0, 10, b"k", b"row", Headers())])
    assert task.process_buffered(fetched_lag=_lags(rows=0, clicks=0), now_ms=1) == 2
    assert collected.sent == [("out", b"k", b"click+row")]


def test_unknown_lag_waits_but_a_stalled_partition_is_given_up_on(tmp_path: Path) -> None:
    task, _ = _join_task(tmp_path, 0)
    task.add_records("clicks", 0, [RawRecord(0, 20, b"k", b"click", Headers())])
    lags = _lags(rows=None, clicks=0)
    assert not task.ready_to_process(1000, lags)
    assert not task.ready_to_process(1000 + LAGGING_STALL_MS - 1, lags)
    assert task.ready_to_process(1000 + LAGGING_STALL_MS, lags)
    task.publish_metrics()
    assert task.metrics.counter("enforced-processing-total") == 1


@pytest.mark.parametrize(("idle_ms", "ready_at"), [(0, 0), (250, 250), (-1, 0)])
def test_a_caught_up_empty_input_waits_max_task_idle_ms(tmp_path: Path, idle_ms: int, ready_at: int) -> None:
    task, _ = _join_task(tmp_path, idle_ms)
    task.add_records("clicks", 0, [RawRecord(0, 20, b"k", b"click", Headers())])
    lags = _lags(rows=0, clicks=0)
    if ready_at:
        assert not task.ready_to_process(0, lags)
        assert not task.ready_to_process(ready_at - 1, lags)
    assert task.ready_to_process(ready_at, lags)
    task.publish_metrics()
    assert task.metrics.counter("enforced-processing-total") == 1


def test_without_a_lag_source_every_input_counts_as_complete(tmp_path: Path) -> None:
    """The test driver and Spark pass no lag function: their inputs are fully buffered."""
    task, collected = _join_task(tmp_path, 0)
    task.add_records("clicks", 0, [RawRecord(0, 20, b"k", b"click", Headers())])
    assert task.process_buffered() == 1
    assert collected.sent == []  # inner join, no row yet
