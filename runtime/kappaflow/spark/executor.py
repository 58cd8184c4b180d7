"""Executor side of reprocessing: one sub-topology task per partition, run by the runtime's own StreamTask.

Spark hands a Python worker the rows of one or more task partitions; for each partition this module builds
the very `StreamTask` the Kafka runtime would build (same processors, same stores, same state directory
layout), feeds it the partition's records in offset order, lets it pick records across its inputs by
timestamp exactly as the runtime does, and collects what it sends:

* records for repartition topics become rows that go back to Spark, which shuffles them to the partition
  Kafka's murmur2 partitioner would have chosen (the next stage's input);
* records for output topics are produced to Kafka from the executor with the runtime's producer settings
  (`murmur2_random`), keeping timestamps and headers (Spark's Kafka sink cannot set record timestamps,
  and outputs must inherit input time as in Kafka Streams);
* changelog records are compacted in memory (last write per key wins, tombstones dropped), which is the
  log Kafka would converge to, and only that is written, so a changelog holds the final state once;
  the offsets Kafka acknowledged are then checkpointed into the task's stores, so a runtime instance
  opening the same state directory finds nothing to restore.

Rows are plain tuples because millions of them cross the Python/JVM boundary and tuples pickle cheapest:

    input  (task_partition, topic, source_partition, sequence, timestamp, key, value, headers)
    output ("R", target_partition, topic, source_partition, sequence, timestamp, key, value, headers)
           ("S", task_partition, stats_json)

`sequence` is the Kafka offset for records read from a topic, and the emit order for repartition records.
"""

from __future__ import annotations

import heapq
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kappaflow.api.config import StreamsConfig
from kappaflow.api.errors import StreamsError
from kappaflow.api.metrics import Metrics
from kappaflow.api.processor import TaskId
from kappaflow.api.record import Headers
from kappaflow.clients.murmur2 import partition_for_key
from kappaflow.state.cache import ThreadCache
from kappaflow.tasks.task import RawRecord, StreamTask
from kappaflow.topology.topology import Topology

InputRow = tuple[int, str, int, int, int, bytes | None, bytes | None, list[tuple[str, bytes]] | None]
OutputRow = tuple[Any, ...]


@dataclass
class StageJob:
    """Everything an executor needs for one sub-topology; pickled once per Spark task."""

    app: Topology | Callable[[], Topology]
    config: dict[str, Any]
    subtopology: int
    partition_counts: dict[str, int]
    repartition_topics: list[str]
    changelog_topics: list[str]
    producer: dict[str, Any]
    state_root: str | None
    output_map: dict[str, str] = field(default_factory=dict)
    skip_outputs: bool = False


def load_app(app: Topology | Callable[[], Topology]) -> Topology:
    """The job's topology: shipped as an object, or rebuilt on the executor by a loader.

    `kappaflow reprocess` ships a loader (`load_topology` bound to `module:attr`) so executors on other
    machines import the application themselves instead of unpickling closures built on the driver.
    """
    return app if isinstance(app, Topology) else app()


class SparkCollector:
    """The RecordCollector of one reprocessing task (see the module docstring for where records go)."""

    def __init__(self, job: StageJob, task_partition: int, producer: Any) -> None:
        self.job = job
        self.task_partition = task_partition
        self.producer = producer
        self.repartition = set(job.repartition_topics)
        self.changelogs = set(job.changelog_topics)
        self.shuffled: list[OutputRow] = []
        self.compacted: dict[tuple[str, int], dict[bytes, tuple[bytes, int]]] = {}
        self.outputs = 0
        self.delivered: dict[tuple[str, int], int] = {}
        self.error: Any = None
        self._sequence = 0

    def partition_count(self, topic: str) -> int | None:
        return self.job.partition_counts.get(topic)

    def _partition(self, topic: str, key: bytes | None, partition: int | None) -> int:
        if partition is not None:
            return partition
        count = self.job.partition_counts[topic]
        if key is None:
            return self.task_partition % count
        return partition_for_key(key, count)

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
        timestamp: int,
        partition: int | None,
    ) -> None:
        if topic in self.repartition:
            target = self._partition(topic, key, partition)
            header_list = headers.to_list() if headers is not None and len(headers) else None
            self.shuffled.append(
                ("R", target, topic, self.task_partition, self._sequence, timestamp, key, value, header_list)
            )
            self._sequence += 1
            return
        if topic in self.changelogs:
            assert partition is not None and key is not None
            log = self.compacted.setdefault((topic, partition), {})
            log.pop(key, None)  # re-insert so the dict keeps the order of last writes, like compaction
            if value is not None:
                log[key] = (value, timestamp)
            return
        if self.job.skip_outputs:
            return
        self._produce(self.job.output_map.get(topic, topic), key, value, headers, timestamp, partition)
        self.outputs += 1

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            if self.error is None:
                self.error = f"{msg.topic()}: {err}"
            return
        tp = (msg.topic(), msg.partition())
        if msg.offset() > self.delivered.get(tp, -1):
            self.delivered[tp] = msg.offset()

    def _produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
        timestamp: int,
        partition: int | None,
    ) -> None:
        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": self._on_delivery}
        if partition is not None:
            kwargs["partition"] = partition
        if timestamp >= 0:
            kwargs["timestamp"] = timestamp
        if headers is not None and len(headers):
            kwargs["headers"] = headers.to_list()
        while True:
            try:
                self.producer.produce(topic, **kwargs)
                return
            except BufferError:
                self.producer.poll(0.05)

    def write_changelogs(self) -> dict[tuple[str, int], int]:
        """Produce the compacted changelogs; return how many records went to each partition."""
        written: dict[tuple[str, int], int] = {}
        for (topic, partition), log in self.compacted.items():
            for key, (value, timestamp) in log.items():
                self._produce(topic, key, value, None, timestamp, partition)
            written[(topic, partition)] = len(log)
        return written

    def flush(self) -> None:
        remaining = self.producer.flush(120)
        if remaining:
            raise StreamsError(f"reprocessing: {remaining} records not delivered within 120s")
        if self.error is not None:
            raise StreamsError(f"reprocessing: producing failed: {self.error}")


