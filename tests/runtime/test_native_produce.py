"""The native produce path's checks, without a broker (produce.rs, kappaflow.runner.native_produce):
which records and producers it leaves to the Python send, and when it refuses to run at all. What lands
in Kafka both ways is compared in tests/kafka/test_native_produce.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from kappaflow.api.record import Headers
from kappaflow.runner.native_produce import confluent_version, mapped_librdkafka, native_send, probe_send
from kappaflow.tasks.native import NativeCore
from tests.native_support import require_native_core


@pytest.fixture
def core() -> NativeCore:
    return require_native_core()


class Clients:
    """The collector's producer clients: a producer with no broker (its records stay queued)."""

    def __init__(self, producer: Any) -> None:
        self.producer = producer
        self.served = 0

    def serve_reports(self) -> None:
        self.served += 1


class SubProducer(Producer):
    """A subclass may override produce: it always goes through the Python send."""


def no_broker() -> Producer:
    return Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})


def test_the_probe_passes_and_a_sender_is_built(core: NativeCore) -> None:
    library = mapped_librdkafka()
    assert library is not None and "librdkafka" in library
    probe_send(core, confluent_version(), library)
    assert native_send(core, Clients(no_broker()), lambda *_: None, None) is not None


def test_an_unknown_layout_is_refused(core: NativeCore) -> None:
    library = mapped_librdkafka()
    assert library is not None
    clients = Clients(no_broker())
    with pytest.raises(ValueError, match="knows the Producer layout"):
        core.ProduceSend(clients, print, None, Producer, "2.15.0", library)
    with pytest.raises(ValueError, match="is not the confluent-kafka"):
        core.ProduceSend(clients, print, None, Consumer, confluent_version(), library)
    with pytest.raises(ValueError, match="is not the confluent-kafka"):
        core.ProduceSend(clients, print, None, SubProducer, confluent_version(), library)
    with pytest.raises(ValueError, match="not loaded"):
        core.ProduceSend(clients, print, None, Producer, confluent_version(), "/nonexistent/librdkafka.so.1")


def test_librdkafka_must_be_mapped_exactly_once(tmp_path: Path) -> None:
    line = "7f00-7f01 r-xp 00000000 08:01 42 {}\n"
    one = tmp_path / "one"
    one.write_text(line.format("/a/librdkafka.so.1") * 2 + line.format("/usr/lib/libc.so.6"))
    assert mapped_librdkafka(str(one)) == "/a/librdkafka.so.1"
    two = tmp_path / "two"
    two.write_text(line.format("/a/librdkafka.so.1") + line.format("/b/librdkafka.so.1"))
    assert mapped_librdkafka(str(two)) is None
    assert mapped_librdkafka(str(tmp_path / "missing")) is None


def test_what_the_core_does_not_produce_goes_to_the_python_send(core: NativeCore) -> None:
    clients = Clients(no_broker())
    fallback: list[tuple[Any, ...]] = []
    library = mapped_librdkafka()
    assert library is not None
    send = core.ProduceSend(
        clients, lambda *a: fallback.append(a), None, Producer, confluent_version(), library
    )
    send("t", b"k", b"v", None, 1, None)  # native
    send("t", b"k", b"v", Headers(), 1, 2)  # native: empty headers, an explicit partition
    odd: list[tuple[Any, ...]] = [
        ("t", b"k", b"v", Headers([("h", b"1")]), 1, None),  # headers
        ("t", b"k", b"v", None, -1, None),  # a negative timestamp
        ("t", "text", b"v", None, 1, None),  # a str key
        ("t", b"k", bytearray(b"v"), None, 1, None),  # a value that is not exactly bytes
        ("t\0x", b"k", b"v", None, 1, None),  # a topic with a NUL
        ("t", b"k", b"v", None, 1, 2**40),  # a partition out of int32
    ]
    for args in odd:
        send(*args)
    assert fallback == odd
    assert send.sent == 2
    clients.producer = SubProducer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    send("t", b"k", b"v", None, 1, None)
    assert fallback[-1] == ("t", b"k", b"v", None, 1, None)
    closed = no_broker()
    closed.close()
    clients.producer = closed
    send("t", b"k", b"v", None, 1, None)
    assert len(fallback) == len(odd) + 2 and send.sent == 2


def test_reports_are_served_every_1024_records(core: NativeCore) -> None:
    producer = Producer(
        {"bootstrap.servers": "127.0.0.1:1", "log_level": 0, "queue.buffering.max.messages": 5000}
    )
    clients = Clients(producer)
    library = mapped_librdkafka()
    assert library is not None
    send = core.ProduceSend(clients, print, None, Producer, confluent_version(), library)
    for _ in range(2100):
        send("t", None, b"v", None, 1, None)
    assert send.sent == 2100 and clients.served == 2
    producer.purge()


def test_changelog_records_go_through_the_changelog_producer(core: NativeCore) -> None:
    """`changelog` reads the producer named by `attribute` and falls back with send_changelog's shape."""
    clients = Clients(SubProducer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0}))
    clients.changelog_producer = no_broker()  # type: ignore[attr-defined]
    fallback: list[tuple[Any, ...]] = []
    reports: list[tuple[Any, ...]] = []
    library = mapped_librdkafka()
    assert library is not None
    send = core.ProduceSend(
        clients,
        lambda *a: fallback.append(a),
        lambda err, msg: reports.append((err.code(), msg.topic(), msg.partition(), msg.key(), msg.value())),
        Producer,
        confluent_version(),
        library,
        "changelog_producer",
    )
    send.changelog("t-changelog", b"k", b"v", 1, 0)  # native: the changelog producer is a Producer
    send.changelog("t-changelog", b"k", None, 2, 1)  # native: a tombstone
    send.changelog("t-changelog", "text", b"v", 3, 0)  # a str key: the Python send_changelog
    assert fallback == [("t-changelog", "text", b"v", 3, 0)]
    assert send.sent == 2
    changelog_producer = clients.changelog_producer  # type: ignore[attr-defined]
    changelog_producer.purge()
    changelog_producer.flush(5)  # the purged records' reports reach the callback, from that producer
    purged = KafkaError._PURGE_QUEUE
    assert sorted(reports) == [(purged, "t-changelog", 0, b"k", b"v"), (purged, "t-changelog", 1, b"k", None)]
