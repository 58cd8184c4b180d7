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
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import rocksdict
from confluent_kafka import TIMESTAMP_CREATE_TIME, Message
from tests.runtime.test_stores import FakeStoreContext

from kappaflow.runner.changelog_reader import RESTORE_BATCH, ChangelogReader
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


def main() -> None:
    records = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    mode = sys.argv[2] if len(sys.argv) > 2 else "native"
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