def _ordered_records(rows: list[InputRow], repartition: set[str]) -> dict[tuple[str, int], list[RawRecord]]:
    """Per input (topic, partition), the records in the order the task must see them.

    Topic records keep offset order. A repartition partition is fed by several upstream tasks: each one's
    records keep their emit order, and the streams are merged by timestamp (stable), the order in which
    a consumer would most plausibly see them - and the one that keeps windowed results closest to the
    runtime's. Offsets are then numbered 0.. as in a fresh repartition topic.
    """
    by_input: dict[tuple[str, int], list[InputRow]] = {}
    for row in rows:
        by_input.setdefault((row[1], row[0]), []).append(row)
    result: dict[tuple[str, int], list[RawRecord]] = {}
    for tp, group in by_input.items():
        if tp[0] in repartition:
            upstream: dict[int, list[InputRow]] = {}
            for row in group:
                upstream.setdefault(row[2], []).append(row)
            runs = [sorted(rs, key=lambda r: r[3]) for _, rs in sorted(upstream.items())]
            merged: Iterable[InputRow] = heapq.merge(*runs, key=lambda r: r[4])
            result[tp] = [RawRecord(i, r[4], r[5], r[6], Headers(r[7] or [])) for i, r in enumerate(merged)]
        else:
            group.sort(key=lambda r: r[3])
            result[tp] = [RawRecord(r[3], r[4], r[5], r[6], Headers(r[7] or [])) for r in group]
    return result


def run_task(job: StageJob, topology: Topology, partition: int, rows: list[InputRow]) -> list[OutputRow]:
    """Run one task over its rows; return repartition rows and one stats row."""
    from confluent_kafka import Producer

    started = time.perf_counter()
    config = StreamsConfig(job.config)
    app_id = config.application_id
    temporary = job.state_root is None
    state_root = Path(tempfile.mkdtemp(prefix="kappaflow-spark-")) if temporary else Path(str(job.state_root))
    if not temporary:
        state_root = state_root / app_id
    task_id = TaskId(job.subtopology, partition)
    producer = Producer(job.producer)
    collector = SparkCollector(job, partition, producer)
    task = StreamTask(
        task_id,
        topology,
        config,
        collector,
        ThreadCache(config.get_int("statestore.cache.max.bytes")),
        Metrics(),
        state_root,
        lambda: int(time.time() * 1000),
    )
    try:
        task.initialize()
        task.complete_restoration()
        ordered = _ordered_records(rows, set(job.repartition_topics))
        for (topic, tp_partition), records in ordered.items():
            task.add_records(topic, tp_partition, records)
        processed = 0
        while task.process():
            processed += 1
        task.prepare_commit()  # flush caches: forwards and logs what they still hold
        written = collector.write_changelogs()
        collector.flush()
        offsets: dict[str, int] = {}
        for meta in task.state_manager.logged_stores():
            tp = (meta.changelog_topic, partition)
            # A fresh changelog (the driver checked) starts at 0: its end is what we acknowledged.
            offsets[meta.name] = collector.delivered.get(tp, -1) + 1
        task.post_commit(offsets)
        task.close(clean=True)
    except BaseException:
        task.close(clean=False)
        raise
    finally:
        if temporary:
            shutil.rmtree(state_root, ignore_errors=True)
    stats = {
        "task": str(task_id),
        "records": processed,
        "outputs": collector.outputs,
        "repartitioned": len(collector.shuffled),
        "changelog_records": sum(written.values()),
        "changelog_offsets": offsets,
        "seconds": round(time.perf_counter() - started, 3),
    }
    return [*collector.shuffled, ("S", partition, json.dumps(stats))]


def run_partitions(job: StageJob, rows: Iterator[InputRow]) -> Iterator[OutputRow]:
    """A Spark `mapPartitions` function: group rows by task partition and run one task for each."""
    topology = load_app(job.app)
    by_partition: dict[int, list[InputRow]] = {}
    for row in rows:
        by_partition.setdefault(row[0], []).append(row)
    for partition in sorted(by_partition):
        yield from run_task(job, topology, partition, by_partition.pop(partition))
