"""The exceptions kappaflow raises, and the error-handler responses users configure.

Each error carries enough context (topic, partition, offset, node, store) to find the record or the
configuration entry at fault without a debugger.
"""

from __future__ import annotations

from enum import Enum


class StreamsError(Exception):
    """Base class of every kappaflow error."""


class ConfigError(StreamsError):
    """A configuration value is missing or invalid; the message names the key."""


class TopologyError(StreamsError):
    """The topology is malformed: unknown parent, duplicate name, missing store, bad co-partitioning."""


class SerializationError(StreamsError):
    """A key or value could not be serialized (e.g. a sink received a type its serde cannot write)."""


class DeserializationError(StreamsError):
    """A record's bytes could not be deserialized; the message names topic, partition and offset."""

    def __init__(self, message: str, *, topic: str = "", partition: int = -1, offset: int = -1) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.offset = offset


class SchemaRegistryUnavailableError(StreamsError):
    """A registry serde could not reach its Schema Registry (connection failure, HTTP 5xx, auth refused).

    Not the record's fault, so it is not a DeserializationError: the deserialization handler would skip
    good records to the dead-letter topic for as long as the registry is down. It fails the stream thread
    instead, where the uncaught-exception handler decides (REPLACE_THREAD retries)."""


class ProcessingError(StreamsError):
    """A user function raised while processing a record; wraps the cause with the record's position."""

    def __init__(
        self, message: str, *, node: str = "", topic: str = "", partition: int = -1, offset: int = -1
    ) -> None:
        super().__init__(message)
        self.node = node
        self.topic = topic
        self.partition = partition
        self.offset = offset


class InvalidStateStoreError(StreamsError):
    """A store is closed, unknown, or not accessible from this processor."""


class InvalidStateStorePartitionError(InvalidStateStoreError):
    """The store exists but its partition is restoring or migrating: retry later (the key's owner moves)."""


class TaskMigratedError(StreamsError):
    """This instance no longer owns a task (fenced or rebalanced); the task must be closed and rejoined."""


class ProducerFencedError(TaskMigratedError):
    """The producer was fenced (a newer instance took over its transactional.id) or failed fatally.

    Nothing it has not committed will reach readers: the producer is replaced and the tasks redo their
    work from the committed offsets."""


class TaskCorruptedError(TaskMigratedError):
    """A task's output since the last commit cannot be trusted (a delivery the production handler asked to
    RETRY, KIP-1065; Java's TaskCorruptedException): its tasks are closed dirty and redo their work from
    the committed offsets, which sends the failed records again."""


class TransactionAbortedError(StreamsError):
    """The open transaction hit an abortable error (a failed delivery, a timed-out commit): it is aborted
    and the tasks redo their work from the committed offsets, under the same producer."""


class HandlerResponse(Enum):
    """What an error handler tells the runtime to do with the failing record."""

    CONTINUE = "continue"
    FAIL = "fail"
    RETRY = "retry"
    """Production handler only (KIP-1065): a retriable delivery failure (a timeout, too few in-sync
    replicas, a leader moving) is retried by redoing the work since the last commit; a non-retriable
    one fails as with FAIL."""
