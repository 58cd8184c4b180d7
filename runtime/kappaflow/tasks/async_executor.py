"""Where the calls of the asynchronous DSL operations run, and how one call is attempted.

A task never awaits anything: its node hands a call to an `AsyncExecutor` and goes on with the next
record; the executor reports the outcome through a callback, from its own thread, and the task emits the
result later on the stream thread (`kappaflow.tasks.async_calls`). Two executors implement the protocol:
- `LoopThreadExecutor`, the runtime's and Spark's: one asyncio event loop on a daemon thread runs the
  `async def` functions; a blocking (plain) function runs in a bounded thread pool, awaited from the loop.
- the test driver's, which holds calls until the test completes them, in the order it chooses
  (`kappaflow.testing`), running each on a private loop in the caller's thread: deterministic.

`attempt_call` is the one place that applies the timeout, the retries and the backoff, for both.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from kappaflow.api.async_calls import AsyncCallOptions

log = logging.getLogger(__name__)

BLOCKING_THREADS = 64
"""The thread pool for blocking (non-`async def`) functions: calls beyond it wait for a thread."""


@dataclass(frozen=True, slots=True)
class CallSpec:
    """One operation's function and how to call it (shared by all its calls)."""

    function: Callable[..., Any]
    coroutine: bool  # an `async def` (awaited on the loop), else run in the blocking pool
    options: AsyncCallOptions
    operation: str  # the node's name, for error messages


def is_coroutine_function(function: Callable[..., Any]) -> bool:
    """Whether `function` is an `async def` (also through functools.partial or a callable object)."""
    target: Any = function
    while isinstance(target, functools.partial):
        target = target.func
    if inspect.iscoroutinefunction(target):
        return True
    call = getattr(target, "__call__", None)  # noqa: B004 - an object whose __call__ is async
    return call is not None and inspect.iscoroutinefunction(call)


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """How a call ended: its result, or the error of its last attempt."""

    result: Any = None
    error: BaseException | None = None


Done = Callable[[CallOutcome], None]
Cancel = Callable[[], object]


class AsyncExecutor(Protocol):
    """Runs calls; reports each outcome once through `done` (from any thread), unless cancelled."""

    def submit(self, spec: CallSpec, args: tuple[Any, ...], done: Done) -> Cancel: ...

    def wait_for_completion(self, timeout_s: float) -> bool:
        """Block up to `timeout_s` until some call completed since the last wait; True if one did."""
        ...


async def attempt_call(
    spec: CallSpec,
    args: tuple[Any, ...],
    run_blocking: Callable[[Callable[..., Any], tuple[Any, ...]], Awaitable[Any]] | None,
    sleep: Callable[[float], Awaitable[None]],
) -> Any:
    """Call `spec.function(*args)` with the timeout per attempt, retrying with doubling backoff; the
    last attempt's error is raised (a timeout as TimeoutError naming the operation and the limit).
    `run_blocking` runs a plain function off the loop (None: called inline, the driver's way)."""
    options = spec.options
    timeout_s = options.timeout_ms / 1000.0
    attempt = 0
    while True:
        try:
            if spec.coroutine:  # asyncio.timeout, not wait_for: no second task per call
                async with asyncio.timeout(timeout_s):
                    return await spec.function(*args)
            if run_blocking is None:
                return spec.function(*args)
            async with asyncio.timeout(timeout_s):
                return await run_blocking(spec.function, args)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error: Exception = exc
            if isinstance(exc, TimeoutError) and not str(exc):
                error = TimeoutError(
                    f"async call of '{spec.operation}' timed out after {options.timeout_ms} ms "
                    f"(attempt {attempt + 1} of {options.retries + 1})"
                )
            if attempt >= options.retries:
                if error is not exc:
                    raise error from exc
                raise
            log.debug("'%s': attempt %d failed (%s), retrying", spec.operation, attempt + 1, error)
            await sleep(options.backoff_ms / 1000.0 * (2**attempt))
            attempt += 1


class _Submitted:
    """One call handed to the loop: cancelled before it starts, or its task cancelled on the loop."""

    __slots__ = ("args", "cancelled", "done", "spec", "task")

    def __init__(self, spec: CallSpec, args: tuple[Any, ...], done: Done) -> None:
        self.spec, self.args, self.done = spec, args, done
        self.cancelled = False
        self.task: asyncio.Task[Any] | None = None


class LoopThreadExecutor:
    """An asyncio event loop on a daemon thread (started at the first call) plus a bounded thread pool
    for blocking functions: the runtime's executor, one per stream thread.

    Calls are handed over in batches: `submit` appends to a list and wakes the loop once per batch (one
    `call_soon_threadsafe`, one write to the loop's wake-up pipe), not once per call - at max_in_flight
    512 that per-call hand-over was a measurable share of the stream thread's time."""

    def __init__(self, blocking_threads: int = BLOCKING_THREADS, name: str = "kappaflow-async") -> None:
        self._name = name
        self._blocking_threads = blocking_threads
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._completed = threading.Event()
        self._submitted: list[_Submitted] = []

    def _started_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name=self._name, daemon=True).start()
            self._pool = ThreadPoolExecutor(self._blocking_threads, f"{self._name}-blocking")
            self._loop = loop
        return self._loop

    async def _run_blocking(self, function: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, function, *args)

    def submit(self, spec: CallSpec, args: tuple[Any, ...], done: Done) -> Cancel:
        call = _Submitted(spec, args, done)
        with self._lock:
            loop = self._started_loop()
            self._submitted.append(call)
            first = len(self._submitted) == 1
        if first:  # the loop takes the whole batch in one callback
            loop.call_soon_threadsafe(self._start_submitted)
        return functools.partial(self._cancel, call)

    def _start_submitted(self) -> None:
        """On the loop: start every call submitted since the last batch."""
        with self._lock:
            batch, self._submitted = self._submitted, []
        loop = asyncio.get_running_loop()
        for call in batch:
            if call.cancelled:
                continue
            task = loop.create_task(attempt_call(call.spec, call.args, self._run_blocking, asyncio.sleep))
            call.task = task
            task.add_done_callback(functools.partial(self._finished, call))

    def _finished(self, call: _Submitted, task: asyncio.Task[Any]) -> None:
        if task.cancelled() or call.cancelled:
            return
        error = task.exception()
        call.done(CallOutcome(None, error) if error is not None else CallOutcome(task.result()))
        self._completed.set()

    def _cancel(self, call: _Submitted) -> None:
        call.cancelled = True
        loop, task = self._loop, call.task
        if loop is not None and task is not None:
            loop.call_soon_threadsafe(task.cancel)

    def wait_for_completion(self, timeout_s: float) -> bool:
        fired = self._completed.wait(timeout_s)
        self._completed.clear()
        return fired

    def close(self) -> None:
        """Stop the loop and the pool (calls still running are abandoned: their tasks are closed)."""
        with self._lock:
            loop, pool, self._loop, self._pool = self._loop, self._pool, None, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


_shared: LoopThreadExecutor | None = None
_shared_lock = threading.Lock()


def shared_executor() -> AsyncExecutor:
    """The process's default executor (made on first use), for tasks not handed one: a Spark
    executor's, a task made by hand. The runner gives each stream thread its own."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = LoopThreadExecutor(name="kappaflow-async-shared")
        return _shared
