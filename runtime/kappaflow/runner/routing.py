"""From consumed messages to task input: confluent-kafka `Message`s become queued tuples per partition.

Two implementations with the same runs, records and errors: `raw_records_by_partition`, the reference,
which reads each message through its accessors, and the native core's `MessageRuns`, which reads the
fields from confluent-kafka's C struct (runtime/native/src/messages.rs says why that is sound) and is
used only where the core knows the installed confluent-kafka's layout (`message_reader`). Restoring reads
changelog batches the same way (`changelog_messages`)."""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import confluent_kafka
from confluent_kafka import KafkaError

from kappaflow.api.errors import StreamsError
from kappaflow.api.record import Headers
from kappaflow.tasks.drain import RawTuple
from kappaflow.tasks.native import ChangelogMessages, MessageRuns, NativeCore

log = logging.getLogger(__name__)


class ConsumerFailedError(StreamsError):
    """The group consumer failed fatally (e.g. a static member fenced by another with its
    group.instance.id after a broker restart): it must be replaced, and the group rejoined."""


def raw_records_by_partition(
    messages: list[Any], on_error: Callable[[KafkaError], None] | None = None
) -> Iterator[tuple[tuple[str, int], list[RawTuple]]]:
    """Yield `((topic, partition), records)` for each run of one partition in a `consume()` batch.

    librdkafka hands a batch over in runs of one partition, so grouping by runs keeps per-partition order
    and costs one queue lookup per run instead of one per message. Each record is a plain
    `(offset, timestamp, key, value, headers)` tuple (`RawTuple`). Consumer errors are logged and
    skipped, fatal ones raised as ConsumerFailedError (`on_error`, when given, gets them instead)."""
    error = on_error or consumer_error
    current: tuple[str, int] = ("", -1)
    batch: list[RawTuple] = []
    append = batch.append
    for msg in messages:
        err = msg.error()
        if err is not None:
            error(err)
            continue
        tp = (msg.topic(), msg.partition())
        if tp != current:
            if batch:
                yield current, batch
            current, batch = tp, []
            append = batch.append
        headers = msg.headers()
        append((msg.offset(), msg.timestamp()[1], msg.key(), msg.value(), Headers(headers or ())))
    if batch:
        yield current, batch


def consumer_error(err: KafkaError) -> None:
    """A consumed message that carries an error: a fatal one fails the consumer, the rest are logged
    (librdkafka retries them) and the message skipped."""
    if err.fatal() or err.code() == KafkaError._FATAL:
        raise ConsumerFailedError(f"the consumer failed fatally: {err}")
    log.warning("consumer error: %s", err)


# librdkafka's words for an OffsetFetch that failed as a whole (the assignment's committed offsets)
_OFFSETS_NOT_FETCHED = "Failed to fetch committed offsets"
# the request-level errors it only refreshes the coordinator on, without asking again
_COORDINATOR_MOVED = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE)


def offsets_not_fetched(err: KafkaError) -> bool:
    """Whether `err` says the committed offsets of newly assigned partitions were never fetched because
    the group coordinator had moved. librdkafka (2.x, confluentinc/librdkafka#5586) then leaves those
    partitions waiting for offsets for good: it refreshes the coordinator but never asks again, so they
    are never fetched, and the tasks on them stay idle with their input piling up. The stream thread
    assigns them again (`RebalanceHandler.refetch_offsets`), which asks the new coordinator."""
    return err.code() in _COORDINATOR_MOVED and _OFFSETS_NOT_FETCHED in err.str()


Runs = Iterable[tuple[tuple[str, int], list[RawTuple]]]
Router = Callable[[list[Any]], Runs]


def router(core: NativeCore | None, on_error: Callable[[KafkaError], None] = consumer_error) -> Router:
    """`raw_records_by_partition`, or its native twin when `core` is given and knows the installed
    confluent-kafka's `Message` layout; both hand a consumed error to `on_error`."""
    reader = message_reader(core, on_error) if core is not None else None
    if reader is None:
        if on_error is consumer_error:
            return raw_records_by_partition
        return functools.partial(raw_records_by_partition, on_error=on_error)

    def native_runs(messages: list[Any]) -> Iterator[tuple[tuple[str, int], list[RawTuple]]]:
        runs, error = reader(messages)
        yield from runs  # the runs the generator would have yielded before raising
        if error is not None:
            raise error

    return native_runs


def message_reader(
    core: NativeCore, on_error: Callable[[KafkaError], None] = consumer_error
) -> MessageRuns | None:
    """The core's reader of consumed batches (built once per stream thread), or None, logged: when the
    core does not know this confluent-kafka's `Message` layout (its version, name, size, or a probe
    message reading back otherwise), or the interpreter runs without the GIL (confluent-kafka then
    guards each field with a per-object lock the struct read would bypass). `on_error` gets each
    message's error (the message is skipped; what it raises ends the batch and is returned)."""
    version = _struct_readable("consumed messages")
    if version is None:
        return None
    try:
        return core.MessageRuns(confluent_kafka.Message, version, Headers, on_error)
    except ValueError as exc:
        log.warning("consumed messages read through their accessors: %s", exc)
        return None


def changelog_messages(core: NativeCore | None) -> ChangelogMessages | None:
    """The core's splitter and writer of consumed changelog batches (one per restore consumer), or None
    (the changelog reader's and the store's Python loops), on the same conditions as `message_reader`."""
    if core is None:
        return None
    version = _struct_readable("restored changelog records")
    if version is None:
        return None
    try:
        return core.ChangelogMessages(confluent_kafka.Message, version)
    except ValueError as exc:
        log.warning("restored changelog records read through their accessors: %s", exc)
        return None


def _struct_readable(what: str) -> str | None:
    """The installed confluent-kafka's version, or None (logged) when the interpreter runs without the
    GIL and no message may be read from its struct."""
    gil_enabled: Callable[[], bool] = getattr(sys, "_is_gil_enabled", lambda: True)
    if not gil_enabled():
        log.warning("%s read through their accessors: the interpreter runs without the GIL", what)
        return None
    found = confluent_kafka.version()  # "2.16.1" in 2.16; older releases returned (version, int)
    return str(found[0] if isinstance(found, tuple) else found)
