"""Where reprocessing may run more Spark tasks than a stage has Kafka partitions, and how many.

Kafka Streams runs one task per (sub-topology, partition), so a replay never uses more cores than the
input has partitions. Reprocessing is not bound by that where the semantics allow it; there are two ways:

* **Offset ranges** (`splittable`): a stage without state that reads one user topic and writes only
  repartition topics (the stateless work before the first shuffle) cuts each partition's range into
  contiguous chunks, each run by its own Spark task. Each chunk emits exactly what the unsplit task would
  for those offsets, and numbers what it emits from its first offset up, so the next stage restores the
  offset order (executor.SEQUENCE_SHIFT).
* **Key ranges** (`key_splittable`): a stage that reads one repartition topic and keeps only plain
  key-value state (count / reduce / aggregate, without TTL or windows) is cut by key: the upstream stage
  sends each repartitioned record to slot `partition * splits + sub` (`key_slot`), and each slot runs
  its own copy of the partition's task over its keys. A key's records all reach one slot, in the order
  the unsplit task would see them, and nothing in such a stage relates two keys: state is per key, and
  only key-preserving DSL processors follow it, so outputs keep each key's order and the changelogs hold
  the same final state.

What cannot split, and why:

* a stateful operation directly on a user topic (`builder.table()`, an aggregation with no repartition
  in front): its task needs the partition's records in offset order, in one task;
* stream time: windowed and session aggregations, suppression, stream-stream joins, TTL stores and
  user processors (which may punctuate) see the time of the records of *every* key of their partition,
  which a slice of the keys would not;
* several inputs (joins, merges): the task interleaves them by timestamp across all keys;
* a key-changing processor after the state (`to_stream(mapper)`, `map`, ...), a repartition sink or a
  custom partitioner: records of different slots could then meet under one key.

Those stages run one task per partition, as before.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from kappaflow.dsl.stream_processors import (
    BranchProcessor,
    CallableProcessorAdapter,
    FilterProcessor,
    FixedKeyProcessorAdapter,
    FlatMapValuesProcessor,
    MapValuesProcessor,
    NullKeyFilter,
    PassThroughProcessor,
    PeekProcessor,
)
from kappaflow.dsl.table_processors import (
    KStreamAggregateProcessor,
    KTableAggregateProcessor,
    KTableFilterProcessor,
    KTableMapValuesProcessor,
    KTableToStreamProcessor,
)
from kappaflow.state.builders import KeyValueStoreBuilder, StoreBuilder
from kappaflow.topology.nodes import ProcessorSpec, SinkSpec, SubTopology

# Below this many records per chunk, a task's fixed cost (producer, StreamTask, reader) outweighs the split.
MIN_CHUNK_RECORDS = 20_000

# The DSL processors a key-split stage may hold: per-key state, or key-preserving and stateless.
_KEYED_PROCESSORS = (
    FilterProcessor,
    MapValuesProcessor,
    FlatMapValuesProcessor,
    PeekProcessor,
    PassThroughProcessor,
    NullKeyFilter,
    BranchProcessor,
    KStreamAggregateProcessor,
    KTableAggregateProcessor,
    KTableFilterProcessor,
    KTableMapValuesProcessor,
    KTableToStreamProcessor,
)


def splittable(
    sub: SubTopology, sources: list[str], user_topics: list[str], sinks: list[str], repartition: list[str]
) -> bool:
    """Whether a stage's partitions may be cut into offset ranges run by separate tasks.

    Only a stage with no state reading one user topic and writing only repartition topics: each chunk then
    emits exactly what the unsplit task would for those offsets, and the next stage restores their order
    (executor.SEQUENCE_SHIFT). Stores would need the whole history; output topics would interleave chunks
    within a partition; several inputs are interleaved by timestamp across the whole range.
    """
    return (
        not sub.stores
        and all(_is_builtin_stateless(spec) for spec in sub.nodes)
        and len(sources) == 1
        and sources == user_topics
        and bool(sinks)
        and all(t in repartition for t in sinks)
    )


def _is_builtin_stateless(spec: object) -> bool:
    """A node whose processor is one of the DSL's own: user processors (process(), process_values())
    may keep state in memory or punctuate on stream time, which each chunk would start afresh."""
    if not isinstance(spec, ProcessorSpec):
        return True  # sources and sinks
    processor = spec.supplier()
    return type(processor).__module__.startswith("kappaflow.dsl.") and not isinstance(
        processor, FixedKeyProcessorAdapter | CallableProcessorAdapter
    )


def key_splittable(
    sub: SubTopology,
    sources: list[str],
    sinks: list[str],
    repartition: list[str],
    stores: Mapping[str, StoreBuilder],
) -> bool:
    """Whether a stage's partitions may be cut by key into slots run by separate tasks (module docstring).

    `sources` and `sinks` are resolved topic names; `stores` the topology's store builders by name.
    """
    if len(sources) != 1 or sources[0] not in repartition or any(t in repartition for t in sinks):
        return False
    for name in sub.stores:
        builder = stores.get(name)
        if not isinstance(builder, KeyValueStoreBuilder) or builder.store_kind != "key_value":
            return False
        if builder.ttl is not None:
            return False
    return all(_is_keyed(spec) for spec in sub.nodes)


def _is_keyed(spec: object) -> bool:
    if isinstance(spec, SinkSpec):
        return isinstance(spec.topic, str) and spec.partitioner is None
    if not isinstance(spec, ProcessorSpec):
        return True  # the source
    processor = spec.supplier()
    if type(processor) not in _KEYED_PROCESSORS:  # exact types: a subclass may do more
        return False
    return not (isinstance(processor, KTableToStreamProcessor) and processor.mapper is not None)


def key_slot(key_hash: int, partition: int, partitions: int, splits: int) -> int:
    """The slot of a record for `partition` whose key's murmur2 (31 bits) is `key_hash`.

    The partition is `key_hash % partitions`; the sub-slot takes the hash's next digits, so keys spread
    over a partition's slots as evenly as over the partitions.
    """
    return partition * splits + (key_hash // partitions) % splits


def task_slots(master: str, default: int) -> int:
    """How many Spark tasks run at once: N of local[N] (cores for local[*]), else the default parallelism.

    The session pins spark.default.parallelism for its own shuffles, so in local mode the master says more.
    """
    match = re.fullmatch(r"local\[(\d+|\*)(?:,\s*\d+)?\]", master.strip())
    if match:
        return (os.cpu_count() or 1) if match.group(1) == "*" else int(match.group(1))
    return 1 if master.strip() == "local" else max(1, default)


def split_count(
    splits: int | None, parallelism: int, partitions: int, largest: int, per_core: int = 2
) -> int:
    """Chunks (or key slots) per partition: the explicit `splits`, or enough for `per_core` tasks per core.

    Offset chunks are of equal size, so one per core keeps the cores even (reprocess.py passes 1); key
    slots hold uneven shares of the keys (a word count's four slots: 690k-813k words), so two per core let
    a core that drew small ones take another. Every task more costs Spark's ~0.05-0.1 s around it
    (bench/reprocess.py, 1M lines: one chunk per core instead of two took local[2] 3.3-3.5 -> 3.1-3.2 s).
    Automatic splits keep chunks of at least MIN_CHUNK_RECORDS of the `largest` partition's range.
    """
    if splits is not None:
        return splits
    wanted = -(-per_core * parallelism // max(1, partitions))
    return max(1, min(wanted, largest // MIN_CHUNK_RECORDS))


def offset_chunks(start: int, end: int, chunks: int) -> list[tuple[int, int]]:
    """[start, end) cut into up to `chunks` contiguous, non-empty ranges of near-equal size, in offset order.

    An empty range stays one (empty) range so that its task still runs and reports.
    """
    size = end - start
    chunks = max(1, min(chunks, size))
    bounds = [start + size * i // chunks for i in range(chunks + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(chunks)]
