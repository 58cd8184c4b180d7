"""`kappaflow transactions` on a real broker: a transaction left open by a killed producer holds every
read_committed reader of its partition, and `abort --start-offset` (KIP-664's abort, WriteTxnMarkers to
the partition's leader) releases them.

The open transaction is real: a child process begins one, writes three records to partition 1 and one
to partition 0, and is killed with SIGKILL, with a 30 s transaction timeout so that the broker does not
abort it first. A second transactional producer then commits two records behind it, which read_committed
readers cannot see while the first is open. The commands run in this process through `kappaflow.cli.main`.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from kappaflow import cli
from tests.kafka.streams_support import read_topic, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]
TIMEOUT_MS = 30_000  # the abort comes ~3 s after the kill (measured): ten times that is margin
OPENER = """
import sys, time
from confluent_kafka import Producer
bootstrap, topic, txn_id, timeout_ms = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                     "transaction.timeout.ms": timeout_ms})
producer.init_transactions(30)
producer.begin_transaction()
for i in range(3):
    producer.produce(topic, value=b"open-%d" % i, partition=1)
producer.produce(topic, value=b"open-p0", partition=0)
assert producer.flush(30) == 0
print("open", flush=True)
time.sleep(600)
"""


def run_json(capsys, *argv: str) -> object:
    code = cli.main(["transactions", *argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def offsets(bootstrap: str, topic: str, partition: int = 1) -> tuple[int, int]:
    """(last stable offset, high watermark) of `partition`."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition(topic, partition)
    found = []
    for level in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED):
        answer = admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=level, request_timeout=10)
        found.append(answer[tp].result().offset)
    return found[0], found[1]


def test_an_open_transaction_of_a_killed_producer_is_found_and_aborted(kafka_bootstrap, kafka_topics, capsys):
    topic = kafka_topics("txn-cli", partitions=2)
    broker = ("--bootstrap-server", kafka_bootstrap)
    txn_id = f"txn-cli-{uuid.uuid4().hex[:8]}"
    before = Producer({"bootstrap.servers": kafka_bootstrap})
    before.produce(topic, value=b"before", partition=1)
    assert before.flush(10) == 0
    opener = subprocess.Popen([sys.executable, "-c", OPENER, kafka_bootstrap, topic, txn_id, str(TIMEOUT_MS)],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert opener.stdout is not None and opener.stdout.readline().strip() == "open"
        opened_at = time.monotonic()
    finally:
        opener.send_signal(signal.SIGKILL)
        opener.wait(10)
    after = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{txn_id}-after"})
    after.init_transactions(30)
    after.begin_transaction()
    for i in range(2):
        after.produce(topic, value=b"after-%d" % i, partition=1)
    after.commit_transaction(30)

    # the commit's marker is written after commit_transaction() returns
    wait_for(lambda: offsets(kafka_bootstrap, topic)[1] == 7, 10, "3 + 2 records and a commit marker after 1")
    assert offsets(kafka_bootstrap, topic)[0] == 1, "held at the open transaction's first offset"
    assert [m.value() for m in read_topic(kafka_bootstrap, topic, timeout=5, committed_only=True)] == [
        b"before"
    ]

    listed = run_json(capsys, "list", *broker)
    mine = [row for row in listed if row["TransactionalId"] == txn_id]
    assert [(row["TransactionState"]) for row in mine] == ["Ongoing"]
    producers = run_json(capsys, "describe-producers", "--topic", topic, "--partition", "1", *broker)
    holding = [row for row in producers if row["CurrentTransactionStartOffset"] == 1]
    assert [row["ProducerId"] for row in holding] == [mine[0]["ProducerId"]]
    # its coordinator still runs it, within its timeout: open, but not hanging
    assert (
        run_json(capsys, "find-hanging", "--topic", topic, "--max-transaction-timeout-minutes", "0", *broker)
        == []
    )

    code = cli.main(
        ["transactions", "abort", "--topic", topic, "--partition", "1", "--start-offset", "2", *broker]
    )
    assert code == 2 and "--start-offset 2: no producer has a transaction starting at that offset" in (
        capsys.readouterr().err
    )
    aborted = run_json(capsys, "abort", "--topic", topic, "--partition", "1", "--start-offset", "1", *broker)
    assert [(row["ProducerId"], row["Result"]) for row in aborted] == [(mine[0]["ProducerId"], "aborted")]
    assert time.monotonic() - opened_at < TIMEOUT_MS / 1000, (
        "the abort must be ours, not the broker's timeout"
    )

    stable, high = offsets(kafka_bootstrap, topic)
    assert stable == high == 8, "released: the abort marker is the last record"
    committed = [
        m.value() for m in read_topic(kafka_bootstrap, topic, expected=3, timeout=10, committed_only=True)
    ]
    assert committed == [b"before", b"after-0", b"after-1"]
    producers = run_json(capsys, "describe-producers", "--topic", topic, "--partition", "1", *broker)
    assert all(row["CurrentTransactionStartOffset"] is None for row in producers)

    # a marker ends the transaction on its partition only: partition 0 is still held, until aborted
    # with the figures describe-producers gives
    assert offsets(kafka_bootstrap, topic, 0) == (0, 1)
    (held,) = run_json(capsys, "describe-producers", "--topic", topic, "--partition", "0", *broker)
    assert held["CurrentTransactionStartOffset"] == 0
    figures = [str(held[k]) for k in ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch")]
    explicit = [
        "--producer-id",
        figures[0],
        "--producer-epoch",
        figures[1],
        "--coordinator-epoch",
        figures[2],
    ]
    run_json(capsys, "abort", "--topic", topic, "--partition", "0", *explicit, *broker)
    assert offsets(kafka_bootstrap, topic, 0) == (2, 2)

    # The markers ended the transaction on its partitions only: its coordinator still lists it as open
    # until its own timeout (then it writes a second, harmless abort marker; not waited for here).
    rows = run_json(capsys, "list", "--state", "Ongoing", *broker)
    assert txn_id in [row["TransactionalId"] for row in rows]
    committed = [
        m.value() for m in read_topic(kafka_bootstrap, topic, expected=3, timeout=10, committed_only=True)
    ]
    assert committed == [b"before", b"after-0", b"after-1"]
