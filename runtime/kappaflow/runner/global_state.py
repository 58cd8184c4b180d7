"""Global stores on Kafka: every instance keeps a full copy, read from all partitions of each topic.

Like Kafka Streams' global thread, the updater bootstraps every global store to the topics' end offsets
before the stream thread joins its group (so a join never sees a half-loaded table), then applies new
records on each loop iteration. Its consumer only uses assign(): no group, no commits. Where every
global store is persistent, the next offsets are checkpointed in `<state.dir>/<app>/global/.checkpoint`
on commit and close, so a restart reads only what it missed; in-memory global stores reload from the
beginning.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from kappaflow.api.config import StreamsConfig
from kappaflow.api.errors import StreamsError
from kappaflow.api.metrics import Metrics
from kappaflow.api.record import Headers
from kappaflow.clients.kafka import new_consumer
from kappaflow.tasks.drain import RawRecord
from kappaflow.tasks.global_task import GlobalTask
from kappaflow.topology.topology import Topology

log = logging.getLogger(__name__)

BATCH = 1000


class GlobalStateUpdater:
    def __init__(
        self,
        topology: Topology,
        config: StreamsConfig,
        collector: Any,
        metrics: Metrics,
        consumer_settings: dict[str, Any],
        clock: Callable[[], int],
    ) -> None:
        state_root = Path(config.get_str("state.dir")) / config.application_id
        self.task = GlobalTask(topology, config, collector, metrics, state_root, clock)
        self.metrics = metrics
        self.checkpoint_file = state_root / "global" / ".checkpoint"
        self.persistent = all(store.persistent for store in self.task.stores.values())
        settings = dict(consumer_settings)
        settings["client.id"] = f"{settings.get('client.id', 'kappaflow')}-global"
        self.consumer = new_consumer(settings)
        self.positions: dict[tuple[str, int], int] = {}

    def _read_checkpoint(self) -> dict[tuple[str, int], int]:
        if not self.persistent or not self.checkpoint_file.exists():
            return {}
        raw = json.loads(self.checkpoint_file.read_text())
        return {(t, int(p)): int(o) for t, p, o in raw}

    def checkpoint(self) -> None:
        self.task.flush()
        if not self.persistent:
            return
        self.checkpoint_file.parent.mkdir(parents=True, exist_ok=True)
        temp = self.checkpoint_file.with_suffix(".tmp")
        temp.write_text(json.dumps([[t, p, o] for (t, p), o in sorted(self.positions.items())]))
        temp.replace(self.checkpoint_file)

    def bootstrap(self, timeout: float = 300.0) -> None:
        """Assign every partition of the global topics and load them to their current end offsets."""
        saved = self._read_checkpoint()
        assignments: list[TopicPartition] = []
        ends: dict[tuple[str, int], int] = {}
        for topic in self.task.topics():
            metadata = self.consumer.list_topics(topic, timeout=10).topics.get(topic)
            if metadata is None or metadata.error is not None or not metadata.partitions:
                raise StreamsError(f"global table topic '{topic}' does not exist")
            for partition in metadata.partitions:
                start = saved.get((topic, partition), OFFSET_BEGINNING)
                assignments.append(TopicPartition(topic, partition, start))
                _, high = self.consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
                ends[(topic, partition)] = high
        self.consumer.assign(assignments)
        remaining = {tp: end for tp, end in ends.items() if end > max(saved.get(tp, 0), 0)}
        loaded = 0
        deadline = time.monotonic() + timeout
        last_log = time.monotonic()
        while remaining:
            if time.monotonic() > deadline:
                raise StreamsError(
                    f"global stores did not load within {timeout:.0f}s; behind on {sorted(remaining)}"
                )
            loaded += self.poll(1.0)
            for tp in list(remaining):
                if self.positions.get(tp, 0) >= remaining[tp]:
                    del remaining[tp]
            if time.monotonic() - last_log > 5:
                log.info("global stores: loaded %d records, %d partitions to go", loaded, len(remaining))
                last_log = time.monotonic()
        for tp in ends:
            self.positions.setdefault(tp, saved.get(tp, 0))
        self.metrics.increment("global-restored-records-total", loaded)
        log.info("global stores loaded: %d records from %d partitions", loaded, len(ends))
        self.checkpoint()

    def poll(self, timeout: float = 0.0) -> int:
        """Apply what has arrived; returns the number of records applied."""
        applied = 0
        messages: list[Any] = self.consumer.consume(BATCH, timeout)
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                raise StreamsError(f"global consumer error: {error}")
            _, timestamp = message.timestamp()
            raw = RawRecord(
                message.offset(), timestamp, message.key(), message.value(), Headers(message.headers() or ())
            )
            self.task.update(message.topic(), message.partition(), raw)
            self.positions[(message.topic(), message.partition())] = message.offset() + 1
            applied += 1
        return applied

    @property
    def stores(self) -> dict[str, Any]:
        return self.task.stores

    def close(self, clean: bool) -> None:
        try:
            if clean:
                self.checkpoint()
            self.task.close()
        finally:
            self.consumer.close()
