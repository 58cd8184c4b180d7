"""The parent's side of `num.stream.threads` > 1: N worker processes behind one instance.

Kafka Streams runs N stream threads in one client; under the GIL that buys nothing, so each "thread" is a
forked process running a single-threaded instance (runner/worker_process.py), a member of the
application's group like any other: the group coordinator spreads tasks over workers, and a worker's
death moves its tasks to the others until its replacement rejoins. The parent is the instance users see:
it serves health, Prometheus metrics and interactive queries for every worker, and its state is the
workers' states combined (`combined_state`).

Who owns what: each worker owns its tasks, stores and clients; the parent owns only what workers report
(state, task ids, a metrics snapshot) and forwards each store query to the worker that reported the task.
A worker that dies without saying goodbye (kill -9, a crash) is replaced with a fresh process under the
same name (Kafka Streams' REPLACE_THREAD), with a growing delay if it keeps dying (`replacement_delay`);
a worker that ends in ERROR (its uncaught-exception handler said SHUTDOWN_CLIENT or SHUTDOWN_APPLICATION)
takes the others down with it, as a client shuts down all its threads.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from kappaflow.api.errors import InvalidStateStorePartitionError, StreamsError
from kappaflow.api.metrics import Metrics
from kappaflow.runner.worker_process import (
    LAGS,
    Request,
    StoreCall,
    WorkerSpec,
    fork_hazards,
    worker_main,
)

log = logging.getLogger(__name__)

QUERY_TIMEOUT_S = 30.0
# How long a worker that did not stop in time gets to print its stacks and abort before it is killed.
ABORT_GRACE_S = 10.0
# A worker that keeps dying (OOM-killed at every start, a native crash) is replaced ever more slowly.
CRASH_WINDOW_S = 60.0
MAX_REPLACEMENT_DELAY_S = 30.0
# Worker stores' methods that read one key (its first argument); the others read every local partition.
KEY_METHODS = frozenset({"get", "get_versions", "fetch", "backward_fetch", "find_sessions", "fetch_session"})
# ...and those whose first argument is a key query (its `key` names the partition): the versioned view's
QUERY_METHODS = frozenset({"query"})


@dataclass(frozen=True)
class ThreadMetadata:
    """One stream thread of this instance (a worker process when `num.stream.threads` > 1)."""

    thread_name: str
    state: str
    active_tasks: tuple[str, ...]
    standby_tasks: tuple[str, ...]
    pid: int | None


def combined_state(states: list[str]) -> str:
    """The instance's state from its workers': ERROR if any failed, RUNNING when all run, else
    REBALANCING (a worker starting, restoring, rejoining or being replaced)."""
    if "ERROR" in states:
        return "ERROR"
    if states and all(s == "RUNNING" for s in states):
        return "RUNNING"
    return "REBALANCING"


def replacement_delay(deaths: list[float], now: float) -> float:
    """Seconds to wait before replacing a worker whose unexpected deaths happened at `deaths`
    (monotonic times, the latest included): none for a first death, then 1, 2, 4 .. 30 s for each
    further one within `CRASH_WINDOW_S`, so a crash loop neither burns the CPU nor floods the log."""
    recent = sum(1 for t in deaths if now - t <= CRASH_WINDOW_S)
    if recent <= 1:
        return 0.0
    return float(min(MAX_REPLACEMENT_DELAY_S, 2 ** (recent - 2)))


def combine_results(results: list[Any]) -> Any:
    """Scatter-gather: counts add up (approximate_num_entries), lists concatenate in worker order."""
    if all(isinstance(r, int) for r in results):
        return sum(results)
    combined: list[Any] = []
    for result in results:
        combined.extend(result)
    return combined


class Worker:
    """One worker slot: its current process and pipes, and what it last reported."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.process: BaseProcess | None = None
        self.status: Connection | None = None
        self.queries: Connection | None = None
        self.query_lock = threading.Lock()
        self.state = "CREATED"
        self.exited: int | None = None  # the exit code the worker reported before ending
        self.active: list[str] = []
        self.standby: list[str] = []
        self.deaths: list[float] = []  # monotonic times of its unexpected deaths (replacement backoff)
        self.restart_at: float | None = None  # when a dead worker is due to be replaced

    def start(self) -> None:
        ctx = multiprocessing.get_context("fork")  # the topology holds user callables: not picklable
        status_read, status_write = ctx.Pipe(duplex=False)
        queries, child_queries = ctx.Pipe()
        process = ctx.Process(
            target=worker_main, args=(self.spec, status_write, child_queries), name=self.spec.name
        )
        process.start()
        status_write.close()
        child_queries.close()
        self.process, self.status, self.queries = process, status_read, queries
        self.state, self.exited, self.active, self.standby = "REBALANCING", None, [], []
        self.restart_at = None
        log.info("worker %s started (pid %s)", self.spec.name, process.pid)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def alive(self) -> bool:
        return self.process is not None and self.process.is_alive()

    def terminate(self) -> None:
        if self.alive() and self.pid is not None:
            os.kill(self.pid, signal.SIGTERM)

    def request(self, request: Request) -> Any:
        """Forward one request and wait for the answer (one at a time per worker)."""
        with self.query_lock:
            conn = self.queries
            if conn is None or not self.alive():
                raise InvalidStateStorePartitionError(
                    f"worker {self.spec.name} is not running: retry shortly"
                )
            try:
                conn.send(request)
                if not conn.poll(QUERY_TIMEOUT_S):
                    raise InvalidStateStorePartitionError(f"worker {self.spec.name} did not answer in time")
                kind, value = conn.recv()
            except (EOFError, OSError) as exc:
                raise InvalidStateStorePartitionError(
                    f"worker {self.spec.name} went away while answering: retry shortly"
                ) from exc
        if kind == "error":
            raise value
        return value


