"""When a task's input is paused because its asynchronous nodes are full: a pure decision.

A task whose asynchronous nodes hold `max_in_flight` records accepts no more; what the consumer fetched
meanwhile waits in the task's queue. Pausing the partitions as soon as the nodes are full, and resuming
them as soon as one slot frees, would pause and resume once per record - and librdkafka drops a paused
partition's prefetched records, so every resume waits for a new fetch (measured: a 50 ms call at
max_in_flight 1 fell from 20 to 4 records/s, at 512 it stalled at ~1000/s). So, as Kafka Streams does with
`buffered.records.per.partition`: pause when the nodes are full *and* a batch is queued behind them,
resume when the queue is down to half a batch. Memory stays bounded (max_in_flight records in the nodes,
about a batch and a half in the queue), and the partitions stay fetched while there is room to fill.
"""

from __future__ import annotations


def input_paused(paused: bool, saturated: bool, buffered: int, batch: int) -> bool:
    """Whether a task's input partitions should be paused now (`paused`: whether they are)."""
    if paused:
        return buffered >= batch // 2
    return saturated and buffered >= batch
