"""The record collector: where sinks and changelogs send serialized records.

Tasks talk to this protocol, not to a producer, so the same task code writes to a real Kafka producer in
the runtime, to in-memory topics in the TopologyTestDriver, and to a buffer on Spark.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from kappaflow.api.record import Headers


class RecordCollector(Protocol):
    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
        timestamp: int,
        partition: int | None,
    ) -> None:
        """Send a record. `partition=None` means: choose it with the murmur2 partitioner on the key."""
        ...

    def send_dead_letter(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        timestamp: int,
        on_written: Callable[[], None],
    ) -> None:
        """Send a record to the dead-letter topic and call `on_written` once it is written (a failed
        write goes where any failed record goes): the dead-letter counter counts writes, not attempts."""
        ...

    def send_changelog(
        self, topic: str, key: bytes, value: bytes | None, timestamp: int, partition: int
    ) -> None:
        """Send a store's changelog record. Changelog records are the ones whose acknowledged offsets
        a commit checkpoints; a collector may send them apart from the others (see KafkaRecordCollector)."""
        ...

    def partition_count(self, topic: str) -> int | None:
        """The topic's partition count, if known; stream partitioners need it."""
        ...
