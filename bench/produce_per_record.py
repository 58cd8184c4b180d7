"""Instructions per produced record, without a broker: the collector's Python send (confluent-kafka's
`Producer.produce`) against the native core's (`ProduceSend`, rd_kafka_producev).

Each pass sends `records` word-count-shaped records (a short key, an 8-byte value, a timestamp, no
partition: the repartition sink's record) through a KafkaRecordCollector over a producer whose broker
does not exist, so they stay queued in librdkafka, then purges them. Run it under callgrind at two
record counts and difference the totals (start-up cancels out):

    valgrind --tool=callgrind --callgrind-out-file=/dev/null .venv/bin/python bench/produce_per_record.py \
        --path native --records 20000

`--changelog` sends changelog records instead (`send_changelog`, each with the offset report as its
delivery callback). `make`-free on purpose: it measures one call, the README's table says what the
figures were.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Producer

from kappaflow.clients.kafka import DeliveryReports, KafkaRecordCollector
from kappaflow.runner.native_produce import native_send
from kappaflow.tasks.native import installed_core


class Clients:
    """One producer with no broker, as the stream thread's producer clients."""

    def __init__(self, exactly_once: bool) -> None:
        self.producer = Producer(
            {
                "bootstrap.servers": "127.0.0.1:1",
                "log_level": 0,
                "queue.buffering.max.messages": 2_000_000,
                "delivery.report.only.error": not exactly_once,
            }
        )
        self.changelog_producer = self.producer
        self.deliveries = DeliveryReports(None, transactional=exactly_once)

    def serve_reports(self) -> None:
        self.producer.poll(0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--path", choices=["python", "native"], default="native")
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--exactly-once", action="store_true", help="no delivery callback (EOS's sinks)")
    parser.add_argument(
        "--changelog", action="store_true", help="changelog records (send_changelog, the offset report)"
    )
    args = parser.parse_args()
    clients = Clients(args.exactly_once)
    collector = KafkaRecordCollector(clients, None)
    if args.path == "native":
        core = installed_core()
        if args.changelog:
            fallback, callback, attribute = (
                collector.send_changelog,
                collector.report_offset,
                "changelog_producer",
            )
        else:
            fallback, callback, attribute = collector.send, collector.report_error, "producer"
        sender = None if core is None else native_send(core, clients, fallback, callback, attribute)
        if sender is None:
            raise SystemExit("the native produce path is not available")
        if args.changelog:
            collector.use_native_changelog(sender)
        else:
            collector.use_native(sender)
    keys = [b"word%d" % (i % 1000) for i in range(1000)]
    value = b"\x00" * 8
    if args.changelog:
        log: Any = collector.send_changelog
        for i in range(args.records):
            log("bench-counts-changelog", keys[i % 1000], value, 1_000 + i, 0)
    else:
        send: Any = collector.send
        for i in range(args.records):
            send("bench-counts-repartition", keys[i % 1000], value, None, 1_000 + i, None)
    assert collector.sent == args.records
    clients.producer.purge()
    print(f"{args.path}: {args.records} records sent")


if __name__ == "__main__":
    main()
