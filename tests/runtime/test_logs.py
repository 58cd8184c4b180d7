"""Logging setup: text or JSON one switch away, full log to a file while the console stays quiet."""

from __future__ import annotations

import json
import logging

import pytest

from kappaflow.runner.logs import configure_logging, resolve_format


@pytest.fixture
def restore_root_logger():
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for handler in root.handlers:
        if handler not in handlers:
            handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)


def test_env_switches_to_json_and_file_keeps_what_the_console_drops(
    restore_root_logger, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("KAPPAFLOW_LOG_FORMAT", "json")
    log_file = tmp_path / "logs" / "app.log"
    configure_logging(level="INFO", file=log_file, console_level="WARNING")
    log = logging.getLogger("kappaflow.tasks.task")
    log.info("task %s: restored", "0_1")
    log.warning("slow commit")
    console = capsys.readouterr().err.splitlines()
    assert [json.loads(line)["msg"] for line in console] == ["slow commit"]
    entries = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert [(e["level"], e["logger"], e["msg"]) for e in entries] == [
        ("INFO", "kappaflow.tasks.task", "task 0_1: restored"),
        ("WARNING", "kappaflow.tasks.task", "slow commit"),
    ]


def test_text_is_the_default_and_a_bad_format_names_the_variable(monkeypatch):
    monkeypatch.delenv("KAPPAFLOW_LOG_FORMAT", raising=False)
    assert resolve_format() == "text"
    monkeypatch.setenv("KAPPAFLOW_LOG_FORMAT", "xml")
    with pytest.raises(ValueError, match="KAPPAFLOW_LOG_FORMAT.*'xml'"):
        resolve_format()


def test_runtime_loggers_are_named_by_module():
    import kappaflow.state.window_store as window_store
    import kappaflow.tasks.task as task

    assert task.log.name == "kappaflow.tasks.task"
    assert window_store.log.name == "kappaflow.state.window_store"


def test_librdkafka_lines_are_aggregated_and_a_connect_failure_names_the_address(monkeypatch, caplog):
    from kappaflow.clients import rdkafka_log

    now = [0.0]
    monkeypatch.setattr(rdkafka_log, "_repeats", rdkafka_log._Repeats(lambda: now[0]))
    logger = rdkafka_log.LibrdkafkaLog("broker-0:9092")
    fail = (
        "broker-0:9092/bootstrap: Connect to ipv4#10.0.0.1:9092 failed: Connection refused"
        " (after {}ms in state CONNECT)"
    )
    caplog.set_level(logging.DEBUG, logger="kappaflow.clients")
    for attempt in range(50):  # two clients, 25 attempts each within the interval
        logger.log(logging.ERROR, "%s [%s] %s", "FAIL", f"app-{attempt % 2}#consumer-1", fail.format(attempt))
    now[0] += rdkafka_log.REPEAT_INTERVAL_S
    logger.log(logging.ERROR, "%s [%s] %s", "FAIL", "app-0#consumer-1", fail.format(0))
    records = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    warnings = [m for name, _, m in records if name == "kappaflow.clients"]
    assert len(warnings) == 2 and all(
        "bootstrap.servers=broker-0:9092: Connection refused" in m for m in warnings
    )
    assert "49 more like it" in warnings[1]
    routed = [(level, m) for name, level, m in records if name == "kappaflow.clients.librdkafka"]
    assert [level for level, _ in routed] == ["WARNING", "WARNING"]  # retried: not an error yet
    assert "(after" not in routed[0][1] and "49 more like it" in routed[1][1]


def test_on_a_cluster_a_connect_failure_names_the_broker_and_is_warned_once_per_broker(monkeypatch, caplog):
    from kappaflow.clients import rdkafka_log

    monkeypatch.setattr(rdkafka_log, "_repeats", rdkafka_log._Repeats(lambda: 0.0))
    bootstrap = "127.0.0.1:39091,127.0.0.1:39092,127.0.0.1:39093"
    logger = rdkafka_log.LibrdkafkaLog(bootstrap)
    caplog.set_level(logging.DEBUG, logger="kappaflow.clients")
    for broker in (2, 2, 3):
        address = f"127.0.0.1:3909{broker}"
        text = f"{address}/{broker}: Connect to ipv4#{address} failed: Connection refused"
        logger.log(logging.ERROR, "%s [%s] %s", "FAIL", "app#producer-1", text)
    warnings = [r.getMessage() for r in caplog.records if r.name == "kappaflow.clients"]
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith(
        f"cannot connect to Kafka broker 127.0.0.1:39092 (one of bootstrap.servers={bootstrap}): "
        "Connection refused; retrying - the other brokers keep serving"
    )
    assert "broker 127.0.0.1:39093" in warnings[1]
    # a broker the metadata named, behind a single bootstrap address (a Kubernetes Service)
    text = "kafka-1.kafka:9092/1: Connect to ipv4#10.0.0.7:9092 failed: Connection refused"
    assert rdkafka_log._broker_address(text) == "kafka-1.kafka:9092"
    learned = rdkafka_log.connect_warning("kafka.kafka.svc:9092", "kafka-1.kafka:9092", "Connection refused")
    assert (
        "broker kafka-1.kafka:9092 (learned from the metadata of bootstrap.servers=kafka.kafka.svc:9092)"
        in learned
    )
    # every broker down: librdkafka's summary line names no address, the single-broker wording is kept
    all_down = rdkafka_log.connect_warning(bootstrap, "", "3/3 brokers are down")
    assert all_down.startswith(
        f"cannot connect to Kafka at bootstrap.servers={bootstrap}: 3/3 brokers are down"
    )


def test_kappaflow_log_variables_are_not_config_keys():
    from kappaflow.api.config import StreamsConfig

    environ = {
        "KAPPAFLOW_LOG_LEVEL": "DEBUG",
        "KAPPAFLOW_LOG_FORMAT": "json",
        "KAPPAFLOW_APPLICATION_ID": "a",
    }
    config = StreamsConfig.load({"bootstrap.servers": "b:9092"}, environ=environ)
    assert config.application_id == "a" and "log.level" not in config.as_dict()
