"""How a reprocessing stage's repartitioned batches reach the stage that reads them (reprocess.py).

A stage's tasks return rows to Spark: one encoded batch per (task, target slot) and one stats row per task
(executor.py). The driver needs the stats before the next stage starts; the reading stage needs the
batches in its slots. When one stage writes a repartition topic that one single-input stage reads, both
happen in one Spark job: the tasks' rows are keyed by slot and shuffled in the same Python pass that ran
the tasks, and the driver reads only the extra slot that holds the stats (`direct_shuffle_topic`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from kappaflow.spark.executor import InputRow, OutputRow
from kappaflow.topology.nodes import SubTopology
from kappaflow.topology.topology import Topology


def shuffled_to_input(row: OutputRow) -> InputRow:
    """A task's batch row ("R", target, topic, source partition, batch) as the reading stage's input row."""
    return (row[1], row[2], row[3], row[4])


def direct_shuffle_topic(
    sub: SubTopology, stages: list[SubTopology], topology: Topology, app_id: str, repartition: list[str]
) -> str | None:
    """The repartition topic `sub`'s tasks may shuffle themselves, or None.

    That is when `sub` writes one repartition topic, which no other stage writes and whose one reading
    stage reads nothing else: the stage's rows are then keyed by their target slot (and its stats rows
    by one extra slot) and `partitionBy` runs in the same Python pass as the tasks, so the reading stage
    gets the shuffle's slots as its Spark partitions. Otherwise the stage's output is persisted, its
    stats collected, and each reading stage filters and shuffles its topic's rows in a pass of its own:
    reading every batch back from the JVM into Python and out again, about 8% of a word count's time at
    1M lines (bench/reprocess.py --timeline: the 1-task stage between the two sub-topologies' stages).
    """
    sinks = [topology.resolve_topic(t, app_id) for t in sub.sink_topics]
    targets = [t for t in sinks if t in repartition]
    if len(targets) != 1:
        return None
    target = targets[0]
    writers = [s for s in stages if target in {topology.resolve_topic(t, app_id) for t in s.sink_topics}]
    readers = [s for s in stages if target in {topology.resolve_topic(t, app_id) for t in s.source_topics}]
    if len(writers) != 1 or len(readers) != 1:
        return None
    only = [topology.resolve_topic(t, app_id) for t in readers[0].source_topics] == [target]
    return target if only else None


def slot_pair(stats_slot: int, row: OutputRow) -> tuple[int, Any]:
    """A task's output row keyed by its Spark partition in the shuffle: a batch by its target slot (as
    the reading stage's input row), a stats row by the extra slot past them."""
    if row[0] == "R":
        return (row[1], shuffled_to_input(row))
    return (stats_slot, row)


def stats_of_pairs(pairs: Iterable[tuple[int, OutputRow]]) -> list[OutputRow]:
    """The stats slot's rows, for the driver (`SparkContext.runJob` over that slot only)."""
    return [row for _slot, row in pairs]


def batch_rows(stats_slot: int, index: int, pairs: Iterable[tuple[int, Any]]) -> Iterator[Any]:
    """The reading stage's rows of one slot (the stats slot holds none for it)."""
    for _slot, row in pairs:
        if index != stats_slot:
            yield row
