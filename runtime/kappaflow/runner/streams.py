"""`KafkaStreams`: run a Topology against Kafka, with Kafka Streams' lifecycle and state listener.

States: CREATED -> REBALANCING <-> RUNNING -> PENDING_SHUTDOWN -> NOT_RUNNING, or ERROR when the stream
thread dies and the uncaught-exception handler says to shut down. REBALANCING also covers restoration,
as in Kafka Streams, so "ready" (every active task restored and running) is exactly state RUNNING.
The stream thread runs in the background; `close()` asks it to commit and stop.

The uncaught-exception handler answers REPLACE_THREAD (a new stream thread with new clients rejoins the
group), SHUTDOWN_CLIENT or SHUTDOWN_APPLICATION. Java broadcasts the last one to every member through its
own assignor; librdkafka cannot plug one in, so the signal travels through a member-less consumer group
(runner/app_shutdown.py): every instance stops within a few seconds, cleanly, in state ERROR.

`num.stream.threads` = N > 1 runs N worker processes (runner/workers.py) instead of the in-process
thread; this object stays the one instance: its state combines the workers', its health and metrics
endpoints cover them all, and `store()` forwards each query to the worker holding the data.

Interactive queries: `store(name, store_type)` hands out a read-only view over this instance's local
copies of a store (the view class comes from the store type, which lives in `kappaflow.query` above this
layer, as Java's QueryableStoreType builds its view from a StateStoreProvider). `query_metadata_for_key`,
`metadata_for_all_clients` and `all_local_store_partition_lags` answer where keys live and how far local
copies lag, from the group's assignment (see runner/metadata.py for how endpoints travel).
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kappaflow.api.config import StreamsConfig
from kappaflow.api.errors import ConfigError, InvalidStateStoreError, StreamsError
from kappaflow.api.metrics import Metrics
from kappaflow.api.serdes import Serde
from kappaflow.clients.admin import InternalTopicManager, TopicError
from kappaflow.clients.group_leave import leave_group
from kappaflow.clients.kafka import client_configs
from kappaflow.runner.app_shutdown import ApplicationShutdownSignal
from kappaflow.runner.close_options import (
    DEFAULT_CLOSE_TIMEOUT_S,
    CloseOptions,
    GroupMembershipOperation,
    check_supported,
    instances_to_remove,
    worker_instance_id,
)
from kappaflow.runner.http import HealthServer
from kappaflow.runner.local_stores import LocalStoreProvider
from kappaflow.runner.metadata import (
    GroupMetadataSource,
    HostInfo,
    KeyQueryMetadata,
    LagInfo,
    StreamsMetadata,
    TopologyIndex,
    describe_with,
    interpret_group,
    key_metadata,
)
from kappaflow.runner.placement import standby_tasks_for
from kappaflow.runner.process_id import ProcessId, acquire_process_id
from kappaflow.runner.retry import StoppedWhileWaitingError
from kappaflow.runner.states import (
    State,
    StreamThreadExceptionResponse,
    allowed_transition,
    check_state_dir,
)
from kappaflow.runner.thread import StreamThread
from kappaflow.runner.worker_process import NamedCall, StoreCall, WorkerSpec
from kappaflow.runner.workers import ForwardedStore, ThreadMetadata, WorkerPool
from kappaflow.topology.topology import Topology
from kappaflow_contract.topics import changelog_topic

log = logging.getLogger(__name__)

# How long a worker process gives its own close (commit, tasks, clients) on SIGTERM.
WORKER_CLOSE_TIMEOUT_S = 60.0
# How long close() waits for a stream thread still preparing topics before it leaves it behind: long
# enough for a reachable broker to finish (the thread then ends cleanly), short enough to stop promptly
# when the broker cannot be reached.
STOP_GRACE_S = 2.0


StateListener = Callable[[State, State], None]
UncaughtExceptionHandler = Callable[[BaseException], StreamThreadExceptionResponse]


class KafkaStreams:
    """Runs a topology on Kafka, as Java's `KafkaStreams`: `start()` joins the consumer group and processes,
    `close()` commits and leaves. One instance per process; run more processes (or `num.stream.threads`
    worker processes) to scale out. Serves metrics and health on `metrics.port`.

    It gives a Topology a lifecycle (the states in the module docstring, a state listener, an
    uncaught-exception handler) and a face for queries and operations. It owns the instance's stream
    thread (or its worker processes), its metrics and health endpoints, the lock queries and the thread
    share, and the instance's view of where keys live (the group's assignment); it does not process
    records itself: the stream thread does."""

    def __init__(self, topology: Topology, config: StreamsConfig | Mapping[str, Any]) -> None:
        self.topology = topology
        self.config = config if isinstance(config, StreamsConfig) else StreamsConfig(dict(config))
        self.config.require("bootstrap.servers")
        self.application_id = self.config.application_id
        self.metrics = Metrics()
        self.state = State.CREATED
        self._lock = threading.Lock()
        self._listeners: list[StateListener] = []
        self._handler: UncaughtExceptionHandler | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        base = self.config.get_str("client.id") or self.config.get_str("group.instance.id")
        self.client_id = base or f"{self.application_id}-{socket.gethostname()}-{os.getpid()}"
        self.stream_thread: StreamThread | None = None
        self._http: HealthServer | None = None
        self.metrics_port: int | None = None
        # Held by the stream thread while it touches stores (processing, commits, rebalance callbacks)
        # and by interactive queries while they read: a query never sees a store mid-flush or closed.
        self.state_lock = threading.RLock()
        self.topology_index = TopologyIndex(topology, self.application_id)
        server = self.config.get_str("application.server")
        self.host_info: HostInfo | None = HostInfo.parse(server) if server else None
        self._group: GroupMetadataSource | None = None
        self._group_lock = threading.Lock()  # query threads create the admin client lazily, once
        self._group_admin: InternalTopicManager | None = None
        self._counts: dict[str, int] = {}
        self._shutdown_signal: ApplicationShutdownSignal | None = None
        self._shutdown_requested_by: str | None = None
        self._process_id: ProcessId | None = None
        self._threads = self.config.get_int("num.stream.threads")
        self._workers: WorkerPool | None = None
        self._is_worker = False  # set in a worker process: it runs its stream thread in-process
        # the error of the commit a close() makes, when it failed: the instance stopped, but not cleanly
        # (records processed since the last commit will be processed again)
        self.final_commit_error: BaseException | None = None
        # why close() with LEAVE_GROUP could not remove the static members (they stay until the session
        # timeout); None when it did or was not asked to
        self.leave_group_error: BaseException | None = None

    # ----------------------------------------------------------------- listeners
    def set_state_listener(self, listener: StateListener) -> None:
        """Call `listener(new_state, old_state)` on each state change; set before `start()`."""
        if self.state is not State.CREATED:
            raise StreamsError("set the state listener before start()")
        self._listeners.append(listener)

    def set_uncaught_exception_handler(self, handler: UncaughtExceptionHandler) -> None:
        """What a failure of the stream thread does: the handler returns `REPLACE_THREAD`, `SHUTDOWN_CLIENT`
        or `SHUTDOWN_APPLICATION`; set before `start()`."""
        if self.state is not State.CREATED:
            raise StreamsError("set the uncaught exception handler before start()")
        self._handler = handler

    def _set_state(self, target: State) -> bool:
        with self._lock:
            old = self.state
            if target is old:
                return True
            if not allowed_transition(old, target):
                return False
            self.state = target
        log.info("state %s -> %s", old.value, target.value)
        if self._group is not None:
            self._group.invalidate()
        self.metrics.set_gauge("streams-state", float(list(State).index(target)))
        for listener in self._listeners:
            try:
                listener(target, old)
            except Exception:
                log.exception("state listener failed")
        return True

    def _thread_state(self, name: str) -> None:
        if not self._stop.is_set():
            self._set_state(State[name])

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Start processing in the background: create the internal topics, join the group, restore state, then
        process. Returns at once; follow `state`."""
        if self.state is not State.CREATED:
            raise StreamsError(f"start() is allowed once, in state CREATED (now {self.state.value})")
        state_dir = check_state_dir(Path(self.config.get_str("state.dir")))
        static = bool(self.config.get_str("group.instance.id"))
        try:
            check_supported(self._configured_membership(), static)
        except StreamsError as exc:
            raise ConfigError(f"config 'close.group.membership.operation': {exc}") from None
        if self._process_id is None and self.config.exactly_once and not static:
            self._process_id = acquire_process_id(state_dir / self.application_id)
        if self._threads > 1 and not self._is_worker:
            self._start_workers()
            return
        self._start_http()
        self._set_state(State.REBALANCING)
        sources = sorted(self.topology.source_topics())
        if sources:
            settings = client_configs(self.config, f"{self.client_id}-shutdown")["restore"]
            self._shutdown_signal = ApplicationShutdownSignal(settings, self.application_id, sources[0])
            self._shutdown_signal.watch(self._on_application_shutdown)
        self._thread = threading.Thread(
            target=self._run, name=f"{self.client_id}-StreamThread-1", daemon=True
        )
        self._thread.start()

    def _start_workers(self) -> None:
        """The parent of N worker processes (runner/workers.py). The parent never opens a store or runs a
        stream thread itself, so replacements forked later, from the supervisor thread, are as safe to
        fork as the first workers."""
        base = self.config.as_dict()
        instance = self.config.get_str("group.instance.id")
        specs = []
        for index in range(1, self._threads + 1):
            name = f"{self.client_id}-StreamThread-{index}"
            values = {**base, "client.id": name, "metrics.port": -1, "query.http.enabled": False}
            if instance:
                values["group.instance.id"] = worker_instance_id(instance, index)
            process_id = f"{self._process_id.value}-{index}" if self._process_id is not None else None
            build = _worker_builder(self.topology, StreamsConfig(values), process_id)
            specs.append(WorkerSpec(index, name, build, WORKER_CLOSE_TIMEOUT_S))
        self._workers = WorkerPool(specs, self.metrics, self._thread_state)
        self._workers.start()
        try:
            self._start_http()
        except ConfigError:
            self._workers.stop(WORKER_CLOSE_TIMEOUT_S)
            raise
        self._set_state(State.REBALANCING)

    def _start_http(self) -> None:
        port = self.config.get_int("metrics.port")
        if port >= 0:  # -1 disables the endpoint; 0 lets the OS choose (tests)
            host = self.config.get_str("metrics.host") or "0.0.0.0"
            try:
                self._http = HealthServer(host, port, self.metrics, self.alive, self.ready, self._describe)
            except OSError as exc:  # the port is taken, or the host is not this machine's
                raise ConfigError(
                    f"config 'metrics.port': cannot listen on {host}:{port} for metrics and health: "
                    f"{exc.strerror or exc}"
                ) from exc
            self._http.start()
            self.metrics_port = self._http.port

    def local_threads_metadata(self) -> list[ThreadMetadata]:
        """Each stream thread (worker process when `num.stream.threads` > 1) with its state and task ids,
        as last reported (Java's metadataForLocalThreads)."""
        if self._workers is not None:
            return self._workers.threads_metadata()
        active, standby = self.local_task_ids()
        name = self._thread.name if self._thread is not None else f"{self.client_id}-StreamThread-1"
        return [ThreadMetadata(name, self.state.value, tuple(active), tuple(standby), os.getpid())]

    @property
    def runs_workers(self) -> bool:
        """True in the parent of worker processes: local reads must be forwarded to them."""
        return self._workers is not None

    def ask_workers(self, target: str, payload: Any, task_id: str | None = None) -> list[Any]:
        """Run `target(worker instance, payload)` (`module:function`) in the workers: with `task_id`, the
        first answer, the task's last reported owner asked first; without, every worker's answer."""
        if self._workers is None:
            raise StreamsError("ask_workers: this instance runs no worker processes")
        call = NamedCall(target, payload)
        if task_id is not None:
            return [self._workers.call_for_key(call, task_id)]
        return self._workers.call_all(call)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.stream_thread = StreamThread(
                self.topology,
                self.config,
                self.metrics,
                self.client_id,
                self._thread_state,
                state_lock=self.state_lock,
                application_server=str(self.host_info) if self.host_info else "",
                process_id=self._process_id.value if self._process_id is not None else None,
            )
            try:
                self.stream_thread.run(self._stop)
                self.final_commit_error = self.stream_thread.final_commit_error
                if self._shutdown_requested_by is not None:
                    self.error = StreamsError(
                        f"application shutdown requested by {self._shutdown_requested_by}"
                    )
                    self._set_state(State.ERROR)
                return
            except BaseException as exc:
                if isinstance(exc, StoppedWhileWaitingError) and self._stop.is_set():
                    log.info("stream thread ended: %s", exc)  # close() reported the stop
                    return
                if isinstance(exc, (TopicError, ConfigError)):  # a set-up mistake its message explains
                    log.error("stream thread failed: %s", exc)
                else:
                    log.exception("stream thread failed: %s", exc)
                self.error = exc
                response = StreamThreadExceptionResponse.SHUTDOWN_CLIENT
                if self._handler is not None:
                    try:
                        response = self._handler(exc)
                    except Exception:
                        log.exception("uncaught exception handler failed")
                if response is StreamThreadExceptionResponse.REPLACE_THREAD and not self._stop.is_set():
                    log.warning("replacing the stream thread")
                    self._set_state(State.REBALANCING)
                    continue
                if (
                    response is StreamThreadExceptionResponse.SHUTDOWN_APPLICATION
                    and self._shutdown_signal is not None
                ):
                    self._shutdown_signal.request(self.client_id, f"{type(exc).__name__}: {exc}")
                self._set_state(State.ERROR)
                return

    def _on_application_shutdown(self, sender: str) -> None:
        """Another instance answered SHUTDOWN_APPLICATION: commit, stop, and end in state ERROR."""
        if self._stop.is_set():
            return
        log.error("application shutdown requested by %s: stopping this instance", sender)
        self._shutdown_requested_by = sender
        self._stop.set()

    def _configured_membership(self) -> GroupMembershipOperation:
        return GroupMembershipOperation.parse(self.config.get_str("close.group.membership.operation"))

    def close(self, timeout: float | CloseOptions = DEFAULT_CLOSE_TIMEOUT_S) -> bool:
        """Commit, close the tasks and clients, and wait up to `timeout` seconds (or as `CloseOptions`
        say, KIP-1153: whether the instance leaves the group or remains in it, runner/close_options.py);
        True when stopped (with workers: every worker stopped in time). REMAIN_IN_GROUP without
        group.instance.id raises StreamsError before anything stops: librdkafka cannot keep a dynamic
        member in the group."""
        options = timeout if isinstance(timeout, CloseOptions) else CloseOptions(timeout_s=float(timeout))
        membership = options.membership or self._configured_membership()
        instance = self.config.get_str("group.instance.id")
        check_supported(membership, bool(instance))
        timeout = options.timeout_s
        deadline = time.monotonic() + timeout
        # the members to remove once their consumers closed; a worker process leaves that to its parent,
        # which removes every worker's member after all stopped (a killed one's too)
        joined = (self._thread is not None or self._workers is not None) and not self._is_worker
        if self._shutdown_signal is not None:
            self._shutdown_signal.close()  # its watcher thread ends within one interval
        if self.state in (State.NOT_RUNNING, State.PENDING_SHUTDOWN):
            return True
        self._set_state(State.PENDING_SHUTDOWN)
        self._stop.set()
        workers_clean = self._workers is None or self._workers.stop(timeout)
        if not workers_clean:
            log.error("not every worker stopped within %.0fs (see the lines above)", timeout)
        if self._workers is not None and self._workers.unclean_exits and self.final_commit_error is None:
            self.final_commit_error = StreamsError(
                f"in worker(s) {', '.join(self._workers.unclean_exits)}, which exited non-zero (see above)"
            )
        thread = self._thread
        if (
            thread is not None
            and thread is not threading.current_thread()
            and not self._join_stream_thread(timeout)
        ):
            return False
        if self._http is not None:
            self._http.stop()
            self._http = None
        if self._process_id is not None:
            self._process_id.release()
            self._process_id = None
        self.stream_thread = None
        self._group = None
        self._group_admin = None
        if joined:  # the consumers are closed: a LeaveGroup now is not undone by a heartbeat
            removing = instances_to_remove(membership, instance, self._threads)
            settings = client_configs(self.config, self.client_id)["admin"]
            self.leave_group_error = leave_group(settings, self.application_id, removing, deadline)
        # librdkafka clients in reference cycles (delivery callbacks) would linger, reconnecting in the
        # background, until the next collection: collect now so close() really closes them.
        gc.collect()
        self._set_state(State.NOT_RUNNING)
        return workers_clean  # False: a worker was still running at the timeout and was killed

    def _join_stream_thread(self, timeout: float) -> bool:
        """Wait for the stream thread to end; True when it did, or when it still waits for a broker it
        cannot reach to prepare topics: it holds nothing to commit or close then, and a librdkafka call
        cannot be interrupted (it would hold a SIGTERM for up to `default.api.timeout.ms`). The thread
        ends by itself after that call; `error` says the instance stopped before it ever ran."""
        assert self._thread is not None
        deadline = time.monotonic() + timeout
        self._thread.join(min(timeout, STOP_GRACE_S))
        while self._thread.is_alive() and time.monotonic() < deadline:
            stream_thread = self.stream_thread
            if stream_thread is not None and stream_thread.preparing:
                bootstrap = self.config.get_str("bootstrap.servers")
                self.error = self.error or StoppedWhileWaitingError(
                    f"stopped while waiting for the broker at bootstrap.servers={bootstrap} to prepare "
                    "topics: nothing was processed or committed"
                )
                return True
            self._thread.join(0.05)
        return not self._thread.is_alive()

    def _describe(self) -> dict[str, Any]:
        active, standby = self.local_task_ids()
        threads = [dataclasses.asdict(t) for t in self.local_threads_metadata()]
        described: dict[str, Any] = {
            "state": self.state.value,
            "active_tasks": active,
            "standby_tasks": standby,
        }
        # partitions a hanging transaction holds: restorations and inputs (runner/open_transactions.py)
        described["hanging_transaction_partitions"] = sum(
            int(self.metrics.gauge("hanging-transaction-partitions", reader=reader) or 0)
            for reader in ("restore", "input")
        )
        return {**described, "tasks": self.local_task_roles(), "threads": threads}

    def local_task_roles(self) -> dict[str, dict[str, Any]]:
        """task id -> {"role": active | restoring | standby | warmup, "lag": changelog records behind}
        for every task this instance holds (in-process thread; workers report active and standby ids)."""
        if self._workers is not None:
            active, standby = self._workers.local_task_ids()
            return {
                **{t: {"role": "standby", "lag": None} for t in standby},
                **{t: {"role": "active", "lag": None} for t in active},
            }
        with self.state_lock:
            thread = self.stream_thread
            roles = thread.task_roles() if thread is not None else {}
        return {task: {"role": role, "lag": lag} for task, (role, lag) in sorted(roles.items())}

    def wait_until(self, state: State, timeout: float) -> bool:
        """Block until the instance reaches `state` (or ERROR/NOT_RUNNING); True if it reached it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.state is state:
                return True
            if self.state in (State.ERROR, State.NOT_RUNNING):
                return False
            time.sleep(0.05)
        return self.state is state

    def ready(self) -> bool:
        """True while the instance is RUNNING (every active task restored): the readiness probe."""
        return self.state is State.RUNNING

    def alive(self) -> bool:
        """True unless the instance is in ERROR or NOT_RUNNING: the liveness probe."""
        return self.state not in (State.ERROR, State.NOT_RUNNING)

    def local_task_ids(self) -> tuple[list[str], list[str]]:
        """(active, standby) task ids of this instance, as strings like `0_1`.

        Read under the state lock, which the rebalance callbacks hold while they open and close tasks: a
        reader on another thread (a worker's status reports, the HTTP endpoints) sees an assignment whole
        or not at all, never the tasks opened so far, nor a task map changing under its iteration."""
        if self._workers is not None:
            return self._workers.local_task_ids()
        with self.state_lock:
            thread = self.stream_thread
            if thread is None or thread.tm is None:
                return [], []
            return sorted(str(t) for t in thread.tm.active), sorted(str(t) for t in thread.tm.standby)

    # ----------------------------------------------------------------- interactive queries
    def store(self, name: str, store_type: Any, enable_stale_stores: bool = False) -> Any:
        """A read-only view of the local copies of store `name`, of the kind `store_type` builds
        (`QueryableStoreTypes.key_value()`, `.window_store()`, `.session_store()` from kappaflow.query)."""
        if self.state in (State.CREATED, State.PENDING_SHUTDOWN, State.NOT_RUNNING, State.ERROR):
            raise InvalidStateStoreError(
                f"cannot query store '{name}': the instance is {self.state.value}, not running"
            )
        provider = LocalStoreProvider(self, name, enable_stale_stores)
        if self._workers is not None:
            return self._forwarded_store(provider, store_type)
        return store_type.create(provider)

    def _forwarded_store(self, provider: LocalStoreProvider, store_type: Any) -> ForwardedStore:
        """A view whose methods run in the worker holding the key's task (every worker for ranges)."""
        name, stale = provider.name, provider.enable_stale_stores

        def call(method: str, args: tuple[Any, ...]) -> StoreCall:
            return StoreCall(name, store_type, stale, method, args)

        def task_of_key(key: Any) -> str | None:
            return None if provider.is_global else f"{provider.subtopology}_{provider.partition_of(key)}"

        assert self._workers is not None
        return ForwardedStore(self._workers, call, task_of_key)

    def changelog_topic(self, store: str) -> str:
        """The changelog topic of `store` (`<application.id>-<store>-changelog`)."""
        return changelog_topic(self.application_id, store)

    def store_key_serde(self, store: str) -> Serde[Any]:
        """The key serde the store uses (its own, or `default.key.serde`), for partitioning keys."""
        builder = self.topology.stores.get(store)
        if builder is None:
            raise InvalidStateStoreError(f"no store named '{store}' in this topology")
        serde: Serde[Any] | None = getattr(builder, "key_serde", None) or self.config.serde(
            "default.key.serde"
        )
        if serde is None:
            raise InvalidStateStoreError(f"store '{store}' has no key serde and no default.key.serde is set")
        return serde

    def store_partition_count(self, store: str) -> int | None:
        """How many partitions `store` has (its sub-topology's source partitions), or None while they are not
        known yet."""
        thread = self.stream_thread
        if thread is not None and thread.partition_counts:
            self._counts = dict(thread.partition_counts)
        if not self._counts:
            sub = self.topology_index.subtopology_of_store(store)
            topics = self.topology_index.source_topics_of(sub) if sub is not None else []
            self._counts = self._admin().partition_counts(topics)
        return self.topology_index.partition_count(store, self._counts)

    def _admin(self) -> InternalTopicManager:
        with self._group_lock:
            if self._group_admin is None:
                settings = client_configs(self.config, f"{self.client_id}-iq")["admin"]
                self._group_admin = InternalTopicManager(settings)
            return self._group_admin

    def _group_view(self, fresh: bool = False) -> Any:
        admin = self._admin()
        group = self._group  # close() may drop it meanwhile: work on this reference
        if group is None:
            index, standbys = self.topology_index, self.config.get_int("num.standby.replicas")
            static = bool(self.config.get_str("group.instance.id"))

            def interpret(stable: bool, members: list[Any]) -> Any:
                return interpret_group(stable, members, index, standbys, standby_tasks_for)

            describe = describe_with(admin, self.application_id, static)
            group = self._group = GroupMetadataSource(describe, interpret)
        return group.view(fresh)

    def metadata_for_all_clients(self) -> list[StreamsMetadata]:
        """Every instance of the application that set `application.server`, with what it hosts."""
        view = self._group_view()
        result: list[StreamsMetadata] = view.metadata
        return result

    def query_metadata_for_key(
        self, store: str, key: Any, key_serde: Serde[Any] | None = None
    ) -> KeyQueryMetadata:
        """Active host, standby hosts and partition of `key` in `store` (NOT_AVAILABLE-like, with
        `active_host=None`, while the group is rebalancing)."""
        if store in self.topology.global_stores:  # every instance holds all of it: ask this one
            return KeyQueryMetadata(self.host_info, frozenset(), -1)
        if self.topology_index.subtopology_of_store(store) is None:
            raise InvalidStateStoreError(f"no store named '{store}' in this topology")
        serde = key_serde or self.store_key_serde(store)
        raw = serde.serialize(self.changelog_topic(store), key)
        if raw is None:
            raise InvalidStateStoreError("a null key has no partition")
        self.store_partition_count(store)
        return key_metadata(self._group_view(), self.topology_index, store, raw, self._counts)

    def all_local_store_partition_lags(self) -> dict[str, dict[int, LagInfo]]:
        """store -> partition -> LagInfo for every local copy (active and standby).

        An active task that is running is caught up by definition (it writes its changelog); a restoring
        task or a standby lags by the changelog records it has not applied yet."""
        if self._workers is not None:
            return self._workers.lags()
        result: dict[str, dict[int, LagInfo]] = {}
        with self.state_lock:
            thread = self.stream_thread
            lags = thread.store_lags() if thread is not None else []
        for store, partition, position, end in lags:
            result.setdefault(store, {})[partition] = LagInfo(position, end)
        return result


def _worker_builder(
    topology: Topology, config: StreamsConfig, process_id: str | None
) -> Callable[[], KafkaStreams]:
    """What a forked worker runs: a single-threaded instance with its own transactional identity
    (`<parent process id>-<index>`, stable across the worker's replacements)."""

    def build() -> KafkaStreams:
        instance = KafkaStreams(topology, config)
        instance._is_worker = True
        if process_id is not None:
            instance._process_id = ProcessId(process_id, -1)
        return instance

    return build
