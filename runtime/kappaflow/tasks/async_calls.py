"""`TaskAsyncCalls`: one task's asynchronous nodes, their completed calls and what the task asks of them.

Calls complete on the executor's thread; nothing of the topology runs there. A completion is queued here
(a deque append, safe across threads) and emitted when the task's driver - the stream thread, the test
driver, a Spark partition - calls `deliver()`, between records, with the record's own context restored.
So a result never interleaves with a record, a punctuation or a commit, and a task that was closed
(revoked, or redone after a failure) drops whatever completes later: it never emits a late result.

The task asks three questions of it: how many more records its nodes can accept (`free_slots`: the drain
stops, and the runner pauses the task's partitions, at zero), up to which offset its input may be
committed (`watermark`), and whether anything is still held (`pending`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from kappaflow.state.api import RecordContext
from kappaflow.tasks.async_executor import AsyncExecutor, CallOutcome
from kappaflow.tasks.async_window import Source

FailureReporter = Callable[[Exception, RecordContext, bytes | None, bytes | None, str], None]
"""(error, the input's context, its key and value bytes, the node) -> the task's processing handler."""


class AsyncNode(Protocol):
    """What an asynchronous processor offers its task (kappaflow.dsl.async_processors)."""

    def completed(self, seq: int, outcome: CallOutcome) -> None:
        """Emit what the completion of `seq` releases (on the task's thread)."""
        ...

    def free_slots(self) -> int: ...

    def watermark(self, source: Source) -> int | None: ...

    def accepted(self) -> int: ...

    def cancel_all(self) -> None:
        """Cancel the running calls and forget every record held."""
        ...


class TaskAsyncCalls:
    """The asynchronous nodes of one task (see the module docstring). The executor is made on first use
    by `executor_factory`, so a task without such nodes starts no thread. A failed call, or an error
    downstream of its result, goes to `report_failure`: the task's processing exception handler."""

    def __init__(
        self, executor_factory: Callable[[], AsyncExecutor], report_failure: FailureReporter
    ) -> None:
        self._executor_factory = executor_factory
        self.report_failure = report_failure
        self._executor: AsyncExecutor | None = None
        self.nodes: list[AsyncNode] = []
        self._completed: deque[tuple[AsyncNode, int, CallOutcome]] = deque()
        self.closed = False

    @property
    def executor(self) -> AsyncExecutor:
        if self._executor is None:
            self._executor = self._executor_factory()
        return self._executor

    def register(self, node: AsyncNode) -> None:
        if node not in self.nodes:
            self.nodes.append(node)

    def on_done(self, node: AsyncNode, seq: int) -> Callable[[CallOutcome], None]:
        """The callback the executor reports `seq`'s outcome to (from its thread)."""

        def done(outcome: CallOutcome) -> None:
            if not self.closed:
                self._completed.append((node, seq, outcome))

        return done

    def has_completed(self) -> bool:
        return bool(self._completed)

    def deliver(self) -> int:
        """Emit what the completions so far release; return how many completions were handled. An
        error the processing handler does not absorb propagates (the rest stay queued)."""
        handled = 0
        completed = self._completed
        while completed and not self.closed:
            node, seq, outcome = completed.popleft()
            handled += 1
            node.completed(seq, outcome)
        return handled

    def wait_for_completion(self, timeout_s: float) -> None:
        """Block up to `timeout_s` until a call completes (at once if one has)."""
        if not self._completed and self.nodes:
            self.executor.wait_for_completion(timeout_s)

    def free_slots(self) -> int:
        """How many more records every node can accept (a large number without nodes)."""
        return min((n.free_slots() for n in self.nodes), default=1 << 62)

    def saturated(self) -> bool:
        return bool(self.nodes) and self.free_slots() == 0

    def pending(self) -> int:
        """Records accepted by the nodes and not emitted yet."""
        return sum(n.accepted() for n in self.nodes)

    def watermark(self, source: Source) -> int | None:
        marks = [m for m in (n.watermark(source) for n in self.nodes) if m is not None]
        return min(marks) if marks else None

    def finish(self, timeout_s: float, before_deliver: Callable[[], Any] = lambda: None) -> bool:
        """Wait up to `timeout_s` for every held record to complete, emitting results as they do (a clean
        shutdown); True when nothing is held any more. `before_deliver` runs before each delivery (the
        runner begins its transaction there)."""
        deadline = time.monotonic() + timeout_s
        while self.pending() and not self.closed:
            if self._completed:
                before_deliver()
                self.deliver()
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.executor.wait_for_completion(min(left, 0.05))
        return not self.pending()

    def close(self) -> None:
        """The task closes: cancel the running calls, drop the held records and any later completion."""
        self.closed = True
        for node in self.nodes:
            node.cancel_all()
        self._completed.clear()
