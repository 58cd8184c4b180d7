"""A Spark reprocessing task with one input (kappaflow.spark.executor.run_task) processes each batch of it
before the next is built: an offset range as the kafka-client reader hands it over, one repartition
partition's shuffled batches as their merge yields them. Its memory is bounded by a batch, not by its
input (building the whole input first held all of it at once). Run in-process, with the reader replaced
by batches of the records it would return: no broker or Spark session is needed to see the order in which
a task builds and processes its input."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from kappaflow import StreamsBuilder, serdes
from kappaflow.api.record import Headers
from kappaflow.spark import executor
from kappaflow.spark.batches import batch_records, encode_batch, encode_records, shuffled_input, upstream_runs
from kappaflow.spark.executor import StageJob, run_task
from kappaflow.tasks.drain import RawTuple
from tests.native_support import require_native_core

S = serdes.String()
APP_ID = "spark-streamed"
RECORDS = 50
BATCH = 7


def _topology_and_job(seen: list[str]) -> tuple[object, StageJob]:
    def note(_key: str, value: str) -> None:
        if value == "poison":
            raise ValueError("a record the test fails on")
        seen.append(value)

    builder = StreamsBuilder()
    stream = builder.stream("in", key_serde=S, value_serde=S)
    stream.peek(note).repartition(key_serde=S, value_serde=S)
    topology = builder.build()
    (repartition,) = [topology.resolve_topic(t, APP_ID) for t in topology.internal_topics]
    job = StageJob(
        app=topology,
        config={"application.id": APP_ID, "bootstrap.servers": "unused:9092"},
        subtopology=0,
        partition_counts={"in": 1, repartition: 2},
        repartition_topics=[repartition],
        changelog_topics=[],
        producer={},
        state_root=None,
    )
    return topology, job


def _raw(offset: int, value: str) -> RawTuple:
    return (offset, 1000 + offset, f"k{offset % 5}".encode(), value.encode(), Headers(()))


def _shuffled(out: list[tuple[object, ...]]) -> list[tuple[int, bytes | None, bytes | None]]:
    return sorted(
        (ts, key, value)
        for row in out[:-1]
        for ts, key, value, _headers in batch_records(row[4])  # type: ignore[arg-type]
    )


class BatchedReader:
    """Stands in for reader.read_batches: the range's records in batches of BATCH, noting how many records
    the task had processed each time it asked for the next batch, and whether it was closed."""

    def __init__(self, values: list[str], seen: list[str]) -> None:
        self.values = values
        self.seen = seen
        self.processed_when_asked: list[int] = []
        self.closed = False
        self.calls: list[tuple[str, int, int, int]] = []

    def __call__(
        self, _settings: object, topic: str, partition: int, start: int, end: int, _native: bool = True
    ) -> Generator[list[RawTuple], None, None]:
        self.calls.append((topic, partition, start, end))
        try:
            for first in range(start, end, BATCH):
                self.processed_when_asked.append(len(self.seen))
                yield [_raw(o, self.values[o]) for o in range(first, min(first + BATCH, end))]
            self.processed_when_asked.append(len(self.seen))
        finally:
            self.closed = True


def test_a_range_is_processed_batch_by_batch_as_it_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    topology, job = _topology_and_job(seen)
    values = [f"v{i}" for i in range(RECORDS)]
    reader = BatchedReader(values, seen)
    monkeypatch.setattr(executor, "read_batches", reader)
    out = run_task(job, topology, 0, [(0, "in", 0, 0, RECORDS)])  # type: ignore[arg-type]
    assert reader.calls == [("in", 0, 0, RECORDS)]
    # every batch was processed whole before the next one was asked for
    assert reader.processed_when_asked == [*range(0, RECORDS, BATCH), RECORDS]
    assert seen == values and reader.closed

    # the same records handed over at once (the path of a task with several inputs) give the same output
    at_once: list[str] = []
    topology2, job2 = _topology_and_job(at_once)
    rows = [(0, "in", 0, *_raw(o, values[o])[:4], None) for o in range(RECORDS)]
    out2 = run_task(job2, topology2, 0, rows)  # type: ignore[arg-type]
    assert at_once == values
    assert _shuffled(out) == _shuffled(out2) and len(_shuffled(out)) == RECORDS


def test_a_task_failing_mid_range_closes_its_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    topology, job = _topology_and_job(seen)
    values = [f"v{i}" for i in range(RECORDS)]
    values[2 * BATCH + 3] = "poison"
    reader = BatchedReader(values, seen)
    monkeypatch.setattr(executor, "read_batches", reader)
    with pytest.raises(Exception, match="a record the test fails on"):
        run_task(job, topology, 0, [(0, "in", 0, 0, RECORDS)])  # type: ignore[arg-type]
    assert reader.closed  # the consumer a real reader holds is closed, not left to the collector
    assert seen == values[: 2 * BATCH + 3]  # stopped at the poison record, in its third batch
    assert len(reader.processed_when_asked) == 3  # the batches after it were never read


@pytest.mark.parametrize("native", [pytest.param(True, marks=pytest.mark.native_core), False])
def test_a_repartition_partition_is_processed_batch_by_batch_in_merge_order(
    monkeypatch: pytest.MonkeyPatch, native: bool
) -> None:
    """The stage after a repartition, reading the batches two upstream tasks shuffled to it: the records
    are processed in the merge's order (by timestamp, the earlier upstream first on a tie), each batch of
    SHUFFLED_BATCH before the next is built."""
    if native:
        require_native_core()
    seen: list[str] = []
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=S)
        .repartition(key_serde=S, value_serde=S)
        .peek(lambda _k, v: seen.append(v))
        .repartition(key_serde=S, value_serde=S)
    )
    topology = builder.build()
    first, second = sorted(topology.resolve_topic(t, APP_ID) for t in topology.internal_topics)
    job = StageJob(
        app=topology,
        config={
            "application.id": APP_ID,
            "bootstrap.servers": "unused:9092",
            "kappaflow.native.enabled": native,
        },
        subtopology=1,
        partition_counts={"in": 1, first: 1, second: 1},
        repartition_topics=[first, second],
        changelog_topics=[],
        producer={},
        state_root=None,
    )
    # two upstream tasks' runs, each in two chunks' batches; timestamps interleave and tie across them
    upstream = {
        task: [
            (1000 + 2 * i + task % 2, f"k{i}".encode(), f"t{task}-{i}".encode(), None) for i in range(RECORDS)
        ]
        for task in (0, 1)
    }
    rows = [
        (0, first, task, encode_batch(base, 25, encode_records(records[base : base + 25])))
        for task, records in upstream.items()
        for base in (0, 25)
    ]
    runs = [[encode_records(records[:25]), encode_records(records[25:])] for records in upstream.values()]
    expected = [record[3].decode() for record in shuffled_input(runs, None)]
    assert len(upstream_runs([(0, 25, b""), (25, 25, b"")])) == 1  # one task's two chunks: one run

    asked: list[int] = []
    real = executor.shuffled_batches

    def noting(*args: object) -> Generator[list[RawTuple], None, None]:
        for batch in real(*args):  # type: ignore[arg-type]
            asked.append(len(seen))
            yield batch
        asked.append(len(seen))

    monkeypatch.setattr(executor, "shuffled_batches", noting)
    monkeypatch.setattr(executor, "SHUFFLED_BATCH", BATCH)
    out = run_task(job, topology, 0, rows)  # type: ignore[arg-type]
    assert seen == expected and len(seen) == 2 * RECORDS
    assert asked == [*range(0, 2 * RECORDS, BATCH), 2 * RECORDS]
    assert len(_shuffled(out)) == 2 * RECORDS
