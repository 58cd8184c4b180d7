"""Whether the stream thread's sink and repartition records are produced by the native core
(`ProduceSend`, runtime/native/src/produce.rs) or through confluent-kafka's `Producer.produce`.

The native send calls `rd_kafka_producev` with the `rd_kafka_t` inside confluent-kafka's Producer, so it
is only used where the core knows the installed confluent-kafka's structs (`PRODUCER_LAYOUTS`), the one
librdkafka in the process is found (the library confluent-kafka's `cimpl` loaded), the interpreter runs
with the GIL, and a probe passes: a producer with no broker gets one record natively with an error
callback and one without, their queued messages are purged, and the purge's delivery reports must reach
the callback exactly as for a record produced through `Producer.produce` (the `Producer_msgstate` the
core builds is the one confluent-kafka frees), while the one without a callback reaches nothing.

Changelog records go the same way through a second sender on the clients' `changelog_producer`
(`kappaflow.native.changelog.enabled`): their delivery reports carry the offsets the checkpoints need,
through the collector's offset report as each record's callback, which confluent-kafka's own delivery
callback calls with the delivered `Message` as it does for `Producer.produce(on_delivery=...)`.

At at_least_once the sink and repartition records need a report only when their delivery fails. The
core is then also the producer's librdkafka plugin (`failure_plugin`,
runtime/native/src/delivery_failures.rs): its `on_acknowledgement` interceptor keeps the failures of
records produced with no delivery state, so the native send produces them with none (no per-record
state, no GIL taken per report) and the stream thread's producer hands the failures to the production
handler where it serves delivery reports."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka import KafkaError, Producer

from kappaflow.tasks.native import NativeCore, NativeFailure, ProduceSend

log = logging.getLogger(__name__)

PROBE_CLIENT_ID = "kappaflow-native-produce-probe"


def mapped_librdkafka(maps: str = "/proc/self/maps") -> str | None:
    """The path of the one librdkafka mapped in this process, or None (none, several, or no /proc)."""
    try:
        text = Path(maps).read_text()
    except OSError:
        return None
    found = {line.split(maxsplit=5)[5] for line in text.splitlines() if "/librdkafka" in line}
    return found.pop() if len(found) == 1 else None


def confluent_version() -> str:
    found = confluent_kafka.version()  # "2.16.1" in 2.16; older releases returned (version, int)
    return str(found[0] if isinstance(found, tuple) else found)


class _ProbeClients:
    """The collector's producer clients, for the probe: one producer with no broker."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer

    def serve_reports(self) -> None:
        self.producer.poll(0)


def native_send(
    core: NativeCore,
    clients: Any,
    fallback: Callable[..., None],
    on_delivery: Any,
    attribute: str = "producer",
) -> ProduceSend | None:
    """The core's send for `clients`' producer (`fallback` is the collector's Python send, `on_delivery`
    the callback it passes), or None, logged, when it cannot be used (module docstring). With
    `attribute="changelog_producer"` it sends changelog records (`ProduceSend.changelog`) through that
    producer, `fallback` being the collector's `send_changelog`."""
    gil_enabled: Callable[[], bool] = getattr(sys, "_is_gil_enabled", lambda: True)
    if not gil_enabled():
        log.warning("records produced through confluent-kafka: the interpreter runs without the GIL")
        return None
    library = mapped_librdkafka()
    if library is None:
        log.warning("records produced through confluent-kafka: librdkafka not found mapped once")
        return None
    version = confluent_version()
    try:
        probe_send(core, version, library)
        sender = core.ProduceSend(clients, fallback, on_delivery, Producer, version, library, attribute)
    except ValueError as exc:
        log.warning("records produced through confluent-kafka: %s", exc)
        return None
    records = "changelog" if attribute == "changelog_producer" else "sink and repartition"
    log.info("%s records produced natively (rd_kafka_producev in %s)", records, library)
    return sender


def probe_send(core: NativeCore, version: str, library: str) -> None:
    """Produce through the core and through confluent-kafka to a producer with no broker, purge, and
    compare the delivery reports (ValueError when they differ)."""
    reports: list[tuple[int, str, int | None, bytes | None, bytes | None]] = []

    def report(err: KafkaError | None, msg: Any) -> None:
        reports.append((err.code() if err else 0, msg.topic(), msg.partition(), msg.key(), msg.value()))

    producer = Producer({"client.id": PROBE_CLIENT_ID, "bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    clients = _ProbeClients(producer)

    def refuse(*_: Any) -> None:
        raise ValueError("the probe record went through the Python send")

    try:
        with_report = core.ProduceSend(clients, refuse, report, Producer, version, library)
        without = core.ProduceSend(clients, refuse, None, Producer, version, library)
        name, default_cb, only_error = with_report.inspect(producer)
        if not name.startswith(f"{PROBE_CLIENT_ID}#producer-") or default_cb is not None or only_error:
            raise ValueError(f"the Producer's struct reads back otherwise ({name!r}, {only_error})")
        with_report("probe", b"k", b"v", None, 5, 0)
        without("probe", None, b"w", None, 6, None)
        producer.produce("probe", b"v", b"k", partition=0, timestamp=5, on_delivery=report)
        producer.purge(in_queue=True, in_flight=True)
        producer.flush(5)
        purged = (KafkaError._PURGE_QUEUE, "probe", 0, b"k", b"v")
        if reports != [purged, purged]:
            raise ValueError(f"the probe's delivery reports differ: {reports}")
    finally:
        producer.purge()


@dataclass(frozen=True)
class FailurePlugin:
    """The core as a librdkafka plugin reporting failed deliveries (delivery_failures.rs): `path` for a
    producer's `plugin.library.paths`, `take(producer)` its failures since the last call (None when the
    producer was created without the plugin)."""

    path: str
    take: Callable[[Producer], list[NativeFailure] | None]


def failure_plugin(core: NativeCore) -> FailurePlugin | None:
    """The core's failure plugin, armed with the librdkafka mapped in the process, or None, logged, when
    it cannot be used (the producer's failed deliveries then reach Python through confluent-kafka)."""
    library = mapped_librdkafka()
    if library is None:
        log.warning("failed deliveries reported through confluent-kafka: librdkafka not found mapped once")
        return None
    try:
        failures = core.DeliveryFailures(Producer, confluent_version(), library)
    except ValueError as exc:
        log.warning("failed deliveries reported through confluent-kafka: %s", exc)
        return None
    if not Path(failures.path).is_absolute() or ";" in failures.path:  # librdkafka splits paths at ';'
        log.warning("failed deliveries reported through confluent-kafka: core at %r", failures.path)
        return None
    return FailurePlugin(failures.path, failures.take)
