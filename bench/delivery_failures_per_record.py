"""Main-thread instructions per record of the at_least_once sink/repartition path through a real broker:
the native send with a delivery state per record (`report`: confluent-kafka's `dr_msg_cb` frees it and
takes the GIL for each delivery report) against no state and the core's failure plugin (`plugin`:
runtime/native/src/delivery_failures.rs, which sees every acknowledgement on librdkafka's threads).

Each run sends `records` word-count-shaped records (short key, 8-byte value, a timestamp, no partition)
through the stream thread's StreamsProducer and collector as assembly.py wires them, then flushes. Run it
under callgrind at two record counts with `--separate-threads=yes` and difference the main thread's
totals (file `<out>-01`), the broker being another process (`--bootstrap`, e.g. one started by
`bench/local_broker.py`'s `bench_broker`):

    valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file=/tmp/cg.%p .venv/bin/python \
        bench/delivery_failures_per_record.py --bootstrap HOST:PORT --path plugin --records 20000
"""

from __future__ import annotations

import argparse
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka.admin import AdminClient, NewTopic

from kappaflow.clients.admin import InternalTopicManager
from kappaflow.clients.kafka import KafkaRecordCollector
from kappaflow.runner.native_produce import failure_plugin, native_send
from kappaflow.runner.producer import StreamsProducer
from kappaflow.tasks.native import installed_core


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--path", choices=["report", "plugin"], required=True)
    parser.add_argument("--records", type=int, default=20000)
    args = parser.parse_args()
    core = installed_core()
    if core is None:
        raise SystemExit("the native core is not installed")
    topic = f"bench-dr-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    admin.create_topics([NewTopic(topic, 4, 1)])[topic].result(30)
    plugin = failure_plugin(core) if args.path == "plugin" else None
    settings = {
        "bootstrap.servers": args.bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 20,
    }  # fmt: skip
    producer = StreamsProducer(settings, False, None, api_timeout_s=30, failure_plugin=plugin)
    assert producer.reports_failures_natively == (plugin is not None)
    collector = KafkaRecordCollector(producer, InternalTopicManager({"bootstrap.servers": args.bootstrap}))
    on_error = None if producer.reports_failures_natively else collector.report_error
    sender = native_send(core, producer, collector.send, on_error)
    assert sender is not None
    collector.use_native(sender)
    producer.flush()  # connections and metadata before the records
    send = collector.send
    value = b"\x00" * 8
    for i in range(args.records):
        send(topic, b"word-%d" % (i % 1000), value, None, 1_000 + i, None)
    producer.flush()
    assert sender.sent == args.records
    producer.close()
    admin.delete_topics([topic])
    print(f"{args.path}: {args.records} records")


if __name__ == "__main__":
    main()
