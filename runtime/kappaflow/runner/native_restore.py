"""Whether the restore consumer's changelog records are taken from librdkafka by the native core
(`RestoreQueues`, runtime/native/src/restore_queue.rs) or through confluent-kafka's `consume()`.

Why: `consume()` builds a Python `Message` (with a topic str, key and value bytes) per record, which the
restore path then only reads back into a RocksDB write batch; at a million records that was most of a
restore's time (issue 31, item 4). The core takes each assigned changelog partition's fetch queue off
the consumer queue and serves it itself, with the `rd_kafka_t` inside confluent-kafka's `Consumer`. It is
only used where the core knows the installed confluent-kafka's structs (`PRODUCER_LAYOUTS`: the same
`Handle` serves both clients), the one librdkafka in the process is found and the interpreter runs with
the GIL; anything else keeps `consume()`, which the changelog reader calls every step either way (it
serves the consumer's other events, and any record it still returns is applied first)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from confluent_kafka import Consumer

from kappaflow.runner.native_produce import confluent_version, mapped_librdkafka
from kappaflow.tasks.native import NativeCore, RestoreQueues

log = logging.getLogger(__name__)


def restore_queues(core: NativeCore | None, consumer: Consumer) -> RestoreQueues | None:
    """The core's reader of `consumer`'s changelog fetches, or None (logged when the core is there)."""
    if core is None:
        return None
    gil_enabled: Callable[[], bool] = getattr(sys, "_is_gil_enabled", lambda: True)
    if not gil_enabled():
        log.warning("changelog records restored through consume(): the interpreter runs without the GIL")
        return None
    library = mapped_librdkafka()
    if library is None:
        log.warning("changelog records restored through consume(): librdkafka not found mapped once")
        return None
    try:
        return core.RestoreQueues(consumer, Consumer, confluent_version(), library)
    except ValueError as exc:
        log.warning("changelog records restored through consume(): %s", exc)
        return None
