"""The stream thread: poll -> process -> commit, and what to do when any of it fails.

One thread drives every task of the process (librdkafka already does its network I/O on its own
threads; Python work per record is the cost, and the GIL makes more Python threads no faster). It reads
as the protocol it runs; the parts are handed to it: topic preparation (runner/topics.py), the producer
and its transactions (runner/producer.py), the commit protocol (runner/commit.py), rebalances
(runner/rebalance.py), restoration (runner/changelog_reader.py via the task manager) and standby
placement (runner/standbys.py), and the warm-up before it joins (runner/warmup.py).

Failures, and the answer to each (Kafka Streams' answers, with librdkafka's errors):
- TaskMigratedError (the group moved on, the producer was fenced or failed) and, under exactly_once_v2,
  TransactionAbortedError: abort the transaction (or replace the producer), close the tasks dirty (their
  transactional stores discard the uncommitted writes), reopen them (a tail restore) and resume from the
  committed offsets. Nothing uncommitted was visible to read_committed readers, so nothing doubles.
- ConsumerFailedError (a fatal consumer error, e.g. a static member fenced after a broker restart): the
  same, plus a new consumer that rejoins the group.
- A broker that cannot be reached: calls are retried up to `default.api.timeout.ms` (runner/retry.py).
- Committed offsets of an assignment never fetched (the group coordinator moved during the fetch, which
  librdkafka does not retry): the partitions that delivered nothing are assigned again
  (`RebalanceHandler.refetch_offsets`).
- Anything else ends the thread; the uncaught-exception handler of KafkaStreams decides what follows.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaError, KafkaException

from kappaflow.api.config import StreamsConfig
from kappaflow.api.errors import ProducerFencedError, TaskMigratedError, TransactionAbortedError
from kappaflow.api.metrics import Metrics
from kappaflow.api.processor import TaskId
from kappaflow.clients.admin import InternalTopicManager
from kappaflow.clients.kafka import WatermarkReader, client_configs, new_consumer
from kappaflow.runner.assembly import assemble, now_ms, wait_for_topics
from kappaflow.runner.backpressure import input_paused
from kappaflow.runner.commit_timing import next_commit_due, poll_wait
from kappaflow.runner.early_consumer import EarlyConsumer
from kappaflow.runner.fetch_lag import LAG_INTERVAL_S, FetchedLag, report_consumer_lag
from kappaflow.runner.global_state import GlobalStateUpdater
from kappaflow.runner.loop_ratios import LoopRatios
from kappaflow.runner.metadata import consumer_client_id
from kappaflow.runner.native_input import input_queues
from kappaflow.runner.retry import StoppedWhileWaitingError
from kappaflow.runner.routing import ConsumerFailedError, consumer_error, offsets_not_fetched, router
from kappaflow.runner.samples import SAMPLE_INTERVAL_S, sample_process, sample_rocksdb_sizes
from kappaflow.runner.tasks import TaskManager
from kappaflow.runner.warmup import JoinWarmup
from kappaflow.tasks import native
from kappaflow.tasks.drain import RawTuple
from kappaflow.tasks.native import InputQueues
from kappaflow.tasks.task import StreamTask
from kappaflow.topology.topology import Topology

log = logging.getLogger(__name__)
SERVE_INTERVAL_S = 1.0  # how often an idle thread's producers are polled (runner/thread.py)

BATCH = 1000
ASYNC_WAIT_S = 0.02  # longest wait for an asynchronous call's completion before polling for records
NO_RUNS: tuple[list[tuple[tuple[str, int], list[RawTuple]]], list[tuple[int, str]]] = ([], [])


class StreamThread:
    """The poll -> process -> commit loop of one process (Kafka Streams' StreamThread) and its answers
    to failures (the module docstring). It exists to run the protocol in one readable place; the
    roles are built once by `assembly.py` and handed to it: it owns the consumer, the loop's timers
    and the thread-level state it reports, and holds the producer, the task manager, the committer,
    the rebalance handler and the standby placer without reaching into them."""

    def __init__(
        self,
        topology: Topology,
        config: StreamsConfig,
        metrics: Metrics,
        client_id: str,
        on_state: Callable[[str], None],
        state_lock: threading.RLock | None = None,
        application_server: str = "",
        process_id: str | None = None,
    ) -> None:
        self.topology, self.config, self.metrics = topology, config, metrics
        self._on_state = on_state
        self.settings = client_configs(config, client_id, process_id)
        consumer_settings = self.settings["consumer"]
        consumer_settings["client.id"] = consumer_client_id(
            consumer_settings["client.id"], application_server
        )
        consumer_settings["error_cb"] = self._on_consumer_error
        # Interactive queries read stores from other threads while holding this lock (runner/local_stores).
        self.state_lock = state_lock if state_lock is not None else threading.RLock()
        self.api_timeout_s = config.get_int("default.api.timeout.ms") / 1000.0
        self.commit_interval = config.get_int("commit.interval.ms") / 1000.0
        self.poll_timeout = config.get_int("poll.ms") / 1000.0
        self._consumer_failure: KafkaError | None = None  # set by librdkafka's error callback
        self._last_lag = self._last_served = time.monotonic()
        # counted from each commit's start while the thread keeps up (runner/commit_timing.py)
        self._commit_due = self._last_lag + self.commit_interval
        self._caught_up = False  # found nothing left to process since the last commit
        self._last_sample = 0.0  # the first iteration samples
        self.loop_ratios = LoopRatios(metrics)  # the thread's poll/restore/process/punctuate/commit ratios
        self._with_async: list[StreamTask] = []  # the last iteration's running tasks with asynchronous nodes
        self.partition_counts: dict[str, int] = {}
        self.tm: TaskManager | None = None
        self.warmup: JoinWarmup | None = None
        self.global_state: GlobalStateUpdater | None = None
        # set when the commit of a clean shutdown failed: what was processed since the last commit is
        # processed again by whoever owns the tasks next, so the stop was not clean
        self.final_commit_error: BaseException | None = None
        # True until the topics are prepared: it holds no task, offset or store yet, so close() need not
        # wait for a broker it cannot reach (runner/streams.py)
        self.preparing = True
        self._sent = 0  # the collector's count of records sent, as last published
        self._async_paused: set[TaskId] = set()  # tasks paused at their asynchronous max_in_flight
        self._inputs: InputQueues | None = None  # the core's reader of the consumer's fetches, if used
        self._early: EarlyConsumer | None = None  # the first group consumer, until `_join` takes it
        log.info("drain loop: %s", native.describe(config.get_bool("kappaflow.native.enabled")))
        # consumed batches into runs of records: natively from the messages' structs where it can
        self._route = router(native.core(config.get_bool("kappaflow.native.enabled")), self._consumed_error)
        self._refetch_offsets = False  # set by `_consumed_error`, acted on after the batch is routed
        # Counters a dashboard plots exist from the start, at 0, so rate() and increase() see their
        # first increments (a series born at 1 has no increase to show).
        recovery = "transaction-aborts-total" if config.exactly_once else "task-rewinds-total"
        for counter in ("rebalances-total", "poll-seconds-total", "consumer-rejoins-total", recovery):
            metrics.increment(counter, 0)

    # ----------------------------------------------------------------- set-up
    def _assemble(self, stop: threading.Event) -> None:
        # the group consumer connects while the topics are prepared (runner/early_consumer.py)
        topology = self.topology
        sources = sorted(
            t for s in topology.sub_topologies() for t in s.source_topics if t not in topology.internal_topics
        )
        self._early = EarlyConsumer(self.settings["consumer"], sources[0] if sources else None)
        # the changelog reader's clients too: they connect by themselves (each has a group id, whose
        # coordinator librdkafka looks up at once), so created now their first requests find them ready
        restore: list[Consumer] = []
        bounds: list[WatermarkReader] = []
        try:
            restore.append(new_consumer(self.settings["restore"]))
            bounds.append(WatermarkReader(self.settings["restore"]))
            admin = InternalTopicManager(self.settings["admin"])
            topics = wait_for_topics(self.topology, self.config, admin, stop)
            self.preparing = False
            if stop.is_set():  # stopped meanwhile: end before holding anything (close() may not wait)
                raise StoppedWhileWaitingError("stopped while preparing topics")
            parts = assemble(
                self.topology, self.config, self.settings, self.metrics, self.state_lock, self.commit,
                self._assignment_changed, admin, topics, restore[0], bounds[0],
            )  # fmt: skip
        except BaseException:
            self._drop_early()
            closers = [c.close for c in restore] + [b.close for b in bounds]
            for close in closers:
                with contextlib.suppress(RuntimeError, KafkaException):  # closed already (by assemble)
                    close()
            raise
        self.subscription, self.partition_counts = parts.topics.subscription, parts.topics.partition_counts
        self.purger, self.producer, self.committer = parts.purger, parts.producer, parts.committer
        self.collector = parts.collector
        self.tm, self.global_state = parts.tasks, parts.global_state
        self.rebalance, self.standbys, self.admin = parts.rebalance, parts.standbys, parts.admin
        self.warmup = parts.warmup
        self.held_inputs = parts.held_inputs

    def _join(self) -> None:
        """A new group consumer, subscribed; the rebalance handler opens tasks as partitions arrive."""
        self._consumer_failure = None
        early, self._early = self._early, None
        consumer = early.take() if early is not None else new_consumer(self.settings["consumer"])
        self.consumer = consumer
        self.fetched_lag = FetchedLag(consumer)
        rebalance = self.rebalance
        self._inputs = rebalance.inputs = (
            input_queues(native.core(self.config.get_bool("kappaflow.native.enabled")), consumer)
            if self.config.get_bool("kappaflow.native.consume.enabled")
            else None
        )
        consumer.subscribe(
            self.subscription, on_assign=rebalance.on_assign, on_revoke=rebalance.on_revoke,
            on_lost=rebalance.on_lost,
        )  # fmt: skip
        log.info("subscribed to %s", ", ".join(self.subscription))
        self._on_state("REBALANCING")

    def _assigned(self) -> list[tuple[str, int]]:
        return self.rebalance.assigned

    def _drop_early(self) -> None:
        """Close the early consumer if the thread ends before it joins the group."""
        early, self._early = self._early, None
        if early is not None:
            early.close()

    # ----------------------------------------------------------------- the loop
    def run(self, stop: threading.Event) -> None:
        self._assemble(stop)
        self._on_state("REBALANCING")
        assert self.warmup is not None
        try:
            self.warmup.run(stop)  # a joining member first catches up the tasks it gets (runner/warmup.py)
        except BaseException:
            self._drop_early()
            raise
        self._join()
        clean = False
        try:
            while not stop.is_set():
                try:
                    self._iteration()
                except ConsumerFailedError as exc:
                    self._redo(exc, rejoin=True)
                except (TaskMigratedError, TransactionAbortedError) as exc:
                    self._redo(exc, rejoin=False)
            clean = True
        finally:
            self._shutdown(clean)

    def _iteration(self) -> None:
        tm, consumer = self.tm, self.consumer
        assert tm is not None
        busy = tm.has_changelog_work() and bool(tm.restoring())
        # What is already fetched, at once; only when nothing is, wait (up to poll.ms) for the first record.
        # consume(BATCH, timeout) would block until BATCH records arrive, idling while a repartition
        # topic trickles back.
        started = time.perf_counter()  # the iteration's start and the poll's
        # confluent-kafka's consume() first, always: it serves the rebalance, error, log and statistics
        # callbacks; with the native reader on, the records come from the core's queue after it
        inputs = self._inputs
        messages = consumer.consume(BATCH, 0)
        runs, errors = inputs.consume(BATCH - len(messages), 0.0) if inputs is not None else NO_RUNS
        if not messages and not runs and not busy:
            self._caught_up = True
            # calls are pending only in tasks that had asynchronous nodes when they last processed
            if self._with_async and tm.async_pending():  # wake for a completed call, or soon for records
                tm.async_executor.wait_for_completion(min(self.poll_timeout, ASYNC_WAIT_S))
            else:  # up to poll.ms, but not past the next commit's due time
                pending = any(t.commit_needed() for t in tm.running())
                wait = poll_wait(self.poll_timeout, time.monotonic(), self._commit_due, pending)
                if inputs is not None and self.rebalance.assigned:
                    # the records arrive on the core's queue: wait there, then let confluent-kafka serve
                    # what came meanwhile (a rebalance waits for it up to this wait, at most poll.ms)
                    runs, errors = inputs.consume(BATCH, wait)
                    messages = consumer.consume(BATCH, 0)
                else:
                    messages = consumer.consume(1, wait)
        poll_seconds = time.perf_counter() - started
        self.metrics.increment("poll-seconds-total", poll_seconds)
        self.rebalance.raise_error()
        if self._consumer_failure is not None:
            raise ConsumerFailedError(f"the consumer failed fatally: {self._consumer_failure}")
        with self.state_lock:
            if self.global_state is not None:
                self.global_state.poll()
            for code, reason in errors:  # what an erroneous Message would have carried
                self._consumed_error(KafkaError(code, reason))
            for tp, records in self._route(messages):
                tm.add_records(tp, records)
            for tp, records in runs:
                tm.add_records(tp, records)
            if self._refetch_offsets:  # after the batch: the positions count what it delivered
                self._refetch_offsets = False
                self.rebalance.refetch_offsets(consumer)
            restoring = time.perf_counter()
            for managed in tm.restore_step(timeout=0.02 if busy else 0.0):
                consumer.resume(self.rebalance.partitions_of(managed.task.id))
            restore_seconds = time.perf_counter() - restoring
            self.standbys.maybe_place(consumer.memberid, self._assigned)
            running = tm.running()
            # the tasks with asynchronous nodes: most topologies have none, and then no asynchronous check
            # runs per task in this iteration
            self._with_async = with_async = tm.running_with_async()
            process_seconds, punctuate_seconds = self._process(running, bool(with_async))
            if with_async:
                self._pause_saturated(with_async)
            if runs:
                self._sample_e2e_latency(runs[-1][1][-1][1])
            elif messages:
                kind, ts = messages[-1].timestamp()
                self._sample_e2e_latency(ts if kind != TIMESTAMP_NOT_AVAILABLE else -1)
            commit_seconds = 0.0
            scheduled = time.monotonic() >= self._commit_due
            if scheduled or any(t.context.commit_requested for t in running):
                committing = time.perf_counter()
                self.commit(scheduled)
                commit_seconds = time.perf_counter() - committing
        self.loop_ratios.record(
            started, poll_seconds, restore_seconds, process_seconds, punctuate_seconds, commit_seconds
        )
        self._update_state()
        self._periodic(time.monotonic())

    def _periodic(self, now: float) -> None:
        """What runs once per interval, each checked against one clock reading per iteration: serving
        the producers' reports, consumer lag, the inputs' hanging-transaction check, process samples."""
        tm, consumer = self.tm, self.consumer
        assert tm is not None
        if now - self._last_served >= SERVE_INTERVAL_S:
            # nothing else polls an idle thread's producers: their librdkafka log lines would pile up
            self._last_served = now
            self.producer.serve_reports()
            self._publish_sent()
        if now - self._last_lag >= LAG_INTERVAL_S and self.rebalance.assigned:
            self._last_lag = now
            report_consumer_lag(consumer, self.rebalance.assigned, self.metrics)
        if self.held_inputs is not None and self.held_inputs.due(now):
            # the running tasks' inputs, listed only when a check is due
            self.held_inputs.check(consumer, [tp for t in tm.running() for tp in tm.partitions_of(t.id)], now)
        if now - self._last_sample >= SAMPLE_INTERVAL_S:
            self._last_sample = now
            sample_process(self.metrics)
            sample_rocksdb_sizes(self.metrics, tm.task_dirs())
            tm.publish_task_lags()

    def _sample_e2e_latency(self, ts: int) -> None:
        """End-to-end latency, sampled once per batch: wall-clock time now, once the batch is processed,
        minus the timestamp of the batch's last record (Kafka Streams' record-e2e-latency, which it
        measures per record; here one sample per batch keeps the per-record path free of it); `ts` is -1
        when the record has none."""
        if ts >= 0:
            self.metrics.set_gauge("record-e2e-latency-ms", float(max(0, now_ms() - ts)))

    def _process(self, running: list[StreamTask], with_async: bool) -> tuple[float, float]:
        """Process what each running task has buffered (`with_async`: some task has asynchronous nodes,
        whose completed calls are emitted first), then the system-time punctuations due; return the
        seconds spent in each of the two."""
        count, started, now = 0, time.perf_counter(), now_ms()
        for task in running:
            if with_async and task.has_async_results():  # emitted before new records
                self.producer.begin()
                task.deliver_async()
            if task.has_buffered():
                self.producer.begin()
                count += task.process_buffered(fetched_lag=self.fetched_lag, now_ms=now)
                task.publish_metrics()  # per batch, so scrapes see progress between commits
        punctuating = time.perf_counter()
        for task in running:
            if task.wall_clock_schedules:
                self.producer.begin()
                task.maybe_punctuate_system_time(now)
        punctuated = time.perf_counter() - punctuating
        processed = punctuating - started
        if count:
            self.metrics.record_processing(count, processed)
        return processed, punctuated

    def _pause_saturated(self, with_async: list[StreamTask]) -> None:
        """Backpressure: pause the input partitions of a task whose asynchronous nodes are at
        `max_in_flight` with a batch queued behind them, resume them once the queue is down to half a
        batch (runner/backpressure.py says why not per record). Only the running tasks that have
        asynchronous nodes are given: no other task is ever paused here."""
        for task in with_async:
            was = task.id in self._async_paused
            paused = input_paused(was, task.async_saturated(), task.buffered(), BATCH)
            if paused == was:
                continue
            partitions = self.rebalance.partitions_of(task.id)
            if paused:
                self.consumer.pause(partitions)
                self._async_paused.add(task.id)
                self.metrics.increment("async-backpressure-pauses-total", task=str(task.id))
            else:
                self.consumer.resume(partitions)
                self._async_paused.discard(task.id)

    def commit(self, scheduled: bool = False) -> None:
        """Commit every running task with something to commit (runner/commit.py has the protocol).

        `scheduled`: the commit interval has passed. Any other commit (a task's request, a revocation's,
        the final one) leaves the schedule as it was (runner/commit_timing.py)."""
        tm = self.tm
        assert tm is not None
        started = time.monotonic()
        if self.producer.exactly_once:
            self._complete_async_calls(tm)
        tasks = [t for t in tm.running() if t.commit_needed()]
        offsets = self.committer.commit(tasks, self.consumer)
        tm.checkpoint_standbys()
        if self.global_state is not None:
            self.global_state.checkpoint()
        self.purger.committed(offsets)
        self._commit_due = next_commit_due(
            self._commit_due, started, time.monotonic(), self.commit_interval, self._caught_up, scheduled
        )
        if scheduled:
            self._caught_up = False
        self._publish_sent()

    def _publish_sent(self) -> None:
        """The collector counts records sent inline, per record; the metric follows per interval."""
        sent = self.collector.sent
        if sent > self._sent:
            self.metrics.increment("records-sent-total", sent - self._sent)
            self._sent = sent

    # ----------------------------------------------------------------- failures
    def _consumed_error(self, err: KafkaError) -> None:
        """An error consumed in place of a record: committed offsets never fetched (librdkafka would
        not ask again, `routing.offsets_not_fetched`) are fetched again after this batch; the rest is
        `routing.consumer_error`'s (logged, or raised when fatal)."""
        if offsets_not_fetched(err):
            log.warning("consumer error: %s", err)
            self._refetch_offsets = True
            return
        consumer_error(err)

    def _on_consumer_error(self, err: KafkaError) -> None:
        """librdkafka's error callback: a fatal error is acted on by the loop, the rest it retries."""
        log.log(logging.ERROR if err.fatal() else logging.DEBUG, "consumer error: %s", err)
        if err.fatal():
            self._consumer_failure = err

    def _redo(self, exc: BaseException, rejoin: bool) -> None:
        """Drop everything since the last commit and redo it (see the module docstring)."""
        log.warning("redoing the work since the last commit after: %s", exc)
        self.metrics.increment(
            "transaction-aborts-total" if self.producer.exactly_once else "task-rewinds-total"
        )
        with self.state_lock:
            self.producer.reset(fenced=isinstance(exc, ProducerFencedError))
            resume = self.rebalance.close_all_dirty()
            self._async_paused.clear()
            if rejoin:
                self.metrics.increment("consumer-rejoins-total")
                self._leave(clean=False)
                self._join()
            else:
                self.rebalance.reopen_tasks(self.consumer, resume, self.api_timeout_s)

    # ----------------------------------------------------------------- state and shutdown
    def _assignment_changed(self, assigned: bool) -> None:
        self._async_paused.clear()  # the tasks and the consumer's pauses start over
        if assigned:
            self.metrics.increment("rebalances-total")
            self.fetched_lag.reset()
            self.standbys.schedule()
        self._update_state()

    def _update_state(self) -> None:
        tm = self.tm
        assert tm is not None
        restoring = tm.publish_task_counts()
        # An instance with nothing assigned (more instances than partitions) is RUNNING too: it is a
        # healthy, idle member, and readiness must not hold up a rollout because of it.
        self._on_state("RUNNING" if self.rebalance.in_group and not restoring else "REBALANCING")

    def store_lags(self) -> list[tuple[str, int, int, int]]:
        return self.tm.store_lags() if self.tm is not None else []

    def task_roles(self) -> dict[str, tuple[str, int]]:
        """task id -> (role, lag) of every task held here; a standby still warming up before this
        member joins is `warmup`."""
        if self.tm is None:
            return {}
        roles = self.tm.task_roles()
        for task_id in self.warmup.warming if self.warmup is not None else []:
            role, lag = roles.get(str(task_id), ("", 0))
            if role == "standby":
                roles[str(task_id)] = ("warmup", lag)
        return roles

    def _leave(self, clean: bool) -> None:
        """Close the group consumer; its revocation callback commits only when `clean`."""
        self.rebalance.dirty = not clean
        if self._inputs is not None:
            self._inputs.close()  # before the consumer: its queue is one of the consumer's rd_kafka_t
            self._inputs = self.rebalance.inputs = None
        try:
            self.consumer.close()  # leaves the group (static members stay until the session times out)
        except Exception:
            log.exception("closing the consumer failed")
        self.rebalance.forget()
        self.rebalance.dirty = False

    def _complete_async_calls(self, tm: TaskManager) -> None:
        """exactly_once_v2: a commit first lets every asynchronous call in flight complete and emits its
        results into the transaction. Holding offsets back at the oldest call is not enough there: what
        ran before the asynchronous node for the records after it (a count's store and changelog, another
        branch's sink) is in the transaction already, and would be applied twice after a crash replayed
        those records (the async kill loop of tests/kafka/test_chaos.py found it). A call that does not
        end within `default.api.timeout.ms` makes the commit fail: the work since the last one is redone."""
        deadline = time.monotonic() + self.api_timeout_s
        for task in tm.running():
            if (
                task.async_calls.nodes
                and task.async_pending()
                and not task.finish_async(max(0.0, deadline - time.monotonic()), self.producer.begin)
            ):
                raise TransactionAbortedError(
                    f"task {task.id}: asynchronous calls still running after default.api.timeout.ms "
                    f"({self.api_timeout_s:.0f} s) at a commit: redoing the work since the last commit"
                )

    def _finish_async(self, tm: TaskManager) -> None:
        """A clean shutdown lets the asynchronous calls in flight complete and emits their results, up
        to `default.api.timeout.ms`; what is left then is cancelled when the tasks close, uncommitted
        (the commit stops at the oldest of them), and redone by the next owner."""
        deadline = time.monotonic() + self.api_timeout_s
        for task in tm.running():
            left = max(0.0, deadline - time.monotonic())
            if not task.finish_async(left, self.producer.begin):
                log.warning("task %s: asynchronous calls still running at shutdown are cancelled", task.id)

    def _shutdown(self, clean: bool) -> None:
        tm = self.tm
        if tm is None:
            return
        if clean:
            try:
                self._finish_async(tm)
                self.commit()
            except Exception as exc:
                log.exception("final commit failed")
                self.final_commit_error = exc
                clean = False
        self.producer.close()  # aborts a transaction still open
        with self.state_lock:
            tm.close(clean)
        if self.global_state is not None:
            self.global_state.close(clean)
            self.global_state = None  # it holds the collector: let the producer go with it
        self._leave(clean=False)  # committed above: nothing is left to commit on revocation
        # confluent-kafka clients have no close(): dropping the last references destroys them now,
        # instead of leaving background threads that keep reconnecting until interpreter exit.
        del self.producer, self.committer, self.rebalance, self.admin
        self.tm = None
