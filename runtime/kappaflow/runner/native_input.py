"""Whether the stream thread's input records are taken from librdkafka by the native core
(`InputQueues`, runtime/native/src/input_queue.rs) or through confluent-kafka's `consume()`.

Why: `consume()` builds a Python `Message` per record (confluent-kafka's own work, ~1.8k instructions,
plus the topic string and the accessors' objects), which the thread only reads back into the tasks'
record tuples (issue 31, item 1). The core takes each assigned partition's fetch queue off the consumer
queue when the rebalance callback assigns it and builds the tuples itself, with the `rd_kafka_t` inside
confluent-kafka's `Consumer`. The thread still calls `consume()` every iteration, first: it serves the
rebalance, error, log and statistics callbacks with confluent-kafka's call state, and any record it
still returns (a partition assigned without being opened) is routed first. Used only where the core
knows the installed confluent-kafka's structs, finds the one librdkafka in the process and the
interpreter runs with the GIL; anything else keeps `consume()` alone."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from confluent_kafka import Consumer

from kappaflow.api.record import Headers
from kappaflow.runner.native_produce import confluent_version, mapped_librdkafka
from kappaflow.tasks.native import InputQueues, NativeCore

log = logging.getLogger(__name__)


def input_queues(core: NativeCore | None, consumer: Consumer) -> InputQueues | None:
    """The core's reader of the group `consumer`'s fetches, or None (logged when the core is there)."""
    if core is None:
        return None
    gil_enabled: Callable[[], bool] = getattr(sys, "_is_gil_enabled", lambda: True)
    if not gil_enabled():
        log.warning("input records consumed through consume(): the interpreter runs without the GIL")
        return None
    library = mapped_librdkafka()
    if library is None:
        log.warning("input records consumed through consume(): librdkafka not found mapped once")
        return None
    try:
        return core.InputQueues(consumer, Consumer, confluent_version(), library, Headers)
    except ValueError as exc:
        log.warning("input records consumed through consume(): %s", exc)
        return None
