"""The processor behind `map_values_async`, `flat_map_values_async` and `process_values_async`.

`process` does not call the function: it accepts the record into the node's `InFlightWindow` (the pure
ordering and watermark bookkeeping, kappaflow.tasks.async_window) and hands every call the window lets
start to the task's executor. When a call completes, the task (`TaskAsyncCalls.deliver`, on its own
thread) gives the outcome back to `completed`, which emits what the window releases: each output is
forwarded with the input record's context (timestamp, headers, topic, partition, offset) restored, so
downstream nodes, sinks and the error handlers see the record as if it had been processed inline.

It defines no `fuse_native`: the native core's fused stages stop at it (a boundary,
kappaflow.tasks.fusion), and the stages after it are entered from `forward()` when results come back.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any

from kappaflow.api.async_calls import AsyncCallOptions
from kappaflow.api.errors import (
    ProcessingError,
    SchemaRegistryUnavailableError,
    StreamsError,
    TaskMigratedError,
)
from kappaflow.api.processor import ProcessorContext
from kappaflow.api.record import Record
from kappaflow.api.serdes import Serde
from kappaflow.state.api import RecordContext
from kappaflow.tasks.async_calls import TaskAsyncCalls
from kappaflow.tasks.async_executor import CallOutcome, CallSpec, is_coroutine_function
from kappaflow.tasks.async_window import NO_SOURCE, InFlight, InFlightWindow, Source
from kappaflow.tasks.context import ProcessorContextImpl

AnyRecord = Record[Any, Any]
KINDS = ("map_values", "flat_map_values", "process_values")
_PASSED_THROUGH = (TaskMigratedError, ProcessingError, SchemaRegistryUnavailableError)


def key_token(key: Any) -> Hashable:
    """What per-key ordering compares: the key itself, or its repr when it is not hashable."""
    try:
        hash(key)
    except TypeError:
        return ("unhashable", repr(key))
    return key  # type: ignore[no-any-return]


class AsyncValuesProcessor:
    """One asynchronous value operation in one task (see the module docstring). `kind` says how a
    result becomes outputs: `map_values` one value, `flat_map_values` an iterable of values,
    `process_values` a Record, an iterable of Records or None (the key must stay the input's)."""

    def __init__(
        self,
        kind: str,
        function: Callable[..., Any],
        with_key: bool,
        options: AsyncCallOptions,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        self.kind = kind
        self.function = function
        self.with_key = with_key
        self.options = options
        self._key_serde = key_serde
        self._value_serde = value_serde

    def init(self, context: ProcessorContext) -> None:
        calls = getattr(context, "async_calls", None)
        if not isinstance(context, ProcessorContextImpl) or context.current_node is None or calls is None:
            raise StreamsError(f"{self.kind}_async runs only in a stream task (not in a global store)")
        self.context = context
        self._node = context.current_node
        self._calls: TaskAsyncCalls = calls
        self._calls.register(self)
        config = context.app_config
        self._window = InFlightWindow(
            self.options.ordering, self.options.max_in_flight, release_in_offset_order=config.exactly_once
        )
        self._spec = CallSpec(
            self.function, is_coroutine_function(self.function), self.options, self._node.name
        )
        key_default, value_default = config.serde("default.key.serde"), config.serde("default.value.serde")
        self._raw_key_serde = self._key_serde.with_default(key_default) if self._key_serde else key_default
        self._raw_value_serde = (
            self._value_serde.with_default(value_default) if self._value_serde else value_default
        )

    # ----------------------------------------------------------------- accepting
    def process(self, record: AnyRecord) -> None:
        current = self.context.current
        source: Source = (current.topic, current.partition) if current.topic else NO_SOURCE
        self._window.admit(source, current.offset, key_token(record.key), (record, current))
        self._start()

    def _start(self) -> None:
        executor = self._calls.executor
        for entry in self._window.startable():
            record: AnyRecord = entry.payload[0]
            if self.kind == "process_values":
                args: tuple[Any, ...] = (record,)
            elif self.with_key:
                args = (record.key, record.value)
            else:
                args = (record.value,)
            entry.cancel = executor.submit(self._spec, args, self._calls.on_done(self, entry.seq))

    # ----------------------------------------------------------------- completing (the task's thread)
    def completed(self, seq: int, outcome: CallOutcome) -> None:
        if not self._window.complete(seq, outcome):
            return  # cancelled meanwhile
        self._start()
        for entry in self._window.take_released():
            self._emit(entry)

    def _emit(self, entry: InFlight) -> None:
        record: AnyRecord = entry.payload[0]
        record_context: RecordContext = entry.payload[1]
        outcome: CallOutcome = entry.outcome
        context = self.context
        context.current = record_context
        context.current_node = self._node
        try:
            if outcome.error is not None:
                raise outcome.error
            for out in self._outputs(record, outcome.result):
                context.forward(out)
        except _PASSED_THROUGH:
            raise
        except Exception as exc:
            node = context.failed_node or self._node.name
            key, value = self._raw(record_context.topic, record)
            self._calls.report_failure(exc, record_context, key, value, node)
        finally:
            context.current_node = None
            context.failed_node = None

    def _outputs(self, record: AnyRecord, result: Any) -> Iterable[AnyRecord]:
        key, timestamp, headers = record.key, record.timestamp, record.headers
        if self.kind == "map_values":
            return (Record(key, result, timestamp, headers),)
        if self.kind == "flat_map_values":
            return [Record(key, value, timestamp, headers) for value in (result or ())]
        if result is None:
            return ()
        outputs = [result] if isinstance(result, Record) else list(result)
        for out in outputs:
            if not isinstance(out, Record):
                raise StreamsError(
                    "process_values_async: the function must return a Record, Records or None, "
                    f"got {out!r:.80}"
                )
            if out.key != key:
                raise StreamsError(
                    f"process_values_async: an output must keep the input's key {key!r:.40}, "
                    f"got {out.key!r:.40}"
                )
        return outputs

    def _raw(self, topic: str, record: AnyRecord) -> tuple[bytes | None, bytes | None]:
        """The input's key and value as bytes for the dead-letter topic: serialized with the stream's
        serdes (the bytes consumed when the node reads a source directly); None where that fails."""
        return _serialized(self._raw_key_serde, topic, record.key), _serialized(
            self._raw_value_serde, topic, record.value
        )

    # ----------------------------------------------------------------- the task's questions
    def free_slots(self) -> int:
        return self._window.free_slots()

    def accepted(self) -> int:
        return self._window.accepted

    def watermark(self, source: Source) -> int | None:
        return self._window.watermark(source)

    def cancel_all(self) -> None:
        for entry in self._window.clear():
            if entry.cancel is not None:
                entry.cancel()

    def close(self) -> None:
        self.cancel_all()


def _serialized(serde: Serde[Any] | None, topic: str, data: Any) -> bytes | None:
    if serde is None or data is None:
        return None
    try:
        return serde.serialize(topic, data)
    except Exception:
        return None
