"""How a reprocessing stage's repartitioned batches reach the stage that reads them (reprocess.py).

A stage's tasks return rows to Spark: one encoded batch per (task, target slot) and one stats row per task
(executor.py). The reading stage needs the batches in its slots; the driver needs the stats only for the
run's totals, not to plan the next stage (the key slots are fixed before the first stage). When one stage
writes a repartition topic that one single-input stage reads, the tasks' rows are keyed by slot and
shuffled in the same Python pass that ran the tasks, their stats rows riding along in slot 0, and the
reading stage's tasks hand those on with their own (`executor.run_partitions`): both stages run as one
Spark job, whose result the driver collects once (`direct_shuffle_topic`).
"""

from __future__ import annotations

from kappaflow.spark.executor import InputRow, OutputRow, StatsRow
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
    stage reads nothing else: the stage's rows are then keyed by their target slot (its stats rows by
    slot 0) and `partitionBy` runs in the same Python pass as the tasks, so the reading stage gets the
    shuffle's slots as its Spark partitions, and no job of its own: a separate job only for the stats,
    one Spark task reading an extra slot, left both cores idle between the stages (bench/reprocess.py
    --timeline: 0.1-0.2 s a run, then the reading stage's extra, empty task). Otherwise the stage's
    output is persisted, its stats collected, and each reading stage filters and shuffles its topic's
    rows in a pass of its own:
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


def slot_pair(row: OutputRow) -> tuple[int, InputRow | StatsRow]:
    """A task's output row keyed by its Spark partition in the shuffle: a batch by its target slot (as
    the reading stage's input row); a stats row by slot 0, whose task hands it on (run_partitions)."""
    if row[0] == "R":
        return (row[1], shuffled_to_input(row))
    return (0, (str(row[0]), int(row[1]), str(row[2])))
