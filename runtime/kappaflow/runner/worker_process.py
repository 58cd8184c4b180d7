"""One stream worker process of an instance with `num.stream.threads` > 1: the child's side.

The GIL lets one Python thread run at a time, so Kafka Streams' N stream threads become N processes here.
Each worker is a complete single-threaded instance (its own consumer in the application's group, its own
producer and tasks) forked from the parent `KafkaStreams`, which stays the one instance users see
(runner/workers.py is the parent's side). The worker talks to the parent over two pipes:
- `status` (worker -> parent): its state on every change, and every `REPORT_INTERVAL_S` its tasks and a
  snapshot of its metrics, so the parent answers health, task lists and Prometheus scrapes for all;
- `queries` (parent -> worker -> parent): interactive queries the parent forwards to the worker that holds
  the task, answered with the result or the exception.
SIGTERM commits and closes the worker (the parent sends it on close()); SIGINT is left to the parent.
"""

from __future__ import annotations

import faulthandler
import importlib
import logging
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol

from kappaflow.api.metrics import Metrics
from kappaflow.runner.gc_tuning import tune_gc_for_streaming
from kappaflow.runner.stop_request import StopRequest

log = logging.getLogger(__name__)

REPORT_INTERVAL_S = 0.5


class LocalInstance(Protocol):
    """What a worker runs: a single-threaded KafkaStreams (the protocol keeps this module below it)."""

    metrics: Metrics
    final_commit_error: BaseException | None
    error: BaseException | None

    def set_state_listener(self, listener: Callable[[Any, Any], None]) -> None: ...
    def start(self) -> None: ...
    def alive(self) -> bool: ...
    def close(self, timeout: float = 60.0) -> bool: ...
    def local_task_ids(self) -> tuple[list[str], list[str]]: ...
    def store(self, name: str, store_type: Any, enable_stale_stores: bool = False) -> Any: ...
    def all_local_store_partition_lags(self) -> dict[str, dict[int, Any]]: ...


@dataclass(frozen=True)
class WorkerSpec:
    """How the parent builds worker `index`: `build()` returns its unstarted single-threaded instance."""

    index: int
    name: str
    build: Callable[[], LocalInstance]
    close_timeout_s: float


@dataclass(frozen=True)
class StoreCall:
    """One interactive-query method call on a store view, as the parent forwards it to a worker."""

    store: str
    store_type: Any
    enable_stale_stores: bool
    method: str
    args: tuple[Any, ...]


@dataclass(frozen=True)
class NamedCall:
    """`function(instance, payload)` run in the worker, the function named `module:attribute` (layers
    above the runner, like the HTTP query service, forward their local reads this way: a closure cannot
    cross the pipe, a name can)."""

    target: str
    payload: Any


LAGS = "lags"  # the other request: all_local_store_partition_lags()
Request = StoreCall | NamedCall | str


def fork_hazards(threads_dir: Path = Path("/proc/self/task")) -> list[str]:
    """Native thread pools of this process a forked child would inherit as dead: RocksDB's background
    threads (started by the first store opened here) would leave every flush in a worker waiting
    forever. Names of the threads found (empty: forking is safe)."""
    names = []
    for task in sorted(threads_dir.iterdir()):
        try:
            name = (task / "comm").read_text().strip()
        except OSError:
            continue  # the thread ended meanwhile
        if name.startswith("rocksdb:"):
            names.append(name)
    return names


def answer(instance: LocalInstance, request: Request) -> Any:
    """The worker's answer to one forwarded request (a dispatch over the local instance)."""
    if isinstance(request, StoreCall):
        view = instance.store(request.store, request.store_type, request.enable_stale_stores)
        return getattr(view, request.method)(*request.args)
    if isinstance(request, NamedCall):
        module, _sep, attribute = request.target.partition(":")
        function = getattr(importlib.import_module(module), attribute)
        return function(instance, request.payload)
    if request == LAGS:
        return instance.all_local_store_partition_lags()
    raise ValueError(f"unknown worker request {request!r}")


def worker_main(spec: WorkerSpec, status: Connection, queries: Connection) -> None:
    """The forked child's entry point: run the instance until SIGTERM, then close it and exit."""
    # Objects inherited from the parent (its librdkafka handles among them) must never be collected
    # here: destroying a handle whose threads stayed in the parent would wait for them forever. The
    # freeze that keeps them out of every collection also sets the collector for stream work.
    tune_gc_for_streaming()
    # A worker still running past close()'s timeout is ended with SIGABRT: its threads' stacks go to
    # stderr first, so the log says where it was stuck (runner/workers.py, `stop`).
    faulthandler.enable(all_threads=True)
    stop = StopRequest()
    parent = os.getppid()
    stop_on_sigterm(stop)
    send_lock = threading.Lock()

    def send(message: tuple[Any, ...]) -> None:
        with send_lock:
            try:
                status.send(message)
            except (BrokenPipeError, OSError):
                stop.set()  # the parent is gone: nobody is left to serve

    instance = spec.build()
    instance.set_state_listener(lambda new, _old: send(("state", new.value)))
    threading.Thread(target=_serve_queries, args=(instance, queries), daemon=True).start()
    code = 0
    try:
        instance.start()
        while not stop.wait(REPORT_INTERVAL_S):
            active, standby = instance.local_task_ids()
            send(("report", active, standby, instance.metrics.counters(), instance.metrics.gauges()))
            if os.getppid() != parent:
                log.error("worker %s: the parent process died; closing", spec.name)
                break
            if not instance.alive():  # ERROR: the parent stops the other workers when this one exits
                break
        failed = not instance.alive()
        closed = instance.close(spec.close_timeout_s)
        if instance.error is not None and not failed:  # stopped while waiting for the broker
            log.error("worker %s: %s", spec.name, instance.error)
            failed = True
        code = 0 if closed and not failed and instance.final_commit_error is None else 1
    except BaseException:
        log.exception("worker %s failed", spec.name)
        code = 1
    finally:
        send(("exit", code))
        logging.shutdown()
        # librdkafka handles left to the interpreter's finalizers could hold the exit (see cli.py)
        os._exit(code)


def stop_on_sigterm(stop: StopRequest) -> None:
    """SIGTERM asks `stop` (runner/stop_request.py says why not a threading.Event); SIGINT is the parent's."""
    signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _serve_queries(instance: LocalInstance, queries: Connection) -> None:
    while True:
        try:
            request = queries.recv()
        except (EOFError, OSError):
            return
        try:
            reply: tuple[str, Any] = ("ok", answer(instance, request))
        except Exception as exc:
            reply = ("error", exc)
        try:
            queries.send(reply)
        except (BrokenPipeError, OSError):
            return
        except Exception as exc:  # an unpicklable result or exception: say so rather than hang the parent
            queries.send(("error", RuntimeError(f"the worker's answer cannot be sent: {exc}")))
