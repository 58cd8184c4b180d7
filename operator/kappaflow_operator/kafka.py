"""The operator's Kafka I/O: internal topics (list, create, delete), consumer-group lag and static members.

Uses confluent_kafka's AdminClient, the same librdkafka the runtime uses, so security settings mean the
same thing in the operator and in the pods. Every call has a timeout: a reconcile pass must not hang on
an unreachable broker (kopf retries the handler instead).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec  # type: ignore[attr-defined]

from kappaflow_contract.topics import replicated_topic_config

from .topics import TopicSpec

TIMEOUT_S = 15.0
_LATEST = OffsetSpec.latest()  # type: ignore[no-untyped-call]
_EARLIEST = OffsetSpec.earliest()  # type: ignore[no-untyped-call]


class KafkaError(RuntimeError):
    """A Kafka admin operation failed (the message says which)."""


def client_config(
    bootstrap_servers: str, security_protocol: str = "PLAINTEXT", secrets: Mapping[str, str] | None = None
) -> dict[str, str]:
    """librdkafka config; `secrets` holds already-resolved credentials (`sasl.*`, PEM `ssl.*` contents).

    PEM material arrives as strings read from Secrets; librdkafka wants files, so they are written to
    private temporary files (0600) that live as long as the operator process.
    """
    conf = {"bootstrap.servers": bootstrap_servers, "security.protocol": security_protocol}
    for key, value in (secrets or {}).items():
        if key.startswith("ssl.") and key.endswith(".location"):
            fd, path = tempfile.mkstemp(prefix="kappaflow-", suffix=".pem")
            with os.fdopen(fd, "w") as fh:
                fh.write(value)
            conf[key] = path
        else:
            conf[key] = value
    return conf


class KafkaAdmin:
    def __init__(self, conf: Mapping[str, str]) -> None:
        self.conf = dict(conf)
        self.admin = AdminClient({**self.conf, "client.id": "kappaflow-operator"})

    def topic_partitions(self) -> dict[str, int]:
        """Every topic the broker has, with its partition count (one metadata request)."""
        try:
            metadata = self.admin.list_topics(timeout=TIMEOUT_S)
        except KafkaException as err:
            raise KafkaError(f"cannot list topics: {err}") from err
        return {
            name: len(topic.partitions)
            for name, topic in metadata.topics.items()
            if topic.error is None and topic.partitions
        }

    def create_topics(self, specs: Iterable[TopicSpec], replication_factor: int = -1) -> list[str]:
        """Create `specs`; a topic that already exists counts as created (another pass won the race)."""
        new = [
            NewTopic(
                s.name,
                num_partitions=s.partitions,
                replication_factor=replication_factor,
                config=replicated_topic_config(s.config, replication_factor),
            )
            for s in specs
        ]
        if not new:
            return []
        created: list[str] = []
        errors: list[str] = []
        for name, future in self.admin.create_topics(new, operation_timeout=TIMEOUT_S).items():
            try:
                future.result(timeout=TIMEOUT_S * 2)
                created.append(name)
            except KafkaException as err:
                if err.args and getattr(err.args[0], "name", lambda: "")() == "TOPIC_ALREADY_EXISTS":
                    created.append(name)
                else:
                    errors.append(f"{name}: {err}")
        if errors:
            raise KafkaError("cannot create topics: " + "; ".join(errors))
        return sorted(created)

    def topic_configs(self, names: Iterable[str]) -> dict[str, dict[str, str]]:
        """The dynamic/static config of each topic (for status and tests)."""
        from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]

        resources = [ConfigResource(ConfigResource.Type.TOPIC, n) for n in names]
        out: dict[str, dict[str, str]] = {}
        for res, future in self.admin.describe_configs(resources, request_timeout=TIMEOUT_S).items():
            entries = future.result(timeout=TIMEOUT_S * 2)
            out[res.name] = {k: str(v.value) for k, v in entries.items()}
        return out

    def delete_topics(self, names: Iterable[str]) -> list[str]:
        """Delete the topics that exist; missing ones are skipped. Returns the names deleted."""
        existing = self.topic_partitions()
        targets = sorted(n for n in names if n in existing)
        if not targets:
            return []
        errors: list[str] = []
        for name, future in self.admin.delete_topics(targets, operation_timeout=TIMEOUT_S).items():
            try:
                future.result(timeout=TIMEOUT_S * 2)
            except KafkaException as err:
                errors.append(f"{name}: {err}")
        if errors:
            raise KafkaError("cannot delete topics: " + "; ".join(errors))
        return targets

    def consumer_lag(self, group: str, topics: Iterable[str]) -> int:
        """Total lag of `group` over `topics`: end offset minus committed offset, summed.

        A partition with no committed offset counts from its log start, because the runtime starts a new
        group at the earliest offset: all of it is still to be processed.
        """
        existing = self.topic_partitions()
        partitions = [TopicPartition(t, p) for t in topics if t in existing for p in range(existing[t])]
        if not partitions:
            return 0
        try:
            committed = self._committed(group, partitions)
            ends = self._offsets(partitions, _LATEST)
            starts = self._offsets(partitions, _EARLIEST)
        except KafkaException as err:
            raise KafkaError(f"cannot measure lag of group {group}: {err}") from err
        lag = 0
        for key, end in ends.items():
            done = committed.get(key, -1)
            lag += max(0, end - (done if done >= 0 else starts.get(key, 0)))
        return lag

    def _committed(self, group: str, partitions: list[TopicPartition]) -> dict[tuple[str, int], int]:
        """The group's committed offsets, read with a consumer that never joins the group.

        Not AdminClient.list_consumer_group_offsets: with confluent-kafka 2.16.1 its response handler
        crashes the process (SIGSEGV in rd_kafka_cgrp_op from rd_kafka_handle_OffsetFetch, seen in the
        operator tests once the lag was read every pass); a consumer's committed() is the path the runtime
        uses and does not."""
        consumer = Consumer({**self.conf, "group.id": group, "enable.auto.commit": False})
        try:
            return {
                (tp.topic, tp.partition): int(tp.offset) for tp in consumer.committed(partitions, TIMEOUT_S)
            }
        finally:
            consumer.close()

    def group_members(self, group: str) -> int:
        """Members the broker still counts in `group` (0 for an empty or unknown group).

        Static members (group.instance.id) do not leave on shutdown; they stay until their session
        times out, and until then the broker refuses offset resets for the group.
        """
        try:
            result = self.admin.describe_consumer_groups([group], request_timeout=TIMEOUT_S)[group]
            return len(result.result(timeout=TIMEOUT_S * 2).members or [])
        except KafkaException as err:
            raise KafkaError(f"cannot describe group {group}: {err}") from err

    def static_members(self, group: str) -> list[str]:
        """The `group.instance.id`s of the group's static members (none for an empty or unknown group)."""
        try:
            result = self.admin.describe_consumer_groups([group], request_timeout=TIMEOUT_S)[group]
            members = result.result(timeout=TIMEOUT_S * 2).members or []
        except KafkaException as err:
            raise KafkaError(f"cannot describe group {group}: {err}") from err
        return sorted(m.group_instance_id for m in members if m.group_instance_id)

    def remove_static_members(self, group: str, instance_ids: list[str]) -> None:
        """Admin's `removeMembersFromConsumerGroup`: LeaveGroup by `group.instance.id` (members already
        gone count as removed). librdkafka's admin API has no such call, so this goes through the
        runtime's wire client, which `KafkaStreams.close(LEAVE_GROUP)` uses for the same request; it is
        imported here, on first use, because the runtime's package is heavy for the operator's start."""
        from kappaflow.clients.group_leave import GroupLeaveError, remove_static_members

        try:
            remove_static_members(self.conf, group, instance_ids, TIMEOUT_S)
        except GroupLeaveError as err:
            raise KafkaError(f"cannot remove {', '.join(instance_ids)} from group {group}: {err}") from err

    def _offsets(self, partitions: list[TopicPartition], spec: Any) -> dict[tuple[str, int], int]:
        futures = self.admin.list_offsets({tp: spec for tp in partitions}, request_timeout=TIMEOUT_S)
        return {
            (tp.topic, tp.partition): int(f.result(timeout=TIMEOUT_S * 2).offset) for tp, f in futures.items()
        }
