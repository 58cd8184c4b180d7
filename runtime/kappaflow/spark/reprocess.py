"""Reprocessing on Spark: run a Topology over an offset range of its input topics, bootstrap a new app id.

The plan, stage by stage (a stage is a sub-topology, in the order repartition topics impose):

1. Topics: the new application's internal topics are created (or validated) exactly as `kappaflow run`
   would, and must be empty - a used application id is refused, because its changelogs and committed
   offsets would not match the state written here.
2. Input: each user topic's range [from, to) is fixed on the driver first, so the committed offsets
   written at the end are exactly the range's end. Each Spark task reads its own offset ranges with
   librdkafka (reader `kafka-client`, the default), or Spark's Kafka source reads them in batch mode
   (reader `spark`: the same records, but one JVM -> Python Row per record, which costs more than the
   topology itself; see bench/reprocess.py). `spark` stays selectable (`--reader spark`) as Spark's own
   maintained connector, a cross-check of the librdkafka path. A stage fed by one topic keeps the
   source's partitioning (one Spark partition per Kafka partition); otherwise rows are keyed by task
   partition and shuffled with an identity partitioner. Repartition records carry the partition murmur2
   chose when they were emitted (as the runtime's producer would), travelling in one encoded batch per
   (upstream task, target partition); where one stage feeds one single-input stage, the writing stage's
   tasks shuffle them in their own Python pass (spark/shuffle.py). Where the semantics allow it a stage
   runs more Spark tasks than its input has partitions (`splits`; spark/splits.py says which stages and
   why): the stateless work before the first shuffle is cut into offset ranges, and a keyed count /
   reduce / aggregate after a repartition into key slots, whose records the upstream stage already sends
   to the key's slot. The stages that need
   a partition's stream time or order in one task (windows, suppression, joins, TTL, user processors,
   state directly on an input topic) keep one task per partition.
3. Execution: `executor.run_partitions` runs the runtime's StreamTask per partition; see executor.py.
4. Bootstrap: the changelogs hold the compacted final state; the group `<app id>` gets the range's end
   offsets committed on the input topics (and the repartition topics' ends). Where the executors share
   the runtime's disk (local mode, or an explicit state dir) every task's stores are also left in
   `<state.dir>/<app id>/<task>/`, the runtime's own layout, with their changelog offsets checkpointed:
   `kappaflow run` on the new id then restores nothing and consumes from where reprocessing stopped -
   except for key-split tasks, whose slots cannot share one directory: those restore their changelogs.
   On a cluster the pods restore the compacted changelogs instead - final state, not a replay.

A Spark task that failed and were retried would produce its outputs twice, so retries are off
(`spark.task.maxFailures=1`): a failed reprocessing is rerun after `kappaflow reset` on the new id.
System-time punctuators do not fire (there is no wall clock to replay); stream-time ones do.
"""

from __future__ import annotations

import functools
import json
import logging
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from kappaflow.api.config import StreamsConfig
from kappaflow.api.errors import StreamsError
from kappaflow.clients.admin import InternalTopicManager
from kappaflow.clients.kafka import client_configs, new_consumer
from kappaflow.clients.rdkafka_log import serve_consumer_logs
from kappaflow.runner.topics import output_topics, prepare_topics
from kappaflow.spark.executor import InputRow, OutputRow, RecordRow, StageJob, load_app, run_partitions
from kappaflow.spark.progress import DEFAULT_INTERVAL_S as DEFAULT_PROGRESS_INTERVAL_S
from kappaflow.spark.progress import StageProgress
from kappaflow.spark.session import spark_kafka_options
from kappaflow.spark.shuffle import direct_shuffle_topic, slot_pair
from kappaflow.spark.shuffle import shuffled_to_input as _shuffled_to_input
from kappaflow.spark.splits import (
    key_splittable,
    offset_chunks,
    split_count,
    splittable,
    task_slots,
)
from kappaflow.topology.nodes import SubTopology
from kappaflow.topology.topology import Topology
from kappaflow_contract.topics import changelog_topic

log = logging.getLogger(__name__)

Offsets = dict[str, dict[int, int]]
Stage = tuple[int, SubTopology, list[str]]  # its number in the run, its sub-topology, its input topics

