"""State on a fresh instance without a full changelog replay: bootstrap a store from a peer's standby.

When a task opens (active, standby or warm-up) and one of its RocksDB stores holds no local state (no
checkpointed changelog offset: a new pod, or one that lost its volume) while its changelog spans at
least `state.bootstrap.min.records` offsets, the store is first fetched from an instance that keeps a
standby of the task: `GET /v1/snapshots/{task}/{store}` on its query endpoint (runner/snapshots.py) answers
a tar of a RocksDB checkpoint and the changelog offset its contents reach. The archive is extracted to a
staging directory beside the store, swapped in with a rename (runner `RocksDBKeyValueBytesStore.replace_with`)
and checked: the offset stored inside the database must be the one announced. Restoration then goes on
from that offset as from any local checkpoint, so only the changelog's tail is read; the usual checks
of `ProcessorStateManager.restore_offsets` apply to it (changelog topic id, offset within the log).

Which peers: the standby hosts of the task, as every instance computes them from the group's members
(`interpret_group`, the same rule the standbys are placed by and `GET /v1/tasks` reports), then the other
instances with a query endpoint (`peer_order` says why), this instance excluded. When none gives a
snapshot (no peer, refusals, a timeout, a short or malformed archive, an offset mismatch), a warning is
logged and the store is left empty, as it was: restoration then reads the whole changelog, as it would
have without this. The transfer runs on the stream thread while the task opens, bounded by
`state.bootstrap.timeout.ms`.
"""

from __future__ import annotations

import logging
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kappaflow.api.config import StreamsConfig
from kappaflow.api.metrics import Metrics
from kappaflow.api.processor import TaskId
from kappaflow.clients.admin import GroupMember
from kappaflow.runner.metadata import TopologyIndex, interpret_group
from kappaflow.runner.placement import standby_tasks_for
from kappaflow.runner.snapshot_transfer import SnapshotTransferError, read_tar
from kappaflow.runner.snapshots import OFFSET_HEADER
from kappaflow.state.kv_bytes import RocksDBKeyValueBytesStore
from kappaflow.tasks.state_manager import ProcessorStateManager, StoreMetadata, innermost

log = logging.getLogger(__name__)

SOCKET_TIMEOUT_S = 10.0  # per connect or read; the whole transfer is bounded by state.bootstrap.timeout.ms
PEERS_TTL_S = 2.0  # the tasks of one rebalance share one describe of the group

Bounds = Mapping[tuple[str, int], tuple[int, int]]
Fetch = Callable[[str, str, str, Path, float], tuple[int, int]]


def _staging(store_path: Path, store: str) -> Path:
    """Where a snapshot of `store` is extracted: beside its database, on the same file system (the
    install is a rename)."""
    return store_path.parent / f".{store}.bootstrap"


class SnapshotMissing(SnapshotTransferError):
    """The peer keeps no standby of the task (404)."""


@dataclass(frozen=True)
class BootstrapSettings:
    enabled: bool
    min_records: int
    timeout_s: float

    @staticmethod
    def from_config(config: StreamsConfig) -> BootstrapSettings:
        return BootstrapSettings(
            config.get_bool("state.bootstrap.enabled"),
            config.get_int("state.bootstrap.min.records"),
            config.get_int("state.bootstrap.timeout.ms") / 1000.0,
        )


def wants_snapshot(
    settings: BootstrapSettings, local_offset: int | None, rocksdb: bool, low: int, high: int
) -> bool:
    """Pure: whether a store should be fetched from a peer before it is restored: enabled, a RocksDB
    store with no local state, and a changelog spanning at least `min_records` offsets (below that a
    restore is as quick as a transfer)."""
    return (
        settings.enabled and rocksdb and local_offset is None and high - low >= max(1, settings.min_records)
    )


def peer_order(standby_hosts: list[str], other_hosts: list[str], self_host: str) -> list[str]:
    """Pure: the peers to ask, in order, this instance never: the task's standby hosts, then the other
    instances (a standby placed under the previous membership is still open there for a while after a
    rebalance: the view already names its next place), each group sorted so every instance asks in
    the same order. A peer without a standby answers 404 at once."""
    first = sorted({h for h in standby_hosts if h and h != self_host})
    rest = sorted({h for h in other_hosts if h and h != self_host} - set(first))
    return first + rest


def group_peers(
    describe: Callable[[], tuple[str, list[GroupMember]]],
    index: TopologyIndex,
    num_standbys: int,
    clock: Callable[[], float] = time.monotonic,
) -> Callable[[TaskId], tuple[list[str], list[str]]]:
    """task id -> (query endpoints of the instances keeping a standby of it, those of every other
    instance), from the group's members (described at most every PEERS_TTL_S); none without standbys."""
    cached: dict[str, Any] = {"at": None, "view": None}

    def peers(task_id: TaskId) -> tuple[list[str], list[str]]:
        if num_standbys <= 0:
            return [], []
        if cached["at"] is None or clock() - cached["at"] >= PEERS_TTL_S:
            state, members = describe()
            cached["view"] = interpret_group(
                state.upper() == "STABLE", members, index, num_standbys, standby_tasks_for
            )
            cached["at"] = clock()
        view = cached["view"]
        standbys = sorted(str(h) for h in view.standbys.get(task_id, ()))
        return standbys, sorted(str(m.host_info) for m in view.metadata)

    return peers


