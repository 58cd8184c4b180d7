"""Who hosts what: the group's assignment turned into Kafka Streams' query metadata.

Java shares each instance's `application.server` through its own partition assignor's user data.
librdkafka cannot plug an assignor nor add user data to the group protocol, so an instance carries its
query endpoint in the consumer's `client.id` (`<client id>-consumer@iq=<host>:<port>`), which the group
coordinator reports for every member. `describe_consumer_groups` then gives every instance the same
view: members, their endpoints and their assigned partitions. Standby placement is the deterministic
rule the stream thread applies (`standby_tasks_for`), so standby hosts are computed, not exchanged.

Everything here is pure (members in, metadata out) except `GroupMetadataSource`, which reads the group
through an admin client and caches the answer briefly so a burst of queries costs one describe call.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kappaflow.api.errors import ConfigError
from kappaflow.api.processor import TaskId
from kappaflow.clients.admin import GroupMember
from kappaflow.clients.murmur2 import partition_for_key
from kappaflow.topology.topology import Topology

ENDPOINT_MARK = "@iq="


@dataclass(frozen=True, order=True)
class HostInfo:
    """An instance's query endpoint (`application.server`)."""

    host: str
    port: int

    @staticmethod
    def parse(text: str) -> HostInfo:
        host, sep, port = text.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"config 'application.server': expected host:port, got {text!r}")
        return HostInfo(host, int(port))

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class KeyQueryMetadata:
    """Where a key lives: the active host, hosts with a standby copy, and the key's partition.

    `active_host` is None while the metadata is not available (a rebalance is under way, or the owner
    did not configure `application.server`); Java's `KeyQueryMetadata.NOT_AVAILABLE`.
    """

    active_host: HostInfo | None
    standby_hosts: frozenset[HostInfo]
    partition: int

    @property
    def available(self) -> bool:
        return self.active_host is not None


NOT_AVAILABLE = KeyQueryMetadata(None, frozenset(), -1)


@dataclass(frozen=True)
class StreamsMetadata:
    """One instance of the application: its endpoint and the stores and partitions it hosts."""

    host_info: HostInfo
    client_id: str
    state_store_names: frozenset[str]
    topic_partitions: frozenset[tuple[str, int]]
    standby_state_store_names: frozenset[str] = frozenset()
    standby_topic_partitions: frozenset[tuple[str, int]] = frozenset()

    def host(self) -> str:
        return self.host_info.host

    def port(self) -> int:
        return self.host_info.port


@dataclass(frozen=True)
class LagInfo:
    """How far a local store partition is behind the end of its changelog (Java's LagInfo)."""

    current_offset_position: int
    end_offset_position: int

    @property
    def offset_lag(self) -> int:
        return max(0, self.end_offset_position - self.current_offset_position)


def consumer_client_id(base: str, server: str) -> str:
    """The consumer `client.id` carrying this instance's endpoint (unchanged when there is none)."""
    return f"{base}{ENDPOINT_MARK}{server}" if server else base


def endpoint_of(client_id: str) -> HostInfo | None:
    """The endpoint a member's `client.id` carries, or None."""
    _base, sep, server = client_id.rpartition(ENDPOINT_MARK)
    if not sep:
        return None
    try:
        return HostInfo.parse(server)
    except ConfigError:
        return None


@dataclass
class GroupView:
    """The group's membership as of one describe call, interpreted for this topology."""

    stable: bool
    members: list[GroupMember]
    metadata: list[StreamsMetadata] = field(default_factory=list)
    # TaskId -> active host / standby hosts
    active: dict[TaskId, HostInfo] = field(default_factory=dict)
    standbys: dict[TaskId, set[HostInfo]] = field(default_factory=dict)


class TopologyIndex:
    """Maps partitions to tasks and stores to sub-topologies for one topology and application id."""

    def __init__(self, topology: Topology, app_id: str) -> None:
        self.topology = topology
        self._sub_of_topic = {
            topology.resolve_topic(t, app_id): s.id
            for s in topology.sub_topologies()
            for t in s.source_topics
        }
        self._stores_of_sub = {s.id: frozenset(s.stores) for s in topology.sub_topologies()}
        self._sub_of_store = {name: s.id for s in topology.sub_topologies() for name in s.stores}

    def task_ids_for(self, partitions: list[tuple[str, int]]) -> dict[TaskId, list[tuple[str, int]]]:
        result: dict[TaskId, list[tuple[str, int]]] = {}
        for topic, partition in partitions:
            sub = self._sub_of_topic.get(topic)
            if sub is not None:
                result.setdefault(TaskId(sub, partition), []).append((topic, partition))
        return result

    def stores_of(self, task_id: TaskId) -> frozenset[str]:
        return self._stores_of_sub.get(task_id.subtopology, frozenset())

    def subtopology_of_store(self, store: str) -> int | None:
        return self._sub_of_store.get(store)

    def source_topics_of(self, sub: int) -> list[str]:
        return sorted(t for t, s in self._sub_of_topic.items() if s == sub)

    def partition_count(self, store: str, counts: Mapping[str, int]) -> int | None:
        """Partitions of the sub-topology holding `store` (= its tasks), from the source topics' counts."""
        sub = self.subtopology_of_store(store)
        if sub is None:
            return None
        known = [counts[t] for t in self.source_topics_of(sub) if t in counts]
        return max(known) if known else None


