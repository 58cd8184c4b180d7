"""The stream thread's read of its input per record, on a broker: fetched records into the tasks'
record tuples, through confluent-kafka's `consume()` and the core's `MessageRuns` (the path before) or
through the core's `InputQueues` (librdkafka's partition queues read natively, no `Message` per record).

Both read `records` records of a topic of their own (4 partitions in runs of 500, 10-byte keys, a
50-byte value like a line of the word count) with a subscribed group consumer, as the thread does: the
partitions opened in the assignment callback for `queues`, `consume(1000, 0)` every iteration (it
serves the callbacks), each run's tuples appended to a deque per partition as `add_records` queues them.
Under callgrind, run each mode at two sizes and take the difference per record (the whole process is
counted: interpreter start, imports, librdkafka's threads; the difference leaves the per-record work):

    .venv/bin/python bench/consume_per_record.py 400000 fill localhost:9092
    valgrind --tool=callgrind --callgrind-out-file=/dev/null .venv/bin/python \
        bench/consume_per_record.py 200000 queues localhost:9092   # 400000, and `consume`, at both sizes

(the modes read the first `records` records of the topic filled with the larger size: fill it once).
"""

from __future__ import annotations

import contextlib
import sys
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from kappaflow.runner.native_input import input_queues
from kappaflow.runner.routing import router
from kappaflow.tasks.native import installed_core

TOPIC = "bench-consume-per-record"
PARTITIONS = 4
RUN = 500


def fill(bootstrap: str, records: int) -> None:
    """`records` records into TOPIC, created afresh."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([TOPIC]).values():
        with contextlib.suppress(Exception):  # absent the first time
            future.result(30)
    time.sleep(2)
    # kept: the records' old timestamps would otherwise have them deleted by time retention at once
    topic = NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1, config={"retention.ms": "-1"})
    for future in admin.create_topics([topic]).values():
        future.result(30)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 1_000_000}
    )
    value = b"the quick brown fox jumps over the lazy dog again."
    for i in range(records):
        producer.produce(TOPIC, key=b"k%09d" % i, value=value, partition=(i // RUN) % PARTITIONS,
                         timestamp=1_700_000_000_000 + i)  # fmt: skip
        if i % 10000 == 0:
            producer.flush(60)
    producer.flush(60)


def read(bootstrap: str, records: int, mode: str) -> None:
    """The first `records` records of TOPIC (split evenly over its partitions) into per-partition deques."""
    core = installed_core()
    if core is None:
        sys.exit("the native core is not installed")
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
    })  # fmt: skip
    queues = input_queues(core, consumer) if mode == "queues" else None
    if mode == "queues" and queues is None:
        sys.exit("the core's InputQueues cannot be used here")
    route = router(core)
    per_partition = records // PARTITIONS
    queued: dict[tuple[str, int], deque[Any]] = {(TOPIC, p): deque() for p in range(PARTITIONS)}
    done: set[tuple[str, int]] = set()

    def on_assign(c: Consumer, partitions: list[TopicPartition]) -> None:
        if queues is not None:
            for tp in partitions:
                queues.open(tp.topic, tp.partition)
        c.assign(partitions)

    def add(tp: tuple[str, int], batch: list[Any]) -> None:
        if tp in done:
            return
        queue = queued[tp]
        queue.extend(batch)
        if len(queue) >= per_partition:
            done.add(tp)
            consumer.pause([TopicPartition(*tp)])

    consumer.subscribe([TOPIC], on_assign=on_assign)
    try:
        while len(done) < PARTITIONS:
            messages = consumer.consume(1000, 0.0 if queues is not None else 0.1)
            for tp, batch in route(messages):
                add(tp, batch)
            if queues is not None:
                runs, _errors = queues.consume(1000 - len(messages), 0.1)
                for tp, batch in runs:
                    add(tp, batch)
    finally:
        if queues is not None:
            queues.close()
        consumer.close()


def main() -> None:
    records = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    mode = sys.argv[2] if len(sys.argv) > 2 else "queues"
    bootstrap = sys.argv[3] if len(sys.argv) > 3 else "localhost:9092"
    if mode == "fill":
        fill(bootstrap, records)
        return
    began = time.perf_counter()
    read(bootstrap, records, mode)
    seconds = time.perf_counter() - began
    print(f"{mode}: {records} records, {seconds * 1e6 / records:.3f} µs per record (fetch waits included)")


if __name__ == "__main__":
    main()
