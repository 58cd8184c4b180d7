"""A task's state manager: builds its stores, knows their changelogs, restores and checkpoints them.

Stores register themselves (with a restore callback) while they initialize; the manager records which
are logged and where each one's changelog partition is. The last restored or written changelog offset is
kept by the innermost store (inside RocksDB for persistent stores), so a restart restores only the tail.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kappaflow.state.api import ChangelogRecord, RestoreCallback, StateStore
from kappaflow.state.builders import StoreBuilder

log = logging.getLogger(__name__)


@dataclass
class StoreMetadata:
    name: str
    store: Any
    restore: RestoreCallback
    logged: bool
    changelog_topic: str
    partition: int
    restored_records: int = 0


def innermost(store: Any) -> Any:
    while getattr(store, "inner", None) is not None:
        store = store.inner
    return store


class ProcessorStateManager:
    def __init__(self, task_dir: Path, partition: int, changelog_topic: Any) -> None:
        self.task_dir = task_dir
        self.partition = partition
        self._changelog_topic = changelog_topic
        self.stores: dict[str, StoreMetadata] = {}
        self._builders: dict[str, StoreBuilder] = {}
        self._pending: StoreBuilder | None = None

    def register_builder(self, builder: StoreBuilder) -> None:
        self._pending = builder
        self._builders[builder.name] = builder

    def register(self, store: StateStore, restore: RestoreCallback) -> None:
        builder = self._builders.get(store.name)
        logged = builder.logging_enabled if builder is not None else False
        self.stores[store.name] = StoreMetadata(
            store.name, store, restore, logged, self._changelog_topic(store.name), self.partition
        )

    def logged_stores(self) -> list[StoreMetadata]:
        return [m for m in self.stores.values() if m.logged]

    def committed_offset(self, store_name: str) -> int | None:
        value = innermost(self.stores[store_name].store).committed_changelog_offset()
        return None if value is None else int(value)

    def restore(self, store_name: str, records: list[ChangelogRecord]) -> None:
        meta = self.stores[store_name]
        meta.restore(records)
        meta.restored_records += len(records)

    def flush(self) -> None:
        for meta in self.stores.values():
            meta.store.flush()

    def checkpoint(self, offsets: dict[str, int]) -> None:
        """Record, per store, the next changelog offset its contents include."""
        for name, offset in offsets.items():
            meta = self.stores.get(name)
            if meta is not None:
                innermost(meta.store).checkpoint(offset)

    def close(self) -> None:
        for meta in self.stores.values():
            try:
                meta.store.close()
            except Exception:  # closing must go on for the other stores
                log.exception("error closing store %s", meta.name)

    def wipe(self) -> None:
        """Delete local state: used when it cannot be trusted (e.g. an EOS task that crashed)."""
        self.close()
        shutil.rmtree(self.task_dir, ignore_errors=True)
