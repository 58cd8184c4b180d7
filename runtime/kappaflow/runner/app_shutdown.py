"""SHUTDOWN_APPLICATION across instances: a signal carried in an otherwise unused consumer group.

Java Kafka Streams broadcasts an uncaught exception handler's SHUTDOWN_APPLICATION through its own
partition assignor; librdkafka cannot plug one in. So the failing instance commits an offset for
partition 0 of the application's first source topic to the group `<application.id>-shutdown`, which no
consumer ever joins (a group without members takes such commits): the offset is the signal's time in ms,
the commit metadata says who sent it and why. Every instance reads that offset every few seconds and
stops - cleanly, then state ERROR - when it differs from its first reading. Comparing with its own first
reading, not with clocks, is what lets restarted instances run again.

Plain consumers do the reading and the commit: confluent-kafka 2.16's admin calls for group offsets
crashed the interpreter (SIGSEGV) when issued from a fresh AdminClient.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from kappaflow.clients.rdkafka_log import serve_consumer_logs, with_logger

log = logging.getLogger(__name__)

WATCH_INTERVAL_S = 2.0
REQUEST_TIMEOUT_S = 10.0


def shutdown_group(application_id: str) -> str:
    return f"{application_id}-shutdown"


def describe_signal(metadata: str) -> str:
    """The commit metadata, for a log line: `client (reason)`, tolerant of anything else written there."""
    try:
        fields = json.loads(metadata)
        return f"{fields.get('client', '?')} ({fields.get('reason', '')})"
    except (ValueError, AttributeError):
        return metadata or "an unknown instance"


class ApplicationShutdownSignal:
    """Send and watch the application-wide shutdown signal of one application."""

    def __init__(self, consumer_settings: dict[str, Any], application_id: str, topic: str) -> None:
        self._settings = {
            **consumer_settings,
            "group.id": shutdown_group(application_id),
            "enable.auto.commit": False,
        }
        self._topic = topic
        self._stopped = threading.Event()

    def _partition(self, offset: int = -1001, metadata: str | None = None) -> TopicPartition:
        if metadata is None:
            return TopicPartition(self._topic, 0, offset)
        return TopicPartition(self._topic, 0, offset, metadata=metadata)

    def request(self, client: str, reason: str) -> None:
        """Ask every instance to shut down. Best effort: a failure is logged; this instance stops anyway."""
        metadata = json.dumps({"client": client, "reason": reason[:500]})
        consumer = Consumer(with_logger(self._settings))
        try:
            offset = max(int(time.time() * 1000), 1)
            consumer.commit(offsets=[self._partition(offset, metadata)], asynchronous=False)
            log.error(
                "SHUTDOWN_APPLICATION: asked every instance to stop (group %s)", self._settings["group.id"]
            )
        except KafkaException as exc:
            log.error("SHUTDOWN_APPLICATION: could not signal the other instances: %s", exc)
        finally:
            consumer.close()

    def watch(self, on_signal: Callable[[str], None]) -> None:
        """Read the signal, then again every WATCH_INTERVAL_S, in a daemon thread; call `on_signal` once
        with the sender's description when it differs from the first successful reading."""

        def loop() -> None:
            consumer = Consumer(with_logger(self._settings))
            try:
                baseline = self._read(consumer)
                while not self._stopped.wait(WATCH_INTERVAL_S):
                    serve_consumer_logs(consumer)  # it never fetches: only this hands over its log lines
                    current = self._read(consumer)
                    if current is None:
                        continue
                    if baseline is None:  # unreadable at start (coordinator loading): the first reading
                        baseline = current
                    elif current != baseline and current[0] >= 0:
                        on_signal(describe_signal(current[1]))
                        return
            finally:
                consumer.close()

        threading.Thread(target=loop, name="shutdown-signal-watcher", daemon=True).start()

    def _read(self, consumer: Consumer) -> tuple[int, str] | None:
        """The signal's (offset, metadata), (-1001, "") when none was ever sent, None when unreadable."""
        try:
            (tp,) = consumer.committed([self._partition()], timeout=REQUEST_TIMEOUT_S)
        except KafkaException as exc:
            log.debug("shutdown signal unreadable for now: %s", exc)
            return None
        return tp.offset, tp.metadata or ""

    def close(self) -> None:
        self._stopped.set()
