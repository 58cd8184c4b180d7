"""The test driver's executor: asynchronous calls wait until the test completes them, in its order.

A unit test of an asynchronous topology must not depend on how fast calls are or in which order an
event loop happens to finish them. So in `TopologyTestDriver` a call only starts when the test (or the
driver's automatic mode, right after the record that made it) says so, and runs to its end then, on a
private event loop in the caller's thread, with the operation's timeout and retries (`attempt_call`;
the backoff between attempts is not slept: the driver has no wall clock to wait on).
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any

from kappaflow.tasks.async_executor import CallOutcome, CallSpec, Cancel, Done, attempt_call


@dataclass(eq=False)
class PendingAsyncCall:
    """A call the driver holds: the operation (its node's name) and the arguments it will be given."""

    id: int
    operation: str
    args: tuple[Any, ...]
    spec: CallSpec = field(repr=False)
    done: Done = field(repr=False)


async def _no_backoff(_: float) -> None:
    return None


class ControlledExecutor:
    """Holds calls in submission order until `run(call)`; see the module docstring."""

    def __init__(self) -> None:
        self.pending: list[PendingAsyncCall] = []
        self._ids = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None

    def submit(self, spec: CallSpec, args: tuple[Any, ...], done: Done) -> Cancel:
        call = PendingAsyncCall(next(self._ids), spec.operation, args, spec, done)
        self.pending.append(call)

        def cancel() -> None:
            if call in self.pending:
                self.pending.remove(call)

        return cancel

    def run(self, call: PendingAsyncCall) -> None:
        """Run `call` to its end now and report its outcome."""
        if call not in self.pending:
            raise ValueError(f"call {call.id} of '{call.operation}' is not pending (completed or cancelled)")
        self.pending.remove(call)
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        try:
            result = self._loop.run_until_complete(attempt_call(call.spec, call.args, None, _no_backoff))
        except Exception as exc:
            call.done(CallOutcome(None, exc))
        else:
            call.done(CallOutcome(result))

    def wait_for_completion(self, timeout_s: float) -> bool:
        return False  # nothing completes unless the test runs it

    def close(self) -> None:
        self.pending.clear()
        if self._loop is not None:
            self._loop.close()
            self._loop = None
