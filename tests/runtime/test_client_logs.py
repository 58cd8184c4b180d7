"""Every Kafka client kappaflow makes routes librdkafka's lines through Python logging: reprocessing's
(the executors' producer and range reader, the driver's watermark consumer) and the stream thread's
producers, which were made with confluent-kafka's bare Producer. With the broker down they used to
print raw `%3|...|FAIL|` lines to stderr, one per reconnect attempt."""

from __future__ import annotations

import gc
import logging

from kappaflow.spark.executor import SparkCollector, StageJob
from kappaflow.spark.reprocess import Reprocessor, watermarks
from kappaflow.topology.topology import Topology
from tests.harness.kafka_fixtures import free_port


def test_reprocess_clients_log_through_python_logging_not_raw_lines(capfd, caplog, tmp_path):
    bootstrap = f"127.0.0.1:{free_port()}"  # nothing listens there
    caplog.set_level(logging.INFO, logger="kappaflow.clients")
    producer = {"bootstrap.servers": bootstrap, "message.timeout.ms": 2000}
    job = StageJob(Topology(), {}, 0, {"out": 1}, [], [], producer, None)
    collector = SparkCollector(job, 0)
    collector.send("out", b"k", b"v", None, 0, 0)
    collector.producer.flush(4)
    assert collector.error is not None  # undelivered: the broker is down

    from kappaflow import StreamsBuilder

    builder = StreamsBuilder()
    builder.stream("in").to("out")
    config = {"application.id": "quiet-reprocess", "bootstrap.servers": bootstrap, "state.dir": str(tmp_path)}
    reprocessor = Reprocessor(builder.build(), config)
    consumer = reprocessor._check_consumer()
    try:
        watermarks(consumer, "in", 0, timeout=1)
    except Exception:  # the broker is down: only how it was said matters here
        pass
    finally:
        consumer.close()
        # its admin client (the internal-topic manager) is destroyed with it, now: left to the garbage
        # collector, it went on reconnecting and logging into later tests' captured logs
        del reprocessor
        gc.collect()

    stderr = capfd.readouterr().err
    assert "|FAIL|" not in stderr and "%3|" not in stderr, stderr[:500]
    warnings = [r for r in caplog.records if r.name == "kappaflow.clients" and bootstrap in r.getMessage()]
    assert warnings, [r.getMessage() for r in caplog.records]


def test_the_stream_threads_producers_log_through_python_logging(capfd, caplog):
    from kappaflow.runner.producer import StreamsProducer

    bootstrap = f"127.0.0.1:{free_port()}"  # nothing listens there
    caplog.set_level(logging.INFO, logger="kappaflow.clients")
    settings = {"bootstrap.servers": bootstrap, "client.id": "quiet-producer", "message.timeout.ms": 2000}
    producer = StreamsProducer(settings, False, None, 5.0)
    for client in producer.producers():  # the sink producer and the changelog producer
        client.produce("out", b"v")
        client.flush(3)
    stderr = capfd.readouterr().err
    assert "|FAIL|" not in stderr and "%3|" not in stderr, stderr[:500]
    routed = {
        r.getMessage().split(":")[0] for r in caplog.records if r.name == "kappaflow.clients.librdkafka"
    }
    assert any(name.startswith("quiet-producer") for name in routed), routed  # repeats are aggregated
