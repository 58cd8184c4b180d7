"""Spark reprocessing's task runner (kappaflow.spark.executor.run_task, what each Spark task calls) with an
asynchronous operation: every record's call made, `max_in_flight` at a time, each key's results in input
order, before the task's shuffle rows are handed back. Run in-process: no Spark session is needed for
what one Spark task does with its rows."""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict

from kappaflow import StreamsBuilder, serdes
from kappaflow.spark.batches import batch_records
from kappaflow.spark.executor import StageJob, run_task

S = serdes.String()


def test_a_spark_task_runs_the_calls_of_its_partition_concurrently_in_key_order(tmp_path):
    running = peak = 0
    rng = random.Random(3)

    async def lookup(value: str) -> str:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(rng.uniform(0.001, 0.01))
        running -= 1
        return f"{value}!"

    builder = StreamsBuilder()
    stream = builder.stream("in", key_serde=S, value_serde=S)
    stream.map_values_async(lookup, max_in_flight=16).repartition(key_serde=S, value_serde=S)
    topology = builder.build()
    app_id = "spark-async"
    (repartition,) = [topology.resolve_topic(t, app_id) for t in topology.internal_topics]
    job = StageJob(
        app=topology,
        config={"application.id": app_id, "bootstrap.servers": "unused:9092"},
        subtopology=0,
        partition_counts={"in": 1, repartition: 2},
        repartition_topics=[repartition],
        changelog_topics=[],
        producer={},
        state_root=None,
    )
    n = 400
    rows = [(0, "in", 0, i, 1000 + i, f"k{i % 40}".encode(), f"{i}".encode(), None) for i in range(n)]
    out = run_task(job, topology, 0, rows)  # type: ignore[arg-type]
    per_key: dict[str, list[int]] = defaultdict(list)
    for row in out[:-1]:
        for _ts, key, value, _headers in batch_records(row[4]):
            assert key is not None and value is not None
            per_key[key.decode()].append(int(value.decode()[:-1]))
    assert sorted(v for values in per_key.values() for v in values) == list(range(n))
    assert all(values == sorted(values) for values in per_key.values())
    assert 1 < peak <= 16  # concurrent, bounded by max_in_flight