def http_fetch(
    peer: str,
    task: str,
    store: str,
    staging: Path,
    deadline: float,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[int, int]:
    """GET the snapshot of `store` of `task` from `peer` (host:port) into `staging`; (bytes, offset)."""
    url = (
        f"http://{peer}/v1/snapshots/{urllib.parse.quote(task, safe='')}/{urllib.parse.quote(store, safe='')}"
    )
    timeout = max(0.1, min(SOCKET_TIMEOUT_S, deadline - clock()))
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            length = int(response.headers["Content-Length"])
            offset = int(response.headers[OFFSET_HEADER])

            def progress(done: int, total: int) -> None:
                log.info("task %s store %s: %.1f of %.1f MB of the snapshot from %s", task, store,
                         done / 1e6, total / 1e6, peer)  # fmt: skip

            return read_tar(response, length, staging, deadline, progress, clock), offset
    except urllib.error.HTTPError as err:
        text = f"{peer} answered {err.code}: {err.read()[:300].decode(errors='replace')}"
        raise (SnapshotMissing(text) if err.code == 404 else SnapshotTransferError(text)) from err
    except (OSError, ValueError, TypeError) as exc:  # unreachable, timed out, a header missing
        raise SnapshotTransferError(f"{peer}: {exc}") from exc


class StateBootstrapper:
    """Called by the changelog reader when a task opens, before its restoration starts (`__call__`)."""

    def __init__(
        self,
        settings: BootstrapSettings,
        peers: Callable[[TaskId], tuple[list[str], list[str]]],
        self_host: str,
        metrics: Metrics,
        fetch: Fetch = http_fetch,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._peers = peers
        self._self_host = self_host
        self._metrics = metrics
        self._fetch = fetch
        self._clock = clock

    def __call__(self, task_id: TaskId, manager: ProcessorStateManager, bounds: Bounds) -> bool:
        """Bootstrap the stores of a task that want it (`wants_snapshot`); True when one was installed
        (its offset may be past `bounds`, which the caller should then read again)."""
        if not self._settings.enabled:
            return False
        installed = False
        peers: list[str] | None = None
        for meta in manager.logged_stores():
            if meta.source_topic:
                # a reused source topic (`topology.optimization`): no standby tails it, so no peer holds
                # a copy at a known offset; it restores from its input up to the committed offset
                continue
            bottom = innermost(meta.store)
            low, high = bounds.get((meta.changelog_topic, meta.partition), (0, 0))
            rocksdb = isinstance(bottom, RocksDBKeyValueBytesStore)
            if rocksdb and bottom.path is not None:  # left by a crash mid-transfer, whatever follows
                shutil.rmtree(_staging(bottom.path, meta.name), ignore_errors=True)
            if not wants_snapshot(self._settings, manager.committed_offset(meta.name), rocksdb, low, high):
                continue
            assert isinstance(bottom, RocksDBKeyValueBytesStore)
            if peers is None:
                try:
                    peers = peer_order(*self._peers(task_id), self._self_host)
                except Exception as exc:
                    log.warning("task %s: cannot read the group for peers to bootstrap from (%s): restoring "
                                "from the changelog", task_id, exc)  # fmt: skip
                    return installed
            if not peers:
                log.warning("task %s: no peer with a query endpoint to ask for a snapshot: restoring %d "
                            "changelog records of %s", task_id, high - low, meta.name)  # fmt: skip
                return installed
            installed |= self._bootstrap_store(task_id, meta, bottom, low, peers)
        return installed

    def _bootstrap_store(
        self,
        task_id: TaskId,
        meta: StoreMetadata,
        bottom: RocksDBKeyValueBytesStore,
        low: int,
        peers: list[str],
    ) -> bool:
        path = bottom.path
        assert path is not None
        staging = _staging(path, meta.name)
        labels = {"task": str(task_id), "store": meta.name}
        deadline = self._clock() + self._settings.timeout_s  # over every peer: the stream thread waits
        for peer in peers:
            started = self._clock()
            if started >= deadline:
                break
            shutil.rmtree(staging, ignore_errors=True)
            swapped = False
            try:
                size, offset = self._fetch(peer, str(task_id), meta.name, staging, deadline)
                if offset <= low:  # a standby that has applied nothing yet (just placed): no use
                    raise SnapshotMissing(f"{peer}'s standby holds nothing past offset {low} yet")
                swapped = True
                bottom.replace_with(staging)
                stored = bottom.committed_changelog_offset()
                if stored != offset:
                    raise SnapshotTransferError(
                        f"the snapshot holds offset {stored}, {peer} announced {offset}"
                    )
            except Exception as exc:
                if swapped:  # never keep a store half-installed or inconsistent: back to empty
                    bottom.reset()
                level = logging.INFO if isinstance(exc, SnapshotMissing) else logging.WARNING  # 404: next
                log.log(level, "task %s store %s: no snapshot from %s (%s)", task_id, meta.name, peer, exc)
                continue
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            seconds = self._clock() - started
            self._metrics.increment("bootstrap-records-total", max(0, offset - low), **labels)
            self._metrics.increment("bootstrap-bytes-total", size, **labels)
            self._metrics.increment("bootstrap-seconds-total", seconds, **labels)
            log.info(
                "task %s store %s: bootstrapped from the standby on %s in %.2f s (%.1f MB, changelog "
                "offsets %d..%d not replayed); restoring the tail from %d",
                task_id, meta.name, peer, seconds, size / 1e6, low, offset, offset,
            )  # fmt: skip
            return True
        self._metrics.increment("bootstrap-failures-total", **labels)
        log.warning("task %s store %s: none of %s gave a snapshot: restoring from the changelog",
                    task_id, meta.name, ", ".join(peers))  # fmt: skip
        return False
