"""Admin adapter: internal topics (create and validate), co-partitioning checks, group inspection, reset.

The runner describes what it needs as plain `TopicPlan`s (this layer never sees a Topology). Partition
counts come from the source topics; an existing topic with a different count is an error, never a
resize, because resizing silently moves keys between partitions and corrupts state.
"""

from __future__ import annotations

import logging
import re
import struct
import time
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaException,
    TopicCollection,
    TopicPartition,
)

# NewTopic and ConsumerGroupDescription are re-exported without __all__: mypy needs the ignore.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from kappaflow.api.errors import StreamsError
from kappaflow.clients.rdkafka_log import serve_logs, with_logger
from kappaflow_contract.topics import replicated_topic_config

log = logging.getLogger(__name__)
# How long a topic missing from a broker's metadata is looked for again before it counts as missing: the
# broker applies a topic the controller has just created from the metadata log, typically within ms.
METADATA_SETTLE_S = 2.0
METADATA_RETRY_S = 0.1


class TopicError(StreamsError):
    """Topics are missing, have the wrong partition count or are not co-partitioned."""


@dataclass
class TopicPlan:
    """An internal topic: full name, kind, topic config and its partition count (decided by the runner
    with the contract's rule, `kappaflow_contract.topics.resolve_partitions`)."""

    name: str
    kind: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class GroupMember:
    member_id: str
    client_id: str
    instance_id: str
    assignment: tuple[tuple[str, int], ...]
    host: str = ""  # the address the member connects from, as the coordinator saw it

    @property
    def sort_key(self) -> str:
        return self.instance_id or self.member_id


