"""The restore path's work per record, without a broker: consumed changelog batches split by partition
and written into a timestamped RocksDB store, through the Python loops or the native core.

bench/restore.py measures restoring end to end, on a broker and a loaded machine; this isolates what
kappaflow does per record once a batch is consumed (`ChangelogReader._by_partition` or the core's split,
then the store's `restore_messages` with or without the core's writer, RocksDB's write included), on
confluent-kafka `Message`s built in-process (4 partitions in runs, distinct keys, 100-byte values, in
10k-record batches like the restore consumer's). Prints µs per record. Under callgrind, run each mode at
two sizes and take the difference per record (instruction counts are deterministic; `build` is the cost
of making the messages, to subtract):

    valgrind --tool=callgrind --callgrind-out-file=/dev/null .venv/bin/python bench/restore_per_record.py \
        200000 native     # then 400000, and `python` / `build` at both sizes

Run: `.venv/bin/python bench/restore_per_record.py [records] [native|python|build]`.

With a broker, the client's own work per record counts too: `fill` writes `records` such records once
into a topic of their own, then `consume` restores them as kappaflow did before native fetches
(confluent-kafka's `consume()` building a `Message` per record, the core splitting and writing them) and
`queues` as it does now (the core's `RestoreQueues`: librdkafka's partition queues read natively, no
Python object per record but the key and value handed to the write batch), both with the restore
consumer's fetch settings, from the first record to every partition's end:

    .venv/bin/python bench/restore_per_record.py 400000 fill localhost:9092
    valgrind --tool=callgrind --callgrind-out-file=/dev/null .venv/bin/python \
        bench/restore_per_record.py 200000 queues localhost:9092   # 400000, and `consume`, at both sizes

(the modes read the first `records` records of the topic filled with the larger size: fill it once).
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import rocksdict
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message
from tests.runtime.test_stores import FakeStoreContext

from kappaflow.clients.kafka import RESTORE_FETCH_TUNING
from kappaflow.runner.changelog_reader import RESTORE_BATCH, ChangelogReader
from kappaflow.runner.native_restore import restore_queues
from kappaflow.runner.routing import changelog_messages
from kappaflow.state.kv_bytes import RocksDBKeyValueBytesStore
from kappaflow.tasks.native import installed_core

PARTITIONS = 4
RUN = 500  # records of one partition in a row, as librdkafka hands a fetch over


def batches(records: int) -> list[list[Any]]:
    """The consumed batches: `records` messages in RESTORE_BATCH-sized lists."""
    value = b"v" * 100
    made: list[Any] = []
    for i in range(records):
        partition = (i // RUN) % PARTITIONS
        made.append(
            Message(
                topic="app-store-changelog",
                partition=partition,
                offset=i,
                key=b"key-%09d" % i,
                value=value,
                timestamp=(TIMESTAMP_CREATE_TIME, 1_700_000_000_000 + i),
            )
        )
    return [made[i : i + RESTORE_BATCH] for i in range(0, records, RESTORE_BATCH)]


TOPIC = "restore-per-record"


def fill(bootstrap: str, records: int) -> None:
    """`records` changelog records (as `batches` makes them) into TOPIC, created afresh."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([TOPIC]).values():
        with contextlib.suppress(Exception):  # absent the first time
            future.result(30)
    time.sleep(2)
    for future in admin.create_topics(
        [NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)]
    ).values():
        future.result(30)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 1_000_000}
    )
    value = b"v" * 100
    for i in range(records):
        producer.produce(TOPIC, key=b"key-%09d" % i, value=value, partition=(i // RUN) % PARTITIONS,
                         timestamp=1_700_000_000_000 + i)  # fmt: skip
        if i % 10000 == 0:
            producer.flush(60)
    producer.flush(60)


def restore_fetched(bootstrap: str, records: int, mode: str, store: RocksDBKeyValueBytesStore) -> None:
    """The first `records` records of TOPIC (split evenly over its partitions) into `store`: through
    `consume()` and the core's split and writer, or through the core's `RestoreQueues`."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "restore-per-record", "enable.auto.commit": False,
        "enable.partition.eof": True, **RESTORE_FETCH_TUNING,
    })  # fmt: skip
    core = installed_core()
    native = changelog_messages(core)
    queues = restore_queues(core, consumer) if mode == "queues" else None
    if native is None or (mode == "queues" and queues is None):
        sys.exit("the native core is not installed, or does not know this confluent-kafka")
    consumer.list_topics(TOPIC, timeout=10)
    per_partition = records // PARTITIONS
    ends = {p: per_partition for p in range(PARTITIONS)}
    if queues is not None:
        for p in range(PARTITIONS):
            queues.open(TOPIC, p)
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    done: dict[int, int] = dict.fromkeys(range(PARTITIONS), 0)
    try:
        while any(done[p] < ends[p] for p in ends):
            if queues is not None:
                consumer.consume(RESTORE_BATCH, 0.0)
                runs, _ends, _errors = queues.consume(RESTORE_BATCH, 0.1)
                for (_topic, p), run in runs:
                    if done[p] < ends[p]:
                        store.restore_messages(run, queues)
                        done[p] = run.next_offset or done[p]
                continue
            batch = consumer.consume(RESTORE_BATCH, 0.1)
            by_partition, _found = ChangelogReader._split_natively(native, batch)
            for (_topic, p), messages in by_partition.items():
                if done[p] < ends[p]:
                    store.restore_messages(messages, native)
                    done[p] = messages[-1].offset() + 1
    finally:
        if queues is not None:
            queues.close()
        consumer.close()


def main() -> None:
    records = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    mode = sys.argv[2] if len(sys.argv) > 2 else "native"
    if mode == "fill":
        fill(sys.argv[3], records)
        return
    if mode in ("consume", "queues"):
        with tempfile.TemporaryDirectory() as directory:
            store = RocksDBKeyValueBytesStore("store", timestamped=True)
            store.init(FakeStoreContext(Path(directory)), store)  # type: ignore[arg-type]
            try:
                began = time.perf_counter()
                restore_fetched(sys.argv[3], records, mode, store)
                seconds = time.perf_counter() - began
            finally:
                store.close()
        print(
            f"{mode}: {records} records, {seconds * 1e6 / records:.3f} µs per record (fetch waits included)"
        )
        return
    consumed = batches(records)
    if mode == "build":
        return
    native = changelog_messages(installed_core()) if mode == "native" else None
    if mode == "native" and native is None:
        sys.exit("the native core is not installed, or does not know this confluent-kafka")
    with tempfile.TemporaryDirectory() as directory:
        store = RocksDBKeyValueBytesStore("store", timestamped=True)
        store.init(FakeStoreContext(Path(directory)), store)  # type: ignore[arg-type]
        try:
            began = time.perf_counter()
            for messages in consumed:
                if native is None:
                    by_partition, _ends = ChangelogReader._by_partition(messages)
                else:
                    by_partition, _ends = ChangelogReader._split_natively(native, messages)
                for run in by_partition.values():
                    store.restore_messages(run, native)
            seconds = time.perf_counter() - began
        finally:
            store.close()
    print(f"{mode}: {records} records, {seconds * 1e6 / records:.3f} µs per record")


def snappy(_store_name: str, options: rocksdict.Options, _config: Any) -> None:
    """A `rocksdb.config.setter` compressing with Snappy, RocksDB's default and kappaflow's until its
    stores went uncompressed: `bench/restore.py --before
    rocksdb.config.setter=bench.restore_per_record:snappy` compares the two."""
    options.set_compression_type(rocksdict.DBCompressionType.snappy())


if __name__ == "__main__":
    main()