def interpret_group(
    stable: bool,
    members: list[GroupMember],
    index: TopologyIndex,
    num_standbys: int,
    standby_rule: Callable[..., set[TaskId]],
) -> GroupView:
    """Turn members (sorted as the coordinator's describe gives them) into per-host metadata."""
    view = GroupView(stable, members)
    for member in members:
        host = endpoint_of(member.client_id)
        tasks = index.task_ids_for(list(member.assignment))
        standby_tasks = {
            t
            for t in standby_rule(member.member_id, members, index.task_ids_for, num_standbys)
            if index.stores_of(t) and t not in tasks
        }
        if host is None:
            continue
        for task_id in tasks:
            view.active[task_id] = host
        for task_id in standby_tasks:
            view.standbys.setdefault(task_id, set()).add(host)
        standby_partitions = {
            tp for t in standby_tasks for tp in index.task_ids_for(_all_partitions_of(t, index))[t]
        }
        view.metadata.append(
            StreamsMetadata(
                host,
                member.client_id,
                frozenset(s for t in tasks for s in index.stores_of(t)),
                frozenset(member.assignment),
                frozenset(s for t in standby_tasks for s in index.stores_of(t)),
                frozenset(standby_partitions),
            )
        )
    view.metadata = _one_per_host(view.metadata)
    return view


def _one_per_host(metadata: list[StreamsMetadata]) -> list[StreamsMetadata]:
    """One entry per endpoint: the worker processes of one instance (`num.stream.threads` > 1) are
    members of their own but one instance, as Kafka Streams' threads are one client."""
    merged: dict[HostInfo, StreamsMetadata] = {}
    for m in metadata:
        seen = merged.get(m.host_info)
        merged[m.host_info] = (
            m
            if seen is None
            else StreamsMetadata(
                m.host_info,
                min(seen.client_id, m.client_id),
                seen.state_store_names | m.state_store_names,
                seen.topic_partitions | m.topic_partitions,
                seen.standby_state_store_names | m.standby_state_store_names,
                seen.standby_topic_partitions | m.standby_topic_partitions,
            )
        )
    return sorted(merged.values(), key=lambda m: m.host_info)


def _all_partitions_of(task_id: TaskId, index: TopologyIndex) -> list[tuple[str, int]]:
    return [(t, task_id.partition) for t in index.source_topics_of(task_id.subtopology)]


def key_metadata(
    view: GroupView, index: TopologyIndex, store: str, key_bytes: bytes, counts: Mapping[str, int]
) -> KeyQueryMetadata:
    """Active and standby hosts of the partition `key_bytes` maps to, as the producer would place it."""
    sub = index.subtopology_of_store(store)
    partitions = index.partition_count(store, counts)
    if sub is None or partitions is None:
        return NOT_AVAILABLE
    partition = partition_for_key(key_bytes, partitions)
    task_id = TaskId(sub, partition)
    active = view.active.get(task_id) if view.stable else None
    if active is None:
        return KeyQueryMetadata(None, frozenset(), partition)
    return KeyQueryMetadata(active, frozenset(view.standbys.get(task_id, set())), partition)


class GroupMetadataSource:
    """Reads the group through an admin client, caching the view for `ttl` seconds."""

    def __init__(
        self,
        describe: Callable[[], tuple[str, list[GroupMember]]],
        interpret: Callable[[bool, list[GroupMember]], GroupView],
        ttl: float = 0.5,
    ) -> None:
        self._describe = describe
        self._interpret = interpret
        self._ttl = ttl
        self._lock = threading.Lock()
        self._view: GroupView | None = None
        self._at = 0.0

    def view(self, fresh: bool = False) -> GroupView:
        with self._lock:
            now = time.monotonic()
            if fresh or self._view is None or now - self._at >= self._ttl:
                try:
                    state, members = self._describe()
                    self._view = self._interpret(state.upper() == "STABLE", members)
                except Exception:
                    self._view = GroupView(False, [])
                self._at = now
            return self._view

    def invalidate(self) -> None:
        with self._lock:
            self._view = None


def describe_with(admin: Any, group_id: str, static: bool) -> Callable[[], tuple[str, list[GroupMember]]]:
    def describe() -> tuple[str, list[GroupMember]]:
        result: tuple[str, list[GroupMember]] = admin.group_members(group_id, static=static)
        return result

    return describe
