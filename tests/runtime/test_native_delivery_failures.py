"""The core's failed-delivery plugin without a broker (delivery_failures.rs, kappaflow.runner.native_produce):
a producer created with it keeps the failures of the records the native send produced with no delivery
state, and only those; it is refused where it cannot run, and the stream thread's producer then keeps
confluent-kafka's reports. Through a broker: tests/kafka/test_native_delivery_failures.py."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaError, Producer

from kappaflow.runner.native_produce import FailurePlugin, failure_plugin, native_send
from kappaflow.runner.producer import StreamsProducer
from kappaflow.tasks.native import NativeCore
from tests.native_support import require_native_core

# librdkafka's timestamp of a failed message (rd_kafka_message_timestamp), as confluent-kafka's report has it
NOT_AVAILABLE = (TIMESTAMP_NOT_AVAILABLE, -1)

pytestmark = pytest.mark.native_core  # the plugin is the native core's


@pytest.fixture
def core() -> NativeCore:
    return require_native_core()


class Clients:
    def __init__(self, producer: Any) -> None:
        self.producer = producer

    def serve_reports(self) -> None:
        pass


def test_purged_native_records_are_kept_and_python_ones_are_left_to_confluent_kafka(core: NativeCore) -> None:
    plugin = failure_plugin(core)
    assert plugin is not None
    producer = Producer(
        {"bootstrap.servers": "127.0.0.1:1", "log_level": 0, "plugin.library.paths": plugin.path}
    )
    assert plugin.take(producer) == []
    reports: list[tuple[int, bytes | None]] = []
    sender = native_send(core, Clients(producer), lambda *_: None, None)
    assert sender is not None
    sender("t", b"k1", b"v1", None, 5, 2)
    sender("t", None, b"v2", None, 6, None)
    producer.produce("t", b"py", b"kp", on_delivery=lambda err, msg: reports.append((err.code(), msg.key())))
    assert sender.sent == 2
    producer.purge()
    producer.flush(5)
    taken = plugin.take(producer)
    assert sorted(taken or [], key=repr) == sorted(
        [
            ("t", 2, b"k1", b"v1", -1001, KafkaError._PURGE_QUEUE, NOT_AVAILABLE),
            ("t", -1, None, b"v2", -1001, KafkaError._PURGE_QUEUE, NOT_AVAILABLE),
        ],
        key=repr,
    )
    assert reports == [(KafkaError._PURGE_QUEUE, b"kp")]  # its own report, not kept a second time
    assert plugin.take(producer) == []  # taken once


def test_a_producer_without_the_plugin_has_nothing_to_take(core: NativeCore) -> None:
    plugin = failure_plugin(core)
    assert plugin is not None
    assert plugin.take(Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})) is None


def test_the_plugin_refuses_a_producer_before_it_is_armed() -> None:
    """`conf_init` needs librdkafka's functions, which `failure_plugin` resolves: before that (a fresh
    process) the producer is not created rather than created without its interceptor."""
    require_native_core()
    script = (
        "import kappaflow_native, confluent_kafka, glob, os\n"
        "path = glob.glob(os.path.join(os.path.dirname(kappaflow_native.__file__), '*.so'))[0]\n"
        "try:\n"
        "    confluent_kafka.Producer({'plugin.library.paths': path})\n"
        "except confluent_kafka.KafkaException as exc:\n"
        "    print('refused:', exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert "refused:" in out.stdout and "not armed" in out.stdout


def test_a_plugin_that_does_not_load_leaves_the_reports_to_confluent_kafka(core: NativeCore) -> None:
    plugin = failure_plugin(core)
    assert plugin is not None
    broken = FailurePlugin("/nonexistent/kappaflow_native.so", plugin.take)
    producer = StreamsProducer(
        {"bootstrap.servers": "127.0.0.1:1", "log_level": 0}, False, None, 1.0, failure_plugin=broken
    )
    assert not producer.reports_failures_natively
    assert plugin.take(producer.producer) is None
    loaded = StreamsProducer(
        {"bootstrap.servers": "127.0.0.1:1", "log_level": 0}, False, None, 1.0, failure_plugin=plugin
    )
    assert loaded.reports_failures_natively
    assert plugin.take(loaded.changelog_producer) is None  # changelogs keep their offset reports
    for streams_producer in (producer, loaded):
        for p in streams_producer.producers():
            p.purge()


def test_exactly_once_never_takes_the_plugin(core: NativeCore) -> None:
    created: list[dict[str, Any]] = []

    class Transactional:
        def __init__(self, settings: dict[str, Any]) -> None:
            created.append(settings)

        def init_transactions(self, timeout: float) -> None:
            pass

    settings = {"bootstrap.servers": "127.0.0.1:1", "transactional.id": "t"}
    producer = StreamsProducer(
        settings, True, None, 1.0, factory=Transactional, failure_plugin=failure_plugin(core)
    )
    assert not producer.reports_failures_natively
    assert [s.get("plugin.library.paths") for s in created] == [None]