# Each Spark task reads its offset ranges with librdkafka, or Spark's Kafka source does (see the docstring).
READERS = ("kafka-client", "spark")
DEFAULT_READER = "kafka-client"


@dataclass
class ReprocessResult:
    application_id: str
    records_read: int = 0
    records_processed: int = 0
    outputs_written: int = 0
    changelog_records: int = 0
    tasks: int = 0
    start_offsets: Offsets = field(default_factory=dict)
    end_offsets: Offsets = field(default_factory=dict)
    task_stats: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        rate = self.records_read / self.seconds if self.seconds > 0 else 0.0
        return (
            f"reprocessed '{self.application_id}': {self.records_read} records read, "
            f"{self.records_processed} processed by {self.tasks} tasks, {self.outputs_written} output "
            f"records, {self.changelog_records} state records written, in {self.seconds:.1f}s "
            f"({rate:,.0f} records/s)"
        )


def parse_offsets(spec: str | Offsets, default: str) -> str | Offsets:
    """`earliest`, `latest`, or Spark's JSON `{"topic": {"0": 23}}` (a partition left out takes `default`)."""
    if isinstance(spec, dict):
        return spec
    text = spec.strip()
    if text in ("earliest", "latest"):
        return text
    try:
        raw = json.loads(text)
        return {str(t): {int(p): int(o) for p, o in parts.items()} for t, parts in raw.items()}
    except (ValueError, AttributeError) as exc:
        raise StreamsError(
            f'offsets must be earliest, latest or JSON like {{"t": {{"0": 5}}}}: {exc}'
        ) from exc


# Errors a topic created a moment ago reports until its leader is known everywhere.
_SETTLING = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION,
}


def watermarks(consumer: Consumer, topic: str, partition: int, timeout: float = 30.0) -> tuple[int, int]:
    """(low, high) of a partition, retrying while a just-created topic's leadership settles: the first
    retry soon (a fresh client usually learns the leader within milliseconds; a fixed 0.2 s wait was
    most of a run's time before its first stage), later ones up to every 0.2 s."""
    deadline = time.monotonic() + timeout
    pause = 0.005
    while True:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            return int(low), int(high)
        except KafkaException as exc:
            error = exc.args[0]
            settling = error.code() in _SETTLING or error.retriable()
            if not settling or time.monotonic() > deadline:
                raise
            serve_consumer_logs(consumer)  # it never fetches: its librdkafka lines arrive only so
            time.sleep(pause)
            pause = min(0.2, pause * 2)


def _resolve_range(
    consumer: Consumer, counts: Mapping[str, int], spec: str | Offsets, default: str
) -> Offsets:
    result: Offsets = {}
    for topic, count in counts.items():
        result[topic] = {}
        for partition in range(count):
            low, high = watermarks(consumer, topic, partition)
            if isinstance(spec, dict) and partition in spec.get(topic, {}):
                offset = max(low, min(high, spec[topic][partition]))
            else:
                offset = low if (spec if isinstance(spec, str) else default) == "earliest" else high
            result[topic][partition] = offset
    return result


def stage_order(topology: Topology) -> list[SubTopology]:
    """Sub-topologies ordered so that each runs after those writing its repartition topics."""
    subs = topology.sub_topologies()
    writers: dict[str, set[int]] = {}
    for sub in subs:
        for topic in sub.sink_topics:
            writers.setdefault(topic, set()).add(sub.id)
    order: list[SubTopology] = []
    done: set[int] = set()
    pending = list(subs)
    while pending:
        ready = [
            s
            for s in pending
            if all(
                w in done or w == s.id
                for t in s.source_topics
                if t in topology.internal_topics
                for w in writers.get(t, set())
            )
        ]
        if not ready:
            raise StreamsError("the topology's repartition topics form a cycle: it cannot be reprocessed")
        for sub in ready:
            order.append(sub)
            done.add(sub.id)
            pending.remove(sub)
    return order


def _to_input_row(row: Any) -> RecordRow:
    headers: list[tuple[str, bytes | None]] | None = None
    if row[7]:
        headers = [(h[0], bytes(h[1]) if h[1] is not None else None) for h in row[7]]
    return (
        row[0],
        row[1],
        row[2],
        row[3],
        row[4],
        bytes(row[5]) if row[5] is not None else None,
        bytes(row[6]) if row[6] is not None else None,
        headers,
    )