class WorkerPool:
    """Starts, watches, replaces and stops the workers; `on_state(name)` gets the combined state."""

    def __init__(self, specs: list[WorkerSpec], metrics: Metrics, on_state: Callable[[str], None]) -> None:
        self.workers = [Worker(spec) for spec in specs]
        self._metrics = metrics
        self._on_state = on_state
        self._stopping = threading.Event()
        self.unclean_exits: list[str] = []  # workers that exited non-zero when stopped (stop() logs why)
        self._supervisor: threading.Thread | None = None

    def start(self) -> None:
        hazards = fork_hazards()
        if hazards:
            raise StreamsError(
                f"num.stream.threads={len(self.workers)}: this process already runs RocksDB's background "
                f"threads ({', '.join(sorted(set(hazards)))}), which forked workers would lack (their store "
                "flushes would wait forever). Start an instance with workers in a process that has not "
                "opened state stores before, e.g. `kappaflow run`"
            )
        for worker in self.workers:
            worker.start()
        self._supervisor = threading.Thread(target=self._supervise, name="kappaflow-workers", daemon=True)
        self._supervisor.start()

    # ----------------------------------------------------------------- supervision
    def _supervise(self) -> None:
        while not self._stopping.is_set():
            waitables: list[Any] = [w.status for w in self.workers if w.status is not None]
            waitables += [w.process.sentinel for w in self.workers if w.process is not None]
            wait(waitables, timeout=0.5)
            for worker in self.workers:
                self._drain(worker)
                if worker.process is not None and not worker.alive():
                    self._ended(worker)
                due = worker.restart_at
                if due is not None and time.monotonic() >= due and not self._stopping.is_set():
                    worker.start()
            self._on_state(combined_state([w.state for w in self.workers]))

    def _drain(self, worker: Worker) -> None:
        conn = worker.status
        try:
            while conn is not None and conn.poll():
                self._received(worker, conn.recv())
        except (EOFError, OSError):
            worker.status = None

    def _received(self, worker: Worker, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "state":
            worker.state = message[1]
        elif kind == "report":
            _kind, worker.active, worker.standby, counters, gauges = message
            self._metrics.merge_snapshot(counters, gauges, thread_id=worker.spec.name)
        elif kind == "exit":
            worker.exited = message[1]

    def _ended(self, worker: Worker) -> None:
        assert worker.process is not None
        code = worker.process.exitcode
        worker.process.join(0)
        worker.process = None
        worker.active, worker.standby = [], []
        if self._stopping.is_set():
            return
        if worker.exited is None:
            now = time.monotonic()
            worker.deaths = [t for t in worker.deaths if now - t <= CRASH_WINDOW_S] + [now]
            delay = replacement_delay(worker.deaths, now)
            log.error("worker %s died (exit code %s): replacing it in %.0fs", worker.spec.name, code, delay)
            self._metrics.increment("worker-replacements-total", thread_id=worker.spec.name)
            worker.state, worker.restart_at = "REBALANCING", now + delay
            return
        if worker.state != "ERROR":
            worker.state = "ERROR"  # it closed on its own (its parent-death check, or a close failure)
        log.error("worker %s ended in state ERROR: stopping the other workers", worker.spec.name)
        for other in self.workers:
            other.terminate()

    # ----------------------------------------------------------------- queries
    def local_task_ids(self) -> tuple[list[str], list[str]]:
        active = sorted(t for w in self.workers for t in w.active)
        standby = sorted(t for w in self.workers for t in w.standby)
        return active, standby

    def threads_metadata(self) -> list[ThreadMetadata]:
        return [
            ThreadMetadata(w.spec.name, w.state, tuple(w.active), tuple(w.standby), w.pid)
            for w in self.workers
        ]

    def call_for_key(self, call: Request, task_id: str | None) -> Any:
        """Ask the worker that reported `task_id` first, then the others (the assignment may have moved
        since its last report); the first answer wins, else the owner's retryable error."""
        ordered = sorted(self.workers, key=lambda w: task_id not in w.active)
        first_error: InvalidStateStorePartitionError | None = None
        for worker in ordered:
            try:
                return worker.request(call)
            except InvalidStateStorePartitionError as exc:
                first_error = first_error or exc
        assert first_error is not None
        raise first_error

    def call_all(self, call: Request) -> list[Any]:
        return [worker.request(call) for worker in self.workers]

    def lags(self) -> dict[str, dict[int, Any]]:
        result: dict[str, dict[int, Any]] = {}
        for per_worker in self.call_all(LAGS):
            for store, partitions in per_worker.items():
                result.setdefault(store, {}).update(partitions)
        return result

    # ----------------------------------------------------------------- shutdown
    def stop(self, timeout: float) -> bool:
        """SIGTERM every worker (each commits and closes) and wait up to `timeout`; the ones still running
        then are killed. True when all stopped on their own in time."""
        self._stopping.set()
        if self._supervisor is not None and self._supervisor is not threading.current_thread():
            self._supervisor.join(2.0)
        for worker in self.workers:
            worker.terminate()
        deadline = time.monotonic() + timeout
        clean = True
        for worker in self.workers:
            process = worker.process
            if process is None:
                continue
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                log.error(
                    "worker %s did not stop within %.0fs: aborting it (its threads' stacks follow on stderr)",
                    worker.spec.name,
                    timeout,
                )
                abort(process)
                clean = False
            else:
                self._drain(worker)
                if process.exitcode != 0:  # it failed (and said why in the log); closed all the same
                    log.error("worker %s exited with code %s", worker.spec.name, process.exitcode)
                    self.unclean_exits.append(worker.spec.name)
            worker.process = None
            worker.active, worker.standby = [], []
        return clean


def abort(process: BaseProcess) -> None:
    """End a worker that did not stop: SIGABRT first, on which faulthandler (enabled in every worker)
    prints each thread's stack before the process dies, so a hang names the call it was stuck in; SIGKILL
    if even that does not end it."""
    if process.pid is not None:
        with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
            os.kill(process.pid, signal.SIGABRT)
        process.join(ABORT_GRACE_S)
    if process.is_alive():
        process.kill()
        process.join(5.0)


class ForwardedStore:
    """A read-only store view in the parent whose every method runs in the worker holding the data."""

    def __init__(
        self,
        pool: WorkerPool,
        call: Callable[[str, tuple[Any, ...]], StoreCall],
        task_of_key: Callable[[Any], str | None],
    ) -> None:
        self._pool = pool
        self._call = call
        self._task_of_key = task_of_key

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method.startswith("_"):
            raise AttributeError(method)

        def forwarded(*args: Any) -> Any:
            call = self._call(method, args)
            if method in KEY_METHODS:
                return self._pool.call_for_key(call, self._task_of_key(args[0]))
            if method in QUERY_METHODS:
                return self._pool.call_for_key(call, self._task_of_key(args[0].key))
            return combine_results(self._pool.call_all(call))

        return forwarded
