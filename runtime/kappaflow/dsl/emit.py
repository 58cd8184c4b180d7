"""`EmitStrategy` for windowed aggregations (KIP-825) and the emit-on-window-close bookkeeping.

`on_window_update()` (the default) forwards every update of a window, through the cache when there is
one. `on_window_close()` forwards nothing while a window is open; after each record, windows that closed
since the last emission (`window end <= stream time - grace`) are read back from the store and forwarded
once, oldest window first and, within a window start, in key-byte order (Java reads them from a
time-ordered store), each stamped with its aggregate's timestamp and carrying no old value. Session
windows close at `end < stream time - grace - gap` and go out stamped with their end.

Kafka Streams throttles that read to once per `emit interval` of wall-clock time (1 s; the
TopologyTestDriver sets it to 0). kappaflow emits after every record, as the test driver does; the
last emitted close time is kept in memory, so after a restart windows still in the store that closed
before it may be emitted again (Java keeps it in the committed offsets' metadata).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from kappaflow.api.processor import ProcessorContext
from kappaflow.api.record import Record
from kappaflow.api.windows import Windowed
from kappaflow.dsl.change import Change


@dataclass(frozen=True)
class EmitStrategy:
    """When a windowed aggregation forwards results: on every update, or once when the window closes."""

    on_close: bool = False

    @staticmethod
    def on_window_close() -> EmitStrategy:
        return EmitStrategy(on_close=True)

    @staticmethod
    def on_window_update() -> EmitStrategy:
        return EmitStrategy(on_close=False)


class WindowCloseEmitter:
    """Tracks the last close time emitted and forwards the windows that closed since.

    `lower_after(last)` and `upper(close)` give the range of window *starts* to emit, per window kind
    (time windows: `(max(0, last - size) + 1, close - size)`; sliding windows, whose ends are inclusive:
    `(max(0, last - difference), close - difference - 1)`)."""

    def __init__(self, lower_after: Callable[[int], int], upper: Callable[[int], int]) -> None:
        self.lower_after = lower_after
        self.upper = upper
        self.last_emitted_close = -1

    def due(self, close_time: int) -> tuple[int, int] | None:
        """The window-start range to emit now, if any (a pure decision)."""
        if self.last_emitted_close != -1 and self.last_emitted_close >= close_time:
            return None
        upper = self.upper(close_time)
        if upper < 0:
            return None
        lower = 0 if self.last_emitted_close == -1 else self.lower_after(self.last_emitted_close)
        return lower, upper

    def emit(self, store: Any, context: ProcessorContext, record: Record[Any, Any], close_time: int) -> None:
        due = self.due(close_time)
        if due is None:
            return
        for windowed, aggregate, timestamp in self.closed(store, *due):
            context.forward(Record(windowed, Change(aggregate, None), timestamp, record.headers))
        self.last_emitted_close = close_time

    def closed(self, store: Any, lower: int, upper: int) -> list[tuple[Windowed[Any], Any, int]]:
        """The windows starting in [lower, upper] with their aggregates and result times, in Java's order."""
        key_serde = store.key_serde
        closed = sorted(
            store.fetch_all(lower, upper),
            key=lambda item: (item[0].window.start, key_serde.serialize("", item[0].key)),
        )
        return [(windowed, aggregate.value, aggregate.timestamp) for windowed, aggregate in closed]


class SessionCloseEmitter(WindowCloseEmitter):
    """Session windows: the range is of session *ends*, inclusive, `[max(0, last), close - 1]`; a session
    goes out stamped with its end, by end time, then key bytes, then start (Java reads a time-ordered
    session store). Sessions closed but not yet purged are found, as Java finds them in a live segment."""

    def __init__(self) -> None:
        super().__init__(lambda last: max(0, last), lambda close: close - 1)

    def closed(self, store: Any, lower: int, upper: int) -> list[tuple[Windowed[Any], Any, int]]:
        return [
            (session, aggregate, session.window.end)
            for session, aggregate in store.find_sessions_ending(lower, upper)
        ]


def time_window_emitter(size_ms: int) -> WindowCloseEmitter:
    return WindowCloseEmitter(lambda last: max(0, last - size_ms) + 1, lambda close: close - size_ms)


def sliding_window_emitter(difference_ms: int) -> WindowCloseEmitter:
    return WindowCloseEmitter(
        lambda last: max(0, last - difference_ms), lambda close: close - difference_ms - 1
    )


class WindowEmitMixin:
    """For window aggregate processors: forward updates unless emitting on close, and emit the windows
    closed so far after a record. `emitter` is set by the DSL when the strategy is on_window_close."""

    emitter: WindowCloseEmitter | None = None
    forwarder: Any
    store: Any
    context: ProcessorContext

    def _forward_update(self, record: Record[Any, Any]) -> None:
        if self.emitter is None:
            self.forwarder.maybe_forward(record)

    def _emit_closed(self, record: Record[Any, Any], close_time: int) -> None:
        if self.emitter is not None:
            self.emitter.emit(self.store, self.context, record, close_time)


P = TypeVar("P", bound=WindowEmitMixin)


def with_emitter(processor: P, emitter: Callable[[], WindowCloseEmitter] | None) -> P:
    if emitter is not None:
        processor.emitter = emitter()
    return processor