#: The member id a group coordinator gives a member of a classic group: `<prefix>-<java.util.UUID>`, the
#: prefix being the group.instance.id of a static member and the client.id of a dynamic one.
_MEMBER_ID = re.compile(r"^(?P<prefix>.*)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def static_instance_id(member_id: str) -> str:
    """The group.instance.id of a static member, from the member id its coordinator gave it ("" when the
    id does not have the coordinator's form)."""
    found = _MEMBER_ID.match(member_id)
    return found["prefix"] if found else ""


def decode_assignment(data: bytes) -> tuple[tuple[str, int], ...]:
    """The (topic, partition)s of a classic consumer-protocol assignment (ConsumerProtocolAssignment:
    int16 version, int32 topic count, then per topic an int16-length name, an int32 partition count and
    int32 partitions; user data follows and is ignored), sorted. Empty bytes: nothing assigned."""
    if len(data) < 6:
        return ()
    pos = 2  # the version: every version starts with the same topic array
    (topics,) = struct.unpack_from(">i", data, pos)
    pos += 4
    owned: list[tuple[str, int]] = []
    for _ in range(max(topics, 0)):
        (length,) = struct.unpack_from(">h", data, pos)
        pos += 2
        topic = data[pos : pos + length].decode()
        pos += length
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        partitions = struct.unpack_from(f">{max(count, 0)}i", data, pos)
        pos += 4 * max(count, 0)
        owned.extend((topic, p) for p in partitions)
    return tuple(sorted(owned))


class InternalTopicManager:
    def __init__(self, settings: Mapping[str, Any]) -> None:
        self._settings = dict(settings)
        self.admin = serve_logs(AdminClient(with_logger(self._settings)))

    def list_topics(self, topic: str | None = None, timeout: float = 10) -> Any:
        return self.admin.list_topics(topic, timeout=timeout)

    def partition_counts(self, topics: Iterable[str], settle_s: float = 0.0) -> dict[str, int]:
        """Partition counts of the topics that exist (missing ones are absent from the result).

        `settle_s`: while one is missing, ask again for up to this long. Under KRaft a topic is created
        once the controller has committed it, and each broker learns it from the metadata log a moment
        later: a start right after `kafka-topics --create` would otherwise be refused for a topic that
        exists (METADATA_SETTLE_S)."""
        wanted = list(topics)
        deadline = time.monotonic() + settle_s
        while True:
            metadata = self.admin.list_topics(timeout=15)
            result: dict[str, int] = {}
            for name in wanted:
                found = metadata.topics.get(name)
                if found is not None and found.error is None and found.partitions:
                    result[name] = len(found.partitions)
            if len(result) == len(set(wanted)) or time.monotonic() >= deadline:
                return result
            time.sleep(METADATA_RETRY_S)

    def require_topics(self, topics: Iterable[str]) -> dict[str, int]:
        wanted = sorted(set(topics))
        counts = self.partition_counts(wanted, settle_s=METADATA_SETTLE_S)
        missing = [t for t in wanted if t not in counts]
        if missing:
            raise TopicError(f"source topics do not exist: {', '.join(missing)}; create them first")
        return counts

    def broker_creates_topics(self) -> bool | None:
        """The broker's `auto.create.topics.enable`: whether producing to a missing topic creates it
        (librdkafka's producer asks it to). None when it cannot be read (e.g. not authorized)."""
        try:
            metadata = self.admin.list_topics(timeout=15)
            broker = str(next(iter(metadata.brokers)))
            resource = ConfigResource(ResourceType.BROKER, broker)
            configs = self.admin.describe_configs([resource])[resource].result(timeout=15)
        except (KafkaException, StopIteration) as exc:
            log.debug("cannot read the broker's auto.create.topics.enable: %s", exc)
            return None
        entry = configs.get("auto.create.topics.enable")
        return None if entry is None or entry.value is None else str(entry.value).lower() == "true"

    def ensure(
        self, plans: list[TopicPlan], wanted: Mapping[str, int], create: bool, replication_factor: int = -1
    ) -> None:
        """Create missing internal topics (if `create`) and fail on any with the wrong partition count."""
        existing = self.partition_counts(wanted)
        wrong = [
            f"{n} has {existing[n]} (expected {c})" for n, c in wanted.items() if existing.get(n, c) != c
        ]
        if wrong:
            raise TopicError(
                "internal topics have the wrong partition count: "
                + "; ".join(wrong)
                + ". Run `kappaflow reset` or delete them; kappaflow never resizes a topic."
            )
        missing = [p for p in plans if p.name not in existing]
        if not missing:
            # another instance may have just created them: wait until every partition has a leader
            self.wait_for([p.name for p in plans])
            return
        if not create:
            raise TopicError(
                "internal topics are missing and kappaflow.internal.topics.create=false: "
                + ", ".join(p.name for p in missing)
            )
        new = [
            NewTopic(
                p.name,
                num_partitions=wanted[p.name],
                replication_factor=replication_factor,
                config=replicated_topic_config(p.config, replication_factor),
            )
            for p in missing
        ]
        for name, future in self.admin.create_topics(new, operation_timeout=30).items():
            try:
                future.result(timeout=60)
                log.info("created internal topic %s (%d partitions)", name, wanted[name])
            except Exception as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise TopicError(f"cannot create internal topic '{name}': {exc}") from exc
        self.wait_for([p.name for p in plans])

    def wait_for(self, names: list[str], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            metadata = self.admin.list_topics(timeout=10)
            ready = {
                n
                for n in names
                if n in metadata.topics
                and metadata.topics[n].error is None
                and metadata.topics[n].partitions
                and all(p.leader >= 0 for p in metadata.topics[n].partitions.values())
            }
            if len(ready) == len(names):
                return
            if time.monotonic() > deadline:
                raise TopicError(f"topics not ready after {timeout}s: {sorted(set(names) - ready)}")
            time.sleep(0.1)

    @staticmethod
    def check_copartitioned(groups: list[list[str]], counts: Mapping[str, int]) -> None:
        for group in groups:
            sizes = {t: counts[t] for t in group if t in counts}
            if len(set(sizes.values())) > 1:
                listed = ", ".join(f"{t} ({n} partitions)" for t, n in sorted(sizes.items()))
                raise TopicError(
                    f"topics joined together must be co-partitioned (same partition count): {listed}"
                )

    def topic_ids(self, topics: list[str]) -> dict[str, str]:
        """topic -> topic id (a recreated topic has a new one); best effort: a topic that cannot be
        described (missing, not authorized) is left out."""
        if not topics:
            return {}
        futures = self.admin.describe_topics(TopicCollection(topics), request_timeout=15)
        ids: dict[str, str] = {}
        for topic, future in futures.items():
            try:
                ids[topic] = str(future.result(timeout=30).topic_id)
            except Exception as exc:
                log.debug("cannot describe topic %s: %s", topic, exc)
        return ids

    def group_members(self, group_id: str, static: bool = False) -> tuple[str, list[GroupMember]]:
        """(group state, members with their current assignments) as the coordinator sees them; `static`:
        the group's members use static membership (the caller's own group.instance.id is set).

        Read with the classic DescribeGroups (`list_groups`), not `describe_consumer_groups`: librdkafka
        2.16.0 (confluent-kafka 2.16.1, the newest release) aborts the whole process in the coordinator
        path of its newer Admin calls when the connection drops while a request is being sent
        (`rd_kafka_enq_once_del_source_return: Assertion 'eonce->refcnt > 0' failed`, a use-after-free
        in rd_kafka_admin_coord_request's error path, confluentinc/librdkafka#5397, unreleased). The
        stream thread describes the group after every rebalance (standby placement) and for interactive
        queries, so a broker going down during a rebalance killed instances; `list_groups` sends its
        requests without that path (issue 29 item 3, reproduced by tests/kafka/test_group_view_abort.py).
        A KIP-848 `consumer` group, which DescribeGroups reports as Dead and member-less, still takes the
        newer call. DescribeGroups does not report a static member's group.instance.id, but the
        coordinator names a static member `<group.instance.id>-<UUID>`, so with `static` it is read back
        from the member id (`static_instance_id`); the range forecast orders static members by it
        (runner/range_forecast.py)."""
        log.debug("describing group %s (DescribeGroups)", group_id)
        with warnings.catch_warnings():  # deprecated for the very call that aborts: see above
            warnings.simplefilter("ignore", DeprecationWarning)
            listed = self.admin.list_groups(group_id, timeout=15)
        found = [g for g in listed if g.id == group_id]
        if not found or found[0].error is not None or str(found[0].state).upper() == "DEAD":
            return self._described_members(group_id)
        group = found[0]
        members = [
            GroupMember(
                m.id,
                m.client_id,
                static_instance_id(m.id) if static else "",
                decode_assignment(m.assignment or b""),
                m.client_host or "",
            )
            for m in group.members
        ]
        members.sort(key=lambda m: m.sort_key)
        return str(group.state).upper(), members

    def _described_members(self, group_id: str) -> tuple[str, list[GroupMember]]:
        """group_members through describe_consumer_groups (KIP-848 groups: see group_members)."""
        log.debug("describing group %s (ConsumerGroupDescribe)", group_id)
        description = self.admin.describe_consumer_groups([group_id])[group_id].result(timeout=15)
        members = []
        for member in description.members:
            parts = member.assignment.topic_partitions if member.assignment else []
            members.append(
                GroupMember(
                    member.member_id,
                    member.client_id,
                    member.group_instance_id or "",
                    tuple(sorted((tp.topic, tp.partition) for tp in parts)),
                    member.host or "",
                )
            )
        members.sort(key=lambda m: m.sort_key)
        return str(description.state).rsplit(".", 1)[-1], members

    def set_group_offsets(self, group_id: str, offsets: list[TopicPartition]) -> None:
        """Set a (member-less) consumer group's committed offsets."""
        futures = self.admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group_id, offsets)])
        for future in futures.values():
            future.result(timeout=30)

    def purge(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Delete records below `offsets` (asynchronously: a failed purge is retried by the next one)."""
        if offsets:
            self.admin.delete_records([TopicPartition(t, p, o) for (t, p), o in offsets.items()])

    def delete_topics(self, names: list[str]) -> list[str]:
        existing = [n for n in names if n in self.admin.list_topics(timeout=15).topics]
        if not existing:
            return []
        for name, future in self.admin.delete_topics(existing, operation_timeout=30).items():
            try:
                future.result(timeout=60)
            except Exception as exc:
                raise TopicError(f"cannot delete topic '{name}': {exc}") from exc
        return existing

    def reset_to_earliest(self, group_id: str, topics: list[str]) -> dict[str, int]:
        """Commit the earliest offsets of `topics` for `group_id` (which must have no active members)."""
        state, members = self.group_members(group_id)
        if members:
            raise TopicError(
                f"group '{group_id}' still has {len(members)} active member(s) ({state}): stop the "
                "application before resetting it"
            )
        settings = {**self._settings, "group.id": group_id, "enable.auto.commit": False}
        consumer = Consumer(with_logger(settings))
        try:
            metadata = consumer.list_topics(timeout=15)
            offsets = []
            for topic in topics:
                found = metadata.topics.get(topic)
                if found is None or found.error is not None:
                    continue
                for partition in found.partitions:
                    low, _high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
                    offsets.append(TopicPartition(topic, partition, low))
            if offsets:
                consumer.commit(offsets=offsets, asynchronous=False)
            return {t: sum(1 for o in offsets if o.topic == t) for t in topics}
        finally:
            consumer.close()