def _is_stats(row: OutputRow) -> bool:
    return bool(row[0] == "S")


def _is_shuffled(row: OutputRow) -> bool:
    return bool(row[0] == "R")


def _task_partition(row: InputRow) -> tuple[int, InputRow]:
    return (row[0], row)


def _identity(partition: int) -> int:
    return partition


def _second(pair: tuple[int, InputRow]) -> InputRow:
    return pair[1]


class Reprocessor:
    """One reprocessing run (driver side). `run()` does it all; the pieces are separate for testing.

    `app` is a Topology (pickled to the executors) or a zero-argument function building one (shipped by
    reference and called there). `config` is the *new* application's StreamsConfig. `start`/`end` are
    `earliest`/`latest` or per-partition offsets. `write_state=None` writes RocksDB state only when Spark
    runs locally. `output_map` renames output topics; `skip_outputs` rebuilds state only. `splits` is how
    many offset ranges or key slots each input partition of a splittable stage is cut into (None: one
    range or two key slots per Spark task slot; 1: never split). `progress` gets a line per step, and every
    `progress_interval_s` (0: never) the running stage's Spark tasks done so far.
    """

    def __init__(
        self,
        app: Topology | Callable[[], Topology],
        config: StreamsConfig | Mapping[str, Any],
        *,
        start: str | Offsets = "earliest",
        end: str | Offsets = "latest",
        state_dir: str | None = None,
        write_state: bool | None = None,
        output_map: Mapping[str, str] | None = None,
        skip_outputs: bool = False,
        reader: str = DEFAULT_READER,
        splits: int | None = None,
        progress: Callable[[str], None] | None = None,
        progress_interval_s: float = DEFAULT_PROGRESS_INTERVAL_S,
    ) -> None:
        if reader not in READERS:
            raise StreamsError(f"reader must be one of {', '.join(READERS)}, got '{reader}'")
        self.reader = reader
        if splits is not None and splits < 1:
            raise StreamsError(f"splits must be at least 1, got {splits}")
        self.splits = splits
        self.app = app
        self.topology = load_app(app)
        self.config = config if isinstance(config, StreamsConfig) else StreamsConfig(dict(config))
        if state_dir is not None:
            self.config = self.config.with_overrides({"state.dir": state_dir})
        self.app_id = self.config.application_id
        self.start = parse_offsets(start, "earliest")
        self.end = parse_offsets(end, "latest")
        self.write_state = write_state
        self.output_map = dict(output_map or {})
        self.skip_outputs = skip_outputs
        self.progress = progress or (lambda text: log.info("%s", text))
        self.progress_interval_s = progress_interval_s  # a running stage's Spark tasks, this often
        if self.topology.global_stores:
            raise StreamsError("global stores are not supported by reprocessing yet")
        if isinstance(app, Topology):
            _check_picklable(app)
        self.settings = client_configs(self.config, f"{self.app_id}-reprocess")
        self.admin = InternalTopicManager(self.settings["admin"])

    # ----------------------------------------------------------------- driver-side steps
    def prepare_topics(self) -> dict[str, int]:
        """Create/validate the new id's internal topics; refuse an id whose internal topics hold records."""
        outputs: dict[str, list[str]] = {}
        if not self.skip_outputs:  # the topics records are really written to: renamed ones, or none
            for topic, sinks in output_topics(self.topology).items():
                outputs.setdefault(self.output_map.get(topic, topic), []).extend(sinks)
        counts = prepare_topics(self.topology, self.config, self.admin, outputs).partition_counts
        internal = self.topology.internal_topic_names(self.app_id)
        consumer = self._check_consumer()
        try:
            for topic in internal:
                for partition in range(counts.get(topic, 0)):
                    _low, high = watermarks(consumer, topic, partition)
                    if high > 0:
                        raise StreamsError(
                            f"application id '{self.app_id}' was used before: {topic} holds records. Choose "
                            f"a new --application-id, or run `kappaflow reset` on this one first"
                        )
        finally:
            consumer.close()
        sink_counts = self.admin.partition_counts(
            [self.output_map.get(t, t) for t in self.topology.sink_topics()]
        )
        counts.update(
            {
                t: sink_counts[self.output_map.get(t, t)]
                for t in self.topology.sink_topics()
                if self.output_map.get(t, t) in sink_counts
            }
        )
        return counts

    def _check_consumer(self) -> Consumer:
        """A consumer for watermarks on the driver (never subscribed), its librdkafka lines logged."""
        return new_consumer({**self.settings["restore"], "group.id": f"{self.app_id}-reprocess-check"})

    def offset_ranges(self, counts: Mapping[str, int]) -> tuple[Offsets, Offsets]:
        user = {t: counts[t] for t in self.user_sources()}
        consumer = self._check_consumer()
        try:
            starts = _resolve_range(consumer, user, self.start, "earliest")
            ends = _resolve_range(consumer, user, self.end, "latest")
        finally:
            consumer.close()
        for topic, parts in starts.items():
            for partition, offset in parts.items():
                if ends[topic][partition] < offset:
                    raise StreamsError(f"{topic}-{partition}: end offset {ends[topic][partition]} < {offset}")
        return starts, ends

    def user_sources(self) -> list[str]:
        topology = self.topology
        return sorted(
            {t for s in topology.sub_topologies() for t in s.source_topics} - set(topology.internal_topics)
        )

    def commit_offsets(self, ends: Offsets, counts: Mapping[str, int]) -> None:
        """Commit the range's end on the input topics, and repartition topics' current ends, for the group."""

        tps = [TopicPartition(t, p, o) for t, parts in ends.items() for p, o in parts.items()]
        consumer = self._check_consumer()
        try:
            for name in self.topology.internal_topics:
                topic = self.topology.resolve_topic(name, self.app_id)
                if self.topology.internal_topics[name].kind != "repartition":
                    continue
                for partition in range(counts[topic]):
                    _low, high = watermarks(consumer, topic, partition)
                    tps.append(TopicPartition(topic, partition, high))
        finally:
            consumer.close()
        self.admin.set_group_offsets(self.app_id, tps)

    def key_splits(
        self,
        stages: list[SubTopology],
        counts: Mapping[str, int],
        repartition: list[str],
        parallelism: int,
        records: int,
    ) -> dict[str, int]:
        """Key slots per partition of each repartition topic whose reading stage splits by key (splits.py).

        Fixed before the first stage runs, since the stages writing a topic place records in its slots.
        Automatic splits judge size by the input's records per partition of the topic (a repartition
        carries at least that many in most topologies, several times that after a flat_map).
        """
        result: dict[str, int] = {}
        for sub in stages:
            sources = [self.topology.resolve_topic(t, self.app_id) for t in sub.source_topics]
            sinks = [self.topology.resolve_topic(t, self.app_id) for t in sub.sink_topics]
            if not key_splittable(sub, sources, sinks, repartition, self.topology.stores):
                continue
            partitions = counts[sources[0]]
            splits = split_count(self.splits, parallelism, partitions, records // max(1, partitions))
            if splits > 1:
                result[sources[0]] = splits
        return result

    def _account(self, result: ReprocessResult, stats: list[Any], stage: Stage, total: int) -> None:
        """Add one stage's tasks (its sub-topology's stats among a Spark job's) to the result, and say so."""
        index, sub, sources = stage
        own = [s for s in stats if int(str(s["task"]).split("_")[0]) == sub.id]
        result.task_stats.extend(own)
        processed = sum(s["records"] for s in own)
        result.records_processed += processed
        result.outputs_written += sum(s["outputs"] for s in own)
        result.changelog_records += sum(s["changelog_records"] for s in own)
        result.tasks += len(own)
        self.progress(
            f"stage {index}/{total} (sub-topology {sub.id}: {', '.join(sources)}): {len(own)} tasks "
            f"processed {processed} records"
        )

    # ----------------------------------------------------------------- the run
    def run(self, spark: Any) -> ReprocessResult:
        from pyspark import StorageLevel

        started = time.monotonic()
        result = ReprocessResult(self.app_id)
        counts = self.prepare_topics()
        starts, ends = self.offset_ranges(counts)
        result.start_offsets, result.end_offsets = starts, ends
        result.records_read = sum(ends[t][p] - o for t, parts in starts.items() for p, o in parts.items())
        self.progress(
            f"reprocessing {result.records_read} records of {', '.join(self.user_sources())} "
            f"into application '{self.app_id}'"
        )
        state_root: str | None = None
        write_state = self.write_state
        if write_state is None:  # only where the executors share the disk the runtime will use
            write_state = str(spark.sparkContext.master).startswith("local")
        if write_state:
            state_root = self.config.get_str("state.dir")
            shutil.rmtree(Path(state_root) / self.app_id, ignore_errors=True)
        internal = {self.topology.resolve_topic(t, self.app_id) for t in self.topology.internal_topics}
        repartition = sorted(
            self.topology.resolve_topic(t, self.app_id)
            for t, spec in self.topology.internal_topics.items()
            if spec.kind == "repartition"
        )
        changelogs = [changelog_topic(self.app_id, store) for store in self.topology.changelog_topics()]
        producer = dict(self.settings["producer"])
        producer.pop("transactional.id", None)
        producer.pop("transaction.timeout.ms", None)
        producer.update({"linger.ms": 20, "client.id": f"{self.app_id}-reprocess-producer"})
        options = spark_kafka_options(self.config)
        consumer = {**self.settings["restore"], "group.id": f"{self.app_id}-reprocess-reader"}
        shuffled: dict[str, Any] = {}
        direct: dict[str, Any] = {}  # repartition topic -> its reading stage's rows, shuffled by its writer
        persisted: list[Any] = []
        stages = stage_order(self.topology)
        parallelism = task_slots(str(spark.sparkContext.master), spark.sparkContext.defaultParallelism)
        key_splits = self.key_splits(stages, counts, repartition, parallelism, result.records_read)
        # Stages whose stats have not arrived: a stage that shuffles into its reader reports with the
        # reader's Spark job, which need not be the next one (an unrelated stage may run in between).
        ran: list[Stage] = []
        job_started: float | None = None
        for index, sub in enumerate(stages, 1):
            if job_started is None:  # the first stage of the next Spark job
                job_started = time.monotonic()
            sources = [self.topology.resolve_topic(t, self.app_id) for t in sub.source_topics]
            user_topics = [t for t in sources if t not in internal]
            tasks = max(counts[t] for t in sources)
            job = StageJob(
                self.app,
                self.config.as_dict(),
                sub.id,
                counts,
                repartition,
                changelogs,
                producer,
                state_root,
                self.output_map,
                self.skip_outputs,
                consumer,
                key_splits,
            )
            if len(sources) == 1 and key_splits.get(sources[0], 1) > 1:
                job.input_key_splits = key_splits[sources[0]]
                # Slots of one task must not share its directory: the runtime restores the changelogs.
                job.state_root = None
            parts: list[Any] = []
            resolved_sinks = [self.topology.resolve_topic(t, self.app_id) for t in sub.sink_topics]
            chunks = 1
            if splittable(sub, sources, user_topics, resolved_sinks, repartition):
                largest = max(ends[sources[0]][p] - o for p, o in starts[sources[0]].items())
                chunks = split_count(self.splits, parallelism, counts[sources[0]], largest, per_core=1)
                job.state_root = None  # no stores; chunks of one task must not share its directory
            if user_topics and self.reader == "kafka-client":
                ranges = [
                    (p, t, p, lo, hi)
                    for t in user_topics
                    for p in sorted(starts[t])
                    for lo, hi in offset_chunks(starts[t][p], ends[t][p], chunks)
                ]
                parts.append(spark.sparkContext.parallelize(ranges, max(1, len(ranges))))
            elif user_topics:
                offsets_from = {t: {str(p): o for p, o in starts[t].items()} for t in user_topics}
                offsets_to = {t: {str(p): o for p, o in ends[t].items()} for t in user_topics}
                frame = (
                    spark.read.format("kafka")
                    .options(**options)
                    .option("subscribe", ",".join(user_topics))
                    .option("startingOffsets", json.dumps(offsets_from))
                    .option("endingOffsets", json.dumps(offsets_to))
                    .option("includeHeaders", "true")
                    .option("minPartitions", str(chunks * tasks))
                    .load()
                    .selectExpr(
                        "partition",
                        "topic",
                        "partition",
                        "offset",
                        "unix_millis(timestamp)",
                        "key",
                        "value",
                        "headers",
                    )
                )
                parts.append(frame.rdd.map(_to_input_row))
            for topic in sources:
                if topic in shuffled:
                    parts.append(shuffled[topic].map(_shuffled_to_input))
            if sources[0] in direct:
                rows = direct.pop(sources[0])  # already in its slots (direct_shuffle_topic)
            elif len(parts) == 1 and len(user_topics) == 1 and len(sources) == 1:
                # One offset range of one Kafka partition per Spark partition, in offset order: no shuffle.
                # Unsplit, that is the partition's whole range; split, each chunk runs its own task.
                rows = parts[0]
            else:
                union = parts[0] if len(parts) == 1 else spark.sparkContext.union(parts)
                slots = tasks * job.input_key_splits  # a task's key slots, one Spark partition each
                rows = union.map(_task_partition).partitionBy(slots, _identity).map(_second)
            target = direct_shuffle_topic(sub, stages, self.topology, self.app_id, repartition)
            ran.append((index, sub, sources))
            if target is not None:
                # The stage's tasks shuffle what they emit in the same Python pass, and it runs in the
                # reading stage's Spark job, its stats handed on through it (spark/shuffle.py).
                slots = counts[target] * key_splits.get(target, 1)
                direct[target] = (
                    rows.mapPartitions(functools.partial(run_partitions, job))
                    .map(slot_pair)
                    .partitionBy(slots, _identity)
                    .map(_second)
                )
                continue
            out = rows.mapPartitions(functools.partial(run_partitions, job)).persist(
                StorageLevel.MEMORY_AND_DISK
            )
            persisted.append(out)
            first = ran[0][0]
            label = f"stage {index}/{len(stages)} (sub-topology {sub.id})"
            if first != index:
                subs = ", ".join(str(r[1].id) for r in ran)
                label = f"stages {first}-{index}/{len(stages)} (sub-topologies {subs})"
            with StageProgress(spark, label, self.progress, self.progress_interval_s):
                stats = [json.loads(r[2]) for r in out.filter(_is_stats).collect()]
            for topic in sub.sink_topics:
                resolved = self.topology.resolve_topic(topic, self.app_id)
                if resolved in repartition:
                    shuffled[resolved] = out.filter(_is_shuffled).filter(
                        functools.partial(_for_topic, resolved)
                    )
            seconds, job_started = time.monotonic() - job_started, None
            reported = {int(str(s["task"]).split("_")[0]) for s in stats}
            for entry in [e for e in ran if e[1] is sub or e[1].id in reported]:
                self._account(result, stats, entry, len(stages))
                ran.remove(entry)
            self.progress(f"{label} ran in {seconds:.1f}s")
        self.commit_offsets(ends, counts)
        for rdd in persisted:
            rdd.unpersist()
        result.seconds = time.monotonic() - started
        self.progress(result.summary())
        return result


def _check_picklable(topology: Topology) -> None:
    """Executors get the topology pickled; say what to do instead when it cannot be (e.g. weakrefs)."""
    from pyspark import cloudpickle

    try:
        cloudpickle.dumps(topology)  # type: ignore[no-untyped-call]
    except Exception as exc:
        raise StreamsError(
            f"this topology cannot be shipped to Spark executors ({type(exc).__name__}: {exc}); pass a "
            "zero-argument function that builds it (kappaflow reprocess does: module:attr) instead"
        ) from exc


def _for_topic(topic: str, row: OutputRow) -> bool:
    return bool(row[2] == topic)


def reprocess(
    app: Topology | Callable[[], Topology],
    config: StreamsConfig | Mapping[str, Any],
    *,
    spark: Any = None,
    master: str | None = "local[2]",
    **options: Any,
) -> ReprocessResult:
    """Reprocess `app` into `config`'s application.id (see the module docstring); options as Reprocessor."""
    from kappaflow.spark.session import create_session

    reprocessor = Reprocessor(app, config, **options)
    own = spark is None
    session = create_session(master) if own else spark
    try:
        return reprocessor.run(session)
    finally:
        if own:
            session.stop()
