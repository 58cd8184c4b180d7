"""A task's per-record loop: one input partition's queued records through the source's deserializers
into its processors.

Everything a record passes through is resolved once per batch into a `DrainPlan`: the serdes (UTF-8
strings decoded inline), the timestamp rule, the one callable the source hands records to (a fused stage,
a child's `handle`, or the source's `forward`) and the task's failure paths. Two loops run a plan with the
same steps and results: `drain_python` here, the reference, and `drain` of kappaflow's native core
(`kappaflow.tasks.native`), the interpreter's per-record work done in Rust. Neither raises for what
happens to a record: the error that ends the loop comes back after the progress the task must keep (how
many were consumed, the last offset, partition time, how many were processed), so the task records it
either way.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from kappaflow.api.record import Headers, Record
from kappaflow.state.api import RecordContext
from kappaflow.tasks.context import ProcessorContextImpl
from kappaflow.tasks.nodes import ProcessorNode


class RawRecord(NamedTuple):
    """A record as consumed: bytes plus position, with names for the places that read it by name."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers


RawTuple = tuple[int, int, bytes | None, bytes | None, Headers]
"""What a task queues: `(offset, timestamp, key, value, headers)`, a RawRecord or the plain tuple the
runner's routing builds per consumed message (a tuple costs a fraction of a constructor call, and the
loops read both by position)."""

Drained = tuple[int, int, int, int, BaseException | None]
"""`(consumed, last offset, partition time, processed, the error that ended the loop or None)`."""


@dataclass(slots=True)
class DrainPlan:
    """One input partition's loop, resolved: what each record is decoded with, where it goes, and the
    task's answers when it fails. Built by `StreamTask` once its processors are fused, kept while it runs."""

    topic: str
    partition: int
    key_utf8: bool  # decode the key inline (`bytes.decode()`) instead of calling the deserializer
    value_utf8: bool
    key_deserializer: Callable[[str, bytes | None], Any]
    value_deserializer: Callable[[str, bytes | None], Any]
    custom_extractor: bool  # a timestamp extractor other than the record's own timestamp
    extract_timestamp: Callable[[RawTuple, Any, Any, int], int]  # (raw, key, value, partition time)
    deserialization_failed: Callable[[Exception, bool, RawTuple], None]  # (error, key failed, raw)
    registry_unavailable: type[BaseException]  # not a record's fault: ends the loop, no handler
    processing_failed: Callable[[Exception, RawTuple], None]  # the handler's turn (raises to stop)
    passed_through: tuple[type[BaseException], ...]  # processing errors that end the loop unhandled
    context: ProcessorContextImpl
    record_context: type[RecordContext]
    node: ProcessorNode  # current while a record runs
    call: Callable[..., None]  # (key, value, timestamp, headers), or (Record) when record_type is set
    record_type: type[Record[Any, Any]] | None
    schedules: list[Any]  # the stream-time punctuations: checked after every processed record
    punctuate: Callable[[int], object]  # (stream time)


_SKIPPED: Any = object()  # a record the handlers or the extractor dropped: consumed, not processed


def drain_python(
    queue: deque[RawTuple], limit: int, plan: DrainPlan, partition_time: int, stream_time: int
) -> Drained:
    """Process up to `limit` records from the head of `queue`; see the module docstring.

    The per-record hot path: everything the loop needs is a local."""
    topic, partition, context = plan.topic, plan.partition, plan.context
    key_deserializer, value_deserializer = plan.key_deserializer, plan.value_deserializer
    key_utf8, value_utf8, custom_extractor = plan.key_utf8, plan.value_utf8, plan.custom_extractor
    node, call, record_type, record_context = plan.node, plan.call, plan.record_type, plan.record_context
    registry_unavailable, passed_through = plan.registry_unavailable, plan.passed_through
    schedules = plan.schedules
    count = processed = 0
    last = -1
    try:
        while queue and count < limit:
            raw = queue[0]
            offset, timestamp, raw_key, raw_value, headers = raw
            key_failed = True
            try:
                key = (
                    raw_key.decode() if key_utf8 and raw_key is not None else key_deserializer(topic, raw_key)
                )
                key_failed = False
                if value_utf8 and raw_value is not None:
                    value = raw_value.decode()
                else:
                    value = value_deserializer(topic, raw_value)
            except registry_unavailable:
                raise
            except Exception as exc:
                plan.deserialization_failed(exc, key_failed, raw)
                key = value = _SKIPPED
            if key is not _SKIPPED and (timestamp < 0 or custom_extractor):
                timestamp = plan.extract_timestamp(raw, key, value, partition_time)
                if timestamp < 0:
                    key = _SKIPPED
            if key is not _SKIPPED:
                if timestamp > partition_time:
                    partition_time = timestamp
                if timestamp > stream_time:
                    stream_time = context.stream_time = timestamp
                context.current = record_context(timestamp, topic, partition, offset, headers)
                context.current_node = node
                try:
                    if record_type is None:
                        call(key, value, timestamp, headers)
                    else:
                        call(record_type(key, value, timestamp, headers))
                except passed_through:
                    raise
                except Exception as exc:
                    plan.processing_failed(exc, raw)
                finally:
                    context.current_node = None
                    context.failed_node = None
                processed += 1
                if schedules:
                    plan.punctuate(stream_time)
            queue.popleft()
            last = offset
            count += 1
    except BaseException as exc:  # handed back with the progress (see the module docstring)
        return count, last, partition_time, processed, exc
    return count, last, partition_time, processed, None
