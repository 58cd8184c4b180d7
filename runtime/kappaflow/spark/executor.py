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

Rows are plain tuples, and repartitioned records travel in batches: per-row overhead in PySpark's
serializers costs more than the topology itself, so what crosses Spark is few, large rows:

    record (from a topic)   (task_partition, topic, source_partition, offset, timestamp, key, value, headers)
    range (read here)       (task_partition, topic, source_partition, start_offset, end_offset)
    batch (repartitioned)   (task_partition, topic, source_partition, encoded (base, span, records in
                            emit order); see spark/batches.py)
    output                  ("R", target_partition, topic, source_partition, encoded batch)
                            ("S", task_partition, stats_json)

A stateless stage may be split: several Spark tasks each run the partition's task over one offset range of
it (a "chunk"). Each chunk's batches carry its first offset (`sequence_base`, shifted) and how many
records it emitted, so the next stage, ordering one upstream partition's batches by base, sees the chunks
concatenated in offset order: exactly the emit order of one unsplit task. A keyed stage may be split by
key instead: the stage before it sends each record to its key's slot (`partition * splits + sub`,
SparkCollector._slot), and each slot runs its own copy of the partition's task over its keys
(`run_task`'s `key_slice`); see spark/splits.py.
"""

from __future__ import annotations

import contextlib
import gc
import json
import operator
import shutil
import tempfile
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from kappaflow.api.config import StreamsConfig
from kappaflow.api.errors import StreamsError
from kappaflow.api.metrics import Metrics
from kappaflow.api.processor import TaskId
from kappaflow.api.record import Headers
from kappaflow.clients.kafka import produce_record
from kappaflow.clients.murmur2 import murmur2
from kappaflow.spark.batches import (
    Batch,
    Decoded,
    Emitted,
    decode_batch,
    encode_batch,
    shuffled_batches,
    shuffled_input,
    upstream_runs,
)
from kappaflow.spark.reader import read_batches, read_range
from kappaflow.spark.splits import key_slot
from kappaflow.spark.worker_producer import discard as discard_producer
from kappaflow.spark.worker_producer import worker_producer
from kappaflow.tasks.drain import RawTuple
from kappaflow.tasks.native import ShuffleSend, core, new_thread_cache
from kappaflow.tasks.task import StreamTask
from kappaflow.topology.topology import Topology

HeaderList = list[tuple[str, bytes | None]] | None
RecordRow = tuple[int, str, int, int, int, bytes | None, bytes | None, HeaderList]
BatchRow = tuple[int, str, int, bytes]
RangeRow = tuple[int, str, int, int, int]
InputRow = RecordRow | BatchRow | RangeRow
StatsRow = tuple[str, int, str]  # ("S", task partition, stats JSON): an upstream stage's, handed on
OutputRow = tuple[Any, ...]

# Keys whose repartition target a task remembers (per topic); past it the memo starts over.
_PARTITION_MEMO = 200_000

# A task reading one repartition partition builds its record tuples this many at a time (_process_batches).
SHUFFLED_BATCH = 50_000

# A chunk's batches are ordered by its first input offset shifted past any count one chunk can emit.
SEQUENCE_SHIFT = 40


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
    consumer: dict[str, Any] = field(default_factory=dict)
    # Key slots per partition of repartition topics whose reading stage splits by key (spark/splits.py):
    # records sent there go to slot partition * splits + sub, the Spark partition of their key's slot.
    key_splits: dict[str, int] = field(default_factory=dict)
    # This stage's own: its Spark partition index is partition * input_key_splits + sub.
    input_key_splits: int = 1


def load_app(app: Topology | Callable[[], Topology]) -> Topology:
    """The job's topology: shipped as an object, or rebuilt on the executor by a loader.

    `kappaflow reprocess` ships a loader (`load_topology` bound to `module:attr`) so executors on other
    machines import the application themselves instead of unpickling closures built on the driver.
    """
    return app if isinstance(app, Topology) else app()


class SparkCollector:
    """The RecordCollector of one reprocessing task (see the module docstring for where records go)."""

    def __init__(
        self, job: StageJob, task_partition: int, sequence_base: int = 0, native: bool = True
    ) -> None:
        self.job = job
        self.task_partition = task_partition
        # The worker's producer (spark/worker_producer.py). A stage that writes changelogs takes it at
        # once, so a new producer's wait for its id overlaps the task; any other at its first record for
        # Kafka: a stage that only repartitions (the first stage of most topologies) never connects one.
        self.producer: Any = worker_producer(job.producer) if job.changelog_topics else None
        self.repartition = set(job.repartition_topics)
        self.changelogs = set(job.changelog_topics)
        self.shuffled: dict[tuple[str, int], list[Emitted]] = {}
        self.repartitioned = 0
        self.compacted: dict[tuple[str, int], dict[bytes, tuple[bytes, int]]] = {}
        self.outputs = 0
        self.delivered: dict[tuple[str, int], int] = {}
        self.error: Any = None
        self._base = sequence_base
        self._partitions: dict[str, dict[bytes, int]] = {}
        # With the native core the sink stages append repartitioned records to its byte buffers (no
        # Python call or tuple per record: spark/batches.py); this `send` takes the rest.
        installed = core(native)
        self._native_shuffle: ShuffleSend | None = None
        if installed is not None and job.repartition_topics:
            targets = [(t, job.partition_counts[t], job.key_splits.get(t, 1)) for t in job.repartition_topics]
            self._native_shuffle = installed.ShuffleSend(targets, task_partition, self.send)
            self.send = self._native_shuffle  # type: ignore[method-assign, assignment]

    def partition_count(self, topic: str) -> int | None:
        return self.job.partition_counts.get(topic)

    def _slot(self, topic: str, key: bytes | None, partition: int | None) -> int:
        """The target partition of a repartitioned record, or its key's slot of it when the reading stage
        splits by key (`key_slot`; a record without a key goes to the partition's first slot)."""
        count = self.job.partition_counts[topic]
        splits = self.job.key_splits.get(topic, 1)
        if key is None:
            return (self.task_partition % count if partition is None else partition) * splits
        if partition is not None:
            return key_slot(murmur2(key) & 0x7FFFFFFF, partition, count, splits) if splits > 1 else partition
        # murmur2 in Python costs more than the rest of a repartition send; keys repeat (that is why
        # they are regrouped), so each (topic, key) is hashed once per task, in a bounded memo.
        memo = self._partitions.get(topic)
        if memo is None:
            memo = self._partitions[topic] = {}
        target = memo.get(key)
        if target is None:
            if len(memo) >= _PARTITION_MEMO:
                memo.clear()
            hashed = murmur2(key) & 0x7FFFFFFF
            target = memo[key] = key_slot(hashed, hashed % count, count, splits)
        return target

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
            target = self._slot(topic, key, partition)
            header_list = headers.to_list() if headers is not None and len(headers) else None
            batch = self.shuffled.get((topic, target))
            if batch is None:
                batch = self.shuffled[(topic, target)] = []
            batch.append((timestamp, key, value, header_list))
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

    def send_dead_letter(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        timestamp: int,
        on_written: Callable[[], None],
    ) -> None:
        """A failed delivery fails the Spark task at its flush, so a record sent here is one written."""
        self.send(topic, key, value, headers, timestamp, None)
        on_written()

    def send_changelog(
        self, topic: str, key: bytes, value: bytes | None, timestamp: int, partition: int
    ) -> None:
        self.send(topic, key, value, None, timestamp, partition)

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
        producer = self.producer
        if producer is None:
            producer = self.producer = worker_producer(self.job.producer)
        produce_record(producer, topic, key, value, headers, timestamp, partition, self._on_delivery)

    def shuffle_rows(self) -> list[OutputRow]:
        """One row per target slot: ("R", slot, topic, this task's partition, encoded batch)."""
        rows: list[OutputRow] = []
        native = self._native_shuffle.take() if self._native_shuffle is not None else []
        span = sum(map(len, self.shuffled.values())) + sum(entry[2] for entry in native)
        for topic, target, count, payload in native:
            self.repartitioned += count
            rows.append(("R", target, topic, self.task_partition, encode_batch(self._base, span, payload)))
        for (topic, target), batch in self.shuffled.items():
            self.repartitioned += len(batch)
            rows.append(("R", target, topic, self.task_partition, encode_batch(self._base, span, batch)))
        self.shuffled.clear()
        return rows

    def write_changelogs(self) -> dict[tuple[str, int], int]:
        """Produce the compacted changelogs; return how many records went to each partition."""
        written: dict[tuple[str, int], int] = {}
        for (topic, partition), log in self.compacted.items():
            for key, (value, timestamp) in log.items():
                self._produce(topic, key, value, None, timestamp, partition)
            written[(topic, partition)] = len(log)
        return written

    def flush(self) -> None:
        if self.producer is None:
            return
        remaining = self.producer.flush(120)
        if remaining:
            raise StreamsError(f"reprocessing: {remaining} records not delivered within 120s")
        if self.error is not None:
            raise StreamsError(f"reprocessing: producing failed: {self.error}")


_OFFSET = operator.itemgetter(3)  # of a RecordRow


def _ordered_records(
    rows: list[InputRow], consumer: dict[str, Any], native: bool = True
) -> dict[tuple[str, int], list[RawTuple]]:
    """Per input (topic, partition), the records in the order the task must see them.

    Topic records keep offset order. A repartition partition is fed by several upstream tasks: each one's
    records keep their emit order, and the streams are merged by timestamp (stable), the order in which
    a consumer would most plausibly see them - and the one that keeps windowed results closest to the
    runtime's. Offsets are then numbered 0.. as in a fresh repartition topic.
    """
    records: dict[tuple[str, int], list[RecordRow]] = {}
    batches: dict[tuple[str, int], list[BatchRow]] = {}
    result: dict[tuple[str, int], list[RawTuple]] = {}
    for row in rows:
        if len(row) == 5:
            result[(row[1], row[0])] = read_range(consumer, row[1], row[2], row[3], row[4], native)
        elif len(row) == 4:
            batches.setdefault((row[1], row[0]), []).append(row)
        else:
            records.setdefault((row[1], row[0]), []).append(row)
    for tp, group in records.items():
        group.sort(key=_OFFSET)
        result[tp] = [(r[3], r[4], r[5], r[6], Headers(r[7] or ())) for r in group]
    installed = core(native)
    for tp, batch_rows in batches.items():
        result[tp] = shuffled_input(_shuffled_runs(batch_rows), installed)
    return result


def _process_batches(
    task: StreamTask, topic: str, partition: int, batches: Generator[list[RawTuple], None, None]
) -> int:
    """A task with one input, an offset range (read_batches) or one repartition partition's shuffled
    batches (shuffled_batches), processes each batch before the next is built, so its memory is bounded
    by a batch, not by its input: building the whole input first held every record of it at once (a
    1M-record partition read by one task: ~1M record tuples). With one input there is nothing to order
    it against, so the records are processed in the same order either way. The generator is closed
    however the task ends (a range's consumer with it). Returns how many records were processed."""
    processed = 0
    with contextlib.closing(batches):
        while True:
            with _collector_paused():  # as a whole input's, a batch is frozen out of collections
                batch = next(batches, None)
            if batch is None:
                return processed
            task.add_records(topic, partition, batch)
            processed += process_all(task)


def _one_shuffled_input(rows: list[InputRow]) -> bool:
    """Whether the rows are shuffled batches of one repartition partition, the task's only input."""
    return bool(rows) and all(len(row) == 4 for row in rows) and len({(r[1], r[0]) for r in rows}) == 1


def _shuffled_runs(rows: list[BatchRow]) -> list[list[Batch]]:
    """One repartition partition's upstream runs, in upstream order (batches.upstream_runs)."""
    upstream: dict[int, list[Decoded]] = {}
    for row in rows:
        upstream.setdefault(row[2], []).append(decode_batch(row[3]))
    return [run for _, decoded in sorted(upstream.items()) for run in upstream_runs(decoded)]


def _first_offset(rows: list[InputRow]) -> int:
    """The lowest input offset among topic rows (a range's start or a record's offset); 0 if none.

    Only a split stage's chunks need it (see the module docstring); an unsplit task's base is harmless.
    """
    offsets = [row[3] for row in rows if len(row) != 4]
    return min(offsets) if offsets else 0


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a task's whole input is built, which is then frozen.

    Hundreds of thousands of records that all stay alive make every collection the allocations trigger
    walk all of them again, for nothing (records hold no cycles; refcounting frees them): measured, that
    doubles the time to build a task's input. Once built, the input is frozen (gc.freeze) until the task
    ends (run_task unfreezes): collections during processing then skip it, which cut a first-stage task's
    collector time about fourfold on bench/reprocess.py; refcounting still frees each record as it is
    processed. The freeze comes *before* the collector is enabled again: every object allocated while it
    was off still counts as young, so the first allocation after `gc.enable()` ran a young collection
    over the whole input (py-spy, 1M lines at local[1]: 6% of the Python workers' samples).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


ASYNC_RESULT_WAIT_S = 0.05  # the longest wait for an asynchronous call before checking again


def process_all(task: StreamTask) -> int:
    """Process every buffered record, and, with asynchronous operations (map_values_async, ...), their
    calls: the task accepts up to `max_in_flight` records, and each completion emitted frees room for the
    next ones, so a partition's calls run `max_in_flight` at a time as in the runtime, until the last
    result is out. Returns how many records were processed."""
    processed = task.process_buffered()
    while task.async_pending():
        task.await_async_results(ASYNC_RESULT_WAIT_S)
        task.deliver_async()
        processed += task.process_buffered()
    return processed


def run_task(
    job: StageJob, topology: Topology, partition: int, rows: list[InputRow], key_slice: int = 0
) -> list[OutputRow]:
    """Run one task (or one key slice of it: `key_slice` of job.input_key_splits) over its rows; return
    repartition rows and one stats row."""
    started, cpu_started = time.perf_counter(), time.process_time()
    config = StreamsConfig(job.config)
    app_id = config.application_id
    temporary = job.state_root is None
    state_root = Path(tempfile.mkdtemp(prefix="kappaflow-spark-")) if temporary else Path(str(job.state_root))
    if not temporary:
        state_root = state_root / app_id
    task_id = TaskId(job.subtopology, partition)
    native = config.get_bool("kappaflow.native.enabled")
    collector = SparkCollector(job, partition, _first_offset(rows) << SEQUENCE_SHIFT, native)
    task = StreamTask(
        task_id,
        topology,
        config,
        collector,
        new_thread_cache(config.get_int("statestore.cache.max.bytes"), native),
        Metrics(),
        state_root,
        lambda: int(time.time() * 1000),
        # One commit at the very end, into fresh changelogs and state: transactional stores would hold
        # the task's whole state in memory until then, for no recovery gain (a failed task is rerun).
        transactional_state=False,
    )
    try:
        task.initialize()
        task.complete_restoration()
        if len(rows) == 1 and len(rows[0]) == 5:  # one offset range: nothing to order it against
            slot, topic, partition, start, end = rows[0]
            batches = read_batches(job.consumer, topic, partition, start, end, native)
            processed = _process_batches(task, topic, slot, batches)
        elif _one_shuffled_input(rows):
            runs = _shuffled_runs(cast(list[BatchRow], rows))
            batches = shuffled_batches(runs, core(native), SHUFFLED_BATCH)
            processed = _process_batches(task, rows[0][1], rows[0][0], batches)
        else:
            with _collector_paused():  # the input, alive until processed, is frozen out of collections
                ordered = _ordered_records(rows, job.consumer, native)
            # The task's queues then hold the only references: each record is freed once processed, in
            # the loop that allocated its successors' memory, not all at once when the task returns
            # (py-spy: that bulk free was 4% of a worker's samples).
            for topic, tp_partition in list(ordered):
                task.add_records(topic, tp_partition, ordered.pop((topic, tp_partition)))
            # Every input is buffered: one call drains them in timestamp order (one tight loop per queue
            # when the task reads one partition), not one process() call per record.
            processed = process_all(task)
        task.prepare_commit()  # flush caches: forwards and logs what they still hold
        written = collector.write_changelogs()
        collector.flush()
        # A fresh changelog (the driver checked) starts at 0: its end is what we acknowledged.
        task.post_commit(collector.delivered)
        offsets = {meta.name: meta.offset or 0 for meta in task.state_manager.logged_stores()}
        task.close(clean=True)
    except BaseException:
        task.close(clean=False)
        if collector.producer is not None:
            discard_producer(collector.producer)
        raise
    finally:
        gc.unfreeze()
        if temporary:
            shutil.rmtree(state_root, ignore_errors=True)
    stats = {
        "task": str(task_id),
        "key_slice": f"{key_slice}/{job.input_key_splits}",
        "records": processed,
        "outputs": collector.outputs,
        "repartitioned": collector.repartitioned,
        "changelog_records": sum(written.values()),
        "changelog_offsets": offsets,
        "seconds": round(time.perf_counter() - started, 3),
        # The worker's CPU time (its librdkafka threads included): below `seconds` when cores are shared.
        "cpu_seconds": round(time.process_time() - cpu_started, 3),
    }
    shuffled = collector.shuffle_rows()
    stats["repartitioned"] = collector.repartitioned
    return [*shuffled, ("S", partition, json.dumps(stats))]


def run_partitions(job: StageJob, rows: Iterator[InputRow | StatsRow]) -> Iterator[OutputRow]:
    """A Spark `mapPartitions` function: group rows by task partition and run one task for each.

    Stats rows among the input (`("S", ...)`, the stages before that shuffled straight into this one:
    spark/shuffle.py) are handed on after this partition's own output, so the driver collects every
    stage's stats with the last stage's result.
    """
    started = time.perf_counter()
    topology = load_app(job.app)
    by_slot: dict[int, list[InputRow]] = {}
    upstream_stats: list[OutputRow] = []
    for row in rows:
        slot = row[0]
        if isinstance(slot, str):
            upstream_stats.append(row)
        else:
            by_slot.setdefault(slot, []).append(cast(InputRow, row))
    read_seconds = round(time.perf_counter() - started, 3)  # includes Spark handing the rows over
    for slot in sorted(by_slot):
        partition, key_slice = divmod(slot, job.input_key_splits)
        out = run_task(job, topology, partition, by_slot.pop(slot), key_slice)
        stats = json.loads(out[-1][2])
        stats["read_seconds"] = read_seconds
        out[-1] = ("S", partition, json.dumps(stats))
        yield from out
    yield from upstream_stats
