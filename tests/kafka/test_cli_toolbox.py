"""The CLI as a Kafka Streams user's toolbox, on a real broker: `kappaflow topics | produce | consume`, the
start-up banner and the periodic summary line of `kappaflow run`."""

from __future__ import annotations

import signal
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kappaflow import cli
from kappaflow.clients.murmur2 import partition_for_key
from kappaflow.tasks.native import installed_core  # noqa: F401 - the CLI runs the same runtime
from tests.harness.kafka_fixtures import free_port
from tests.kafka.streams_support import (
    fast_config,
    kill_if_running,
    produce_lines,
    start_cli_app,
    wait_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_topics_create_list_describe_delete(kafka_bootstrap, capsys):
    name = f"toolbox-{uuid.uuid4().hex[:8]}"
    broker = ("--bootstrap-server", kafka_bootstrap)
    code, out, _ = run(capsys, "topics", "create", name, "--partitions", "3",
                       "--topic-config", "cleanup.policy=compact", *broker)  # fmt: skip
    assert code == 0 and f"created topic '{name}' (3 partitions)" in out
    code, _, err = run(capsys, "topics", "create", name, *broker)
    assert code != 0 and f"'{name}'" in err and "already exists" in err
    assert run(capsys, "topics", "create", name, "--if-not-exists", *broker)[0] == 0
    code, out, _ = run(capsys, "topics", "list", *broker)
    assert f"{name}\t3 partitions" in out.splitlines()
    assert "__consumer_offsets" not in out
    code, out, _ = run(capsys, "topics", "describe", name, *broker)
    lines = out.splitlines()
    assert lines[0].startswith(f"Topic: {name}\tPartitionCount: 3") and "cleanup.policy=compact" in lines[0]
    assert [line.split("\t")[1] for line in lines[1:]] == ["Partition: 0", "Partition: 1", "Partition: 2"]
    assert run(capsys, "topics", "delete", name, *broker)[0] == 0
    code, _, err = run(capsys, "topics", "describe", name, *broker)
    assert code != 0 and f"topic '{name}' does not exist on bootstrap.servers={kafka_bootstrap}" in err


def test_produce_keyed_lines_and_consume_them_back(kafka_bootstrap, kafka_topics, capsys, monkeypatch):
    import io

    topic = kafka_topics("toolbox-kv", partitions=4)
    broker = ("--bootstrap-server", kafka_bootstrap)
    monkeypatch.setattr("sys.stdin", io.StringIO("alice|1\nbob|2\nalice|3\n"))
    code, _, err = run(capsys, "produce", topic, "--parse-key", "--key-separator", "|",
                       "--value-format", "long", *broker)  # fmt: skip
    assert code == 0 and f"produced 3 record(s) to '{topic}'" in err
    code, out, _ = run(capsys, "consume", topic, "--from-beginning", "--print-key", "--max-records", "3",
                       "--value-format", "long", *broker)  # fmt: skip
    assert code == 0
    assert sorted(out.splitlines()) == ["alice:1", "alice:3", "bob:2"]
    # the Java-compatible partitioner: each key is where Kafka Streams would look for it
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "toolbox-check"})
    try:
        for key in (b"alice", b"bob"):
            partition = partition_for_key(key, 4)
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            assert high == (2 if key == b"alice" else 1)
    finally:
        consumer.close()
    code, _, err = run(capsys, "produce", topic, "--parse-key", "no-separator", *broker)
    assert code != 0 and "line 1: no key separator ':'" in err


def test_consume_reads_committed_records_only_by_default(kafka_bootstrap, kafka_topics, capsys):
    topic = kafka_topics("toolbox-txn")
    broker = ("--bootstrap-server", kafka_bootstrap)
    produce_lines(kafka_bootstrap, topic, ["committed"])
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"t-{uuid.uuid4().hex}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"open")
    producer.flush(10)
    try:
        code, out, _ = run(capsys, "consume", topic, "--from-beginning", "--idle-timeout", "2", *broker)
        assert code == 0 and out.splitlines() == ["committed"]
        code, out, _ = run(capsys, "consume", topic, "--from-beginning", "--idle-timeout", "2",
                           "--isolation-level", "read_uncommitted", *broker)  # fmt: skip
        assert out.splitlines() == ["committed", "open"]
    finally:
        producer.abort_transaction(30)


def test_an_unreachable_broker_is_one_line_naming_its_address(capsys):
    address = f"127.0.0.1:{free_port()}"
    for argv in (["topics", "list"], ["produce", "t", "x"], ["consume", "t"]):
        started = time.monotonic()
        code, out, err = run(capsys, *argv, "--bootstrap-server", address, "--timeout", "2")
        assert code != 0 and out == ""
        errors = [line for line in err.splitlines() if line.startswith("kappaflow: error:")]
        assert len(errors) == 1 and f"bootstrap.servers={address}" in errors[0], err
        assert time.monotonic() - started < 10


def test_run_prints_a_banner_and_a_summary_line(kafka_bootstrap, kafka_topics, tmp_path):
    source, sink = kafka_topics("banner-in"), kafka_topics("banner-out")
    app_id = f"banner-{uuid.uuid4().hex[:8]}"
    port = free_port()
    props = fast_config(kafka_bootstrap, app_id, str(tmp_path / "state"), **{"metrics.port": port,
                        "sasl.password": "s3cret"})  # fmt: skip
    props.pop("sasl.password")  # a PLAINTEXT broker refuses SASL settings: the masking is a unit test
    process = start_cli_app("tests.kafka.apps:wordcount", props, tmp_path, {
        "WC_INPUT": source, "WC_OUTPUT": sink, "KAPPAFLOW_SUMMARY_INTERVAL": "1"})  # fmt: skip
    log = tmp_path / "app.log"

    def summaries() -> list[str]:
        return [line for line in log.read_text().splitlines() if '"summary: ' in line]

    try:
        wait_for(lambda: any("summary: RUNNING" in s for s in summaries()), 60, "a RUNNING summary")
        produce_lines(kafka_bootstrap, source, ["a b", "b c"])
        # 2 lines, then their 4 words back from the repartition topic
        wait_for(lambda: any("; in 6 (" in s for s in summaries()), 30, "6 records in, in the summary")
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    finally:
        kill_if_running(process)
    text = log.read_text()
    assert f"kappaflow {cli.version()}: application.id={app_id} bootstrap.servers={kafka_bootstrap}" in text
    assert "config (not default): " in text and "commit.interval.ms=200" in text
    assert f"metrics http://127.0.0.1:{port}/metrics, health http://127.0.0.1:{port}/health/ready" in text
    last = summaries()[-1]
    assert "; in 6 (" in last and ", out 0 " not in last and "; lag " in last, last
