"""The stream thread: poll -> process -> commit, rebalances, restoration, standbys and commits.

One thread drives every task of the process (librdkafka already does its network I/O on its own
threads; Python work per record is the cost, and the GIL makes more Python threads no faster).

Commit protocol, at_least_once (numbered as in the architecture notes):
  1. flush every task's stores (the record cache forwards and logs its dirty entries),
  2. flush the producer, so changelog and sink records are acknowledged,
  3. commit the consumed offsets, synchronously,
  4. checkpoint each store at the changelog offset Kafka acknowledged.
exactly_once_v2: one transactional producer; 1. flush stores, 2. flush, 3. send_offsets_to_transaction
with the consumer's group metadata, 4. commit_transaction, 5. checkpoint. A failed commit or an abortable
error aborts the transaction and rewinds: tasks are closed dirty (their transactional stores discard the
uncommitted writes), positions reset to the committed offsets and the tasks restore the changelog tail
past their stores' last commit (read_committed). A fenced producer
is replaced by a new one (init_transactions fences the old epoch) and the same rewind follows.

Standby placement: after each rebalance the thread reads the group's members and their assignments from
the coordinator (describe_consumer_groups), sorts members by group.instance.id (or member id), and places
the standbys of a task owned by member i on members i+1 .. i+k (mod n, never the owner), k =
num.standby.replicas. Every instance computes the same answer from the same membership, with no extra
protocol; a member that sees a stale group view just retries shortly after.

Repartition topics are the application's own: as in Kafka Streams, records below the committed offsets
are deleted every `repartition.purge.interval.ms` (30 s), so they hold only what is still unprocessed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from kappaflow.api.config import StreamsConfig
from kappaflow.api.metrics import Metrics
from kappaflow.api.processor import TaskId
from kappaflow.api.record import Headers
from kappaflow.clients.admin import InternalTopicManager, TopicPlan
from kappaflow.clients.kafka import (
    KafkaRecordCollector,
    ProductionError,
    client_configs,
    is_consumer_protocol,
    new_consumer,
    new_producer,
)
from kappaflow.runner.fetch_lag import FetchedLag
from kappaflow.runner.global_state import GlobalStateUpdater
from kappaflow.runner.metadata import consumer_client_id
from kappaflow.runner.placement import standby_tasks_for
from kappaflow.runner.routing import raw_records_by_partition
from kappaflow.runner.tasks import ManagedTask, TaskManager
from kappaflow.state.cache import ThreadCache
from kappaflow.tasks.handlers import FailedRecord, resolve_handler
from kappaflow.tasks.task import TaskState
from kappaflow.topology.topology import Topology

log = logging.getLogger(__name__)

BATCH = 1000
# Commit errors that mean "this member's generation is over": a rebalance, not a failure.
_MIGRATED = {
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError.FENCED_INSTANCE_ID,
    KafkaError._STATE,
}
LAG_INTERVAL_S = 10.0


def now_ms() -> int:
    return int(time.time() * 1000)


class StreamThread:
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
        self.topology = topology
        self.config = config
        self.metrics = metrics
        self.client_id = client_id
        self._on_state = on_state
        self.app_id = config.application_id
        self.eos = config.exactly_once
        self.settings = client_configs(config, client_id, process_id)
        consumer_settings = self.settings["consumer"]
        consumer_settings["client.id"] = consumer_client_id(
            consumer_settings["client.id"], application_server
        )
        # Interactive queries read stores from other threads while holding this lock (runner/local_stores).
        self.state_lock = state_lock if state_lock is not None else threading.RLock()
        self.commit_interval = config.get_int("commit.interval.ms") / 1000.0
        self.poll_timeout = config.get_int("poll.ms") / 1000.0
        self.num_standbys = config.get_int("num.standby.replicas")
        self.admin = InternalTopicManager(self.settings["admin"])
        # classic `range` rebalances are eager (everything revoked, then everything assigned); the
        # KIP-848 protocol hands out and takes back partitions incrementally.
        self.incremental = is_consumer_protocol(self.settings["consumer"])
        self.assigned: list[tuple[str, int]] = []
        self._in_txn = False
        self._standby_due: float | None = None
        self._fatal: BaseException | None = None
        self._last_commit = time.monotonic()
        self._last_lag = 0.0
        self._last_purge = time.monotonic()
        self._purge_interval = float(config.get("repartition.purge.interval.ms", 30000)) / 1000.0
        self._purgeable: dict[tuple[str, int], int] = {}
        self.consumer: Consumer | None = None
        self.fetched_lag: FetchedLag | None = None
        self.tm: TaskManager | None = None
        self._partition_tasks: dict[tuple[str, int], TaskId] = {}
        self._repartition_topics: set[str] = set()
        self._in_group = False  # an assignment (possibly empty) is in force
        self.partition_counts: dict[str, int] = {}
        self.global_state: GlobalStateUpdater | None = None

    # ----------------------------------------------------------------- set-up
    def prepare_topics(self) -> list[str]:
        """Check source topics, create/validate internal ones; return the topics to subscribe to."""
        topology, app = self.topology, self.app_id
        described = topology.describe().to_dict()
        user_sources = [
            t for s in topology.sub_topologies() for t in s.source_topics if t not in topology.internal_topics
        ] + [g.source.topics[0] for g in topology.global_stores.values()]
        user_counts = self.admin.require_topics(user_sources)
        plans = [
            TopicPlan(
                f"{app}-{entry['name']}",
                entry["type"],
                {k: str(v) for k, v in entry["config"].items()},
                entry.get("partitions"),
                list(entry.get("partitions_from", [])),
            )
            for entry in described["internal_topics"]
        ]
        wanted = self.admin.resolve_counts(plans, user_counts)
        self.admin.ensure(
            plans,
            wanted,
            self.config.get_bool("kappaflow.internal.topics.create"),
            self.config.get_int("replication.factor"),
        )
        counts = {**user_counts, **wanted}
        groups = [[topology.resolve_topic(t, app) for t in g] for g in topology.copartition_groups]
        self.admin.check_copartitioned(groups, counts)
        self.partition_counts = counts
        self._repartition_topics = {p.name for p in plans if p.kind == "repartition"}
        return sorted(
            {topology.resolve_topic(t, app) for s in topology.sub_topologies() for t in s.source_topics}
        )

    def _production_handler(self) -> Callable[[Any, Any], bool]:
        handler = resolve_handler(
            self.config.get("production.exception.handler"), "production.exception.handler"
        )

        def decide(err: Any, msg: Any) -> bool:
            failed = FailedRecord(
                msg.topic(), msg.partition(), -1, -1, msg.key(), msg.value(), Headers(msg.headers() or [])
            )
            return handler(ProductionError(str(err)), failed).name == "CONTINUE"

        return decide

    def _new_producer(self) -> None:
        producer = new_producer(self.settings["producer"])
        if self.eos:
            producer.init_transactions(60)
        handler = None if self.eos else self._production_handler()
        self.collector = KafkaRecordCollector(producer, self.admin, handler)
        if self.tm is not None:
            self.tm.collector = self.collector

    # ----------------------------------------------------------------- the loop
    def run(self, stop: threading.Event) -> None:
        topics = self.prepare_topics()
        self._new_producer()
        restore = new_consumer(self.settings["restore"])
        if self.topology.global_stores:
            self.global_state = GlobalStateUpdater(
                self.topology, self.config, self.collector, self.metrics, self.settings["restore"], now_ms
            )
            self.global_state.bootstrap()
        cache_bytes = self.config.get_int("statestore.cache.max.bytes")
        self.tm = TaskManager(
            self.topology,
            self.config,
            self.collector,
            ThreadCache(cache_bytes),
            self.metrics,
            restore,
            now_ms,
            self.global_state.stores if self.global_state else None,
            high_watermarks=self.admin.high_watermarks if self.eos else None,
        )
        consumer = self.consumer = new_consumer(self.settings["consumer"])
        self.fetched_lag = FetchedLag(consumer)
        consumer.subscribe(
            topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )
        log.info("subscribed to %s", ", ".join(topics))
        self._on_state("REBALANCING")
        clean = False
        try:
            while not stop.is_set():
                self._iteration(consumer)
            clean = True
        finally:
            self._shutdown(consumer, restore, clean)

    def _iteration(self, consumer: Consumer) -> None:
        tm = self.tm
        assert tm is not None
        busy = tm.has_changelog_work() and bool(tm.restoring())
        # What is already fetched, at once; only when nothing is, wait (up to poll.ms) for the first record.
        # consume(BATCH, timeout) would block until BATCH records arrive, idling while a repartition
        # topic trickles back.
        messages = consumer.consume(BATCH, 0)
        if not messages and not busy:
            messages = consumer.consume(1, self.poll_timeout)
        if self._fatal is not None:
            raise self._fatal
        with self.state_lock:
            if self.global_state is not None:
                self.global_state.poll()
            self._locked_iteration(consumer, messages, busy)

    def _locked_iteration(self, consumer: Consumer, messages: list[Any], busy: bool) -> None:
        tm = self.tm
        assert tm is not None
        try:
            self._route(messages)
            for managed in tm.restore_step(timeout=0.02 if busy else 0.0):
                self._resume(managed)
            if self._standby_due is not None and time.monotonic() >= self._standby_due:
                self._place_standbys()
            processed = self._process()
            self._punctuate()
            if time.monotonic() - self._last_commit >= self.commit_interval or self._commit_requested():
                self.commit()
        except (KafkaException, ProductionError, SystemError) as exc:
            # SystemError: confluent-kafka reports a fatal producer error raised around a delivery
            # callback this way; under EOS it is recovered like any other transactional failure.
            if not self.eos:
                raise
            self._recover(exc)
            return
        if processed:
            self.metrics.increment("poll-loops-total")
        self._update_state()
        self._maybe_report_lag(consumer)

    def _route(self, messages: list[Any]) -> None:
        tm = self.tm
        assert tm is not None
        for tp, records in raw_records_by_partition(messages):
            task_id = self._partition_tasks.get(tp)
            managed = tm.active.get(task_id) if task_id is not None else None
            if managed is not None:
                managed.task.add_records(tp[0], tp[1], records)

    def _process(self) -> int:
        tm = self.tm
        assert tm is not None
        count = 0
        started = time.perf_counter()
        now = now_ms()
        for managed in tm.active.values():
            task = managed.task
            if task.state is not TaskState.RUNNING or not task.buffered():
                continue
            self._ensure_txn()
            count += task.process_buffered(fetched_lag=self.fetched_lag, now_ms=now)
            task.publish_metrics()  # per batch, so scrapes see progress between commits
        if count:
            elapsed = time.perf_counter() - started
            self.metrics.increment("process-records-total", count)
            self.metrics.increment("process-seconds-total", elapsed)
            self.metrics.set_gauge("process-latency-avg-ms", elapsed * 1000.0 / count)
        return count

    def _punctuate(self) -> None:
        tm = self.tm
        assert tm is not None
        now = now_ms()
        for managed in tm.active.values():
            if managed.task.context.system_time_punctuations and managed.task.state is TaskState.RUNNING:
                self._ensure_txn()
                managed.task.maybe_punctuate_system_time(now)

    def _commit_requested(self) -> bool:
        tm = self.tm
        return tm is not None and any(m.task.context.commit_requested for m in tm.active.values())

    def _ensure_txn(self) -> None:
        if self.eos and not self._in_txn:
            self.collector.producer.begin_transaction()
            self._in_txn = True

    # ----------------------------------------------------------------- commit
    def commit(self) -> None:
        tm, consumer = self.tm, self.consumer
        assert tm is not None and consumer is not None
        started = time.perf_counter()
        tasks = [
            m for m in tm.active.values() if m.task.state is TaskState.RUNNING and m.task.commit_needed()
        ]
        offsets: dict[tuple[str, int], int] = {}
        if tasks:
            self._ensure_txn()
        for managed in tasks:
            offsets.update(managed.task.prepare_commit())
        tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        self.collector.flush()
        if self.eos:
            if self._in_txn:
                if tps:
                    self.collector.producer.send_offsets_to_transaction(
                        tps, consumer.consumer_group_metadata(), 30
                    )
                self.collector.producer.commit_transaction(60)
                self._in_txn = False
        elif tps:
            try:
                consumer.commit(offsets=tps, asynchronous=False)
            except KafkaException as exc:
                if exc.args[0].code() not in _MIGRATED:
                    raise
                # The group moved on (a rebalance is under way): the tasks will be revoked by the next
                # poll and their uncommitted input reprocessed by the new owner, as at-least-once allows.
                log.warning("commit failed, tasks migrated in a rebalance: %s", exc)
                return
        for managed in tasks:
            managed.task.post_commit(self._changelog_offsets(managed))
        tm.checkpoint_standbys()
        if self.global_state is not None:
            self.global_state.checkpoint()
        self._purgeable.update((tp, o) for tp, o in offsets.items() if tp[0] in self._repartition_topics)
        if self._purgeable and time.monotonic() - self._last_purge >= self._purge_interval:
            self._last_purge = time.monotonic()
            self.admin.purge(self._purgeable)
            self._purgeable = {}
        self._last_commit = time.monotonic()
        if tasks:
            elapsed_ms = (time.perf_counter() - started) * 1000.0
            self.metrics.increment("commit-total")
            self.metrics.increment("commit-seconds-total", elapsed_ms / 1000.0)
            self.metrics.set_gauge("commit-latency-ms", elapsed_ms)

    def _changelog_offsets(self, managed: ManagedTask) -> dict[str, int]:
        written = self.collector.written
        return {store: written[tp] + 1 for tp, store in managed.changelogs.items() if tp in written}

    # ----------------------------------------------------------------- rebalance callbacks
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        with self.state_lock:
            self._assign(consumer, partitions)

    def _assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        try:
            tm = self.tm
            assert tm is not None
            self._in_group = True
            if self.fetched_lag is not None:
                self.fetched_lag.reset()
            added = [(tp.topic, tp.partition) for tp in partitions]
            self.assigned = sorted(set(self.assigned) | set(added)) if self.incremental else added
            by_task = tm.task_ids_for(self.assigned)
            self._partition_tasks = {tp: task_id for task_id, tps in by_task.items() for tp in tps}
            restoring: list[TopicPartition] = []
            for task_id, tps in sorted(by_task.items(), key=lambda kv: (kv[0].subtopology, kv[0].partition)):
                if task_id in tm.active:
                    continue
                managed = tm.create_active(task_id)
                if managed.task.state is TaskState.RESTORING:
                    restoring.extend(TopicPartition(t, p) for t, p in tps)
            if self.incremental:
                consumer.incremental_assign(partitions)
            else:
                consumer.assign(partitions)
            if restoring:
                consumer.pause(restoring)
            log.info("assigned %d partitions: tasks %s", len(self.assigned), sorted(str(t) for t in by_task))
            self._standby_due = time.monotonic() if self.num_standbys > 0 else None
            self._update_state()
        except BaseException as exc:  # an exception must not vanish inside librdkafka's callback
            self._fatal = exc

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        with self.state_lock:
            self._revoke(consumer, partitions)

    def _revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = {(tp.topic, tp.partition) for tp in partitions}
        try:
            if not self.incremental:
                self._in_group = False
                self._on_state("REBALANCING")
            if self._fatal is None and revoked:
                self.commit()
            self._close_tasks(clean=self._fatal is None, partitions=revoked)
        except BaseException as exc:
            log.exception("commit on revocation failed")
            self._close_tasks(clean=False, partitions=revoked)
            if self._fatal is None and not isinstance(exc, KafkaException | ProductionError):
                self._fatal = exc
        if self.incremental and partitions:
            consumer.incremental_unassign(partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.warning("partitions lost (session expired or fenced): closing tasks without committing")
        with self.state_lock:
            self._lose(consumer, partitions)

    def _lose(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._in_group = False
        if self.eos and self._in_txn:
            self._abort_quietly()
        self._close_tasks(clean=False)
        if self.incremental and partitions:
            consumer.incremental_unassign(partitions)

    def _close_tasks(self, clean: bool, partitions: set[tuple[str, int]] | None = None) -> None:
        """Close the tasks owning `partitions` (all tasks when None) and forget those partitions."""
        tm = self.tm
        assert tm is not None
        doomed = (
            set(tm.active)
            if partitions is None
            else {self._partition_tasks[tp] for tp in partitions if tp in self._partition_tasks}
        )
        for task_id in doomed:
            try:
                tm.close_active(task_id, clean)
            except Exception:
                log.exception("task %s: error closing", task_id)
        self._partition_tasks = {tp: t for tp, t in self._partition_tasks.items() if t not in doomed}
        self.assigned = sorted(self._partition_tasks) if partitions is not None and self.incremental else []

    def _resume(self, managed: ManagedTask) -> None:
        consumer = self.consumer
        assert consumer is not None
        tps = [
            TopicPartition(t, p) for (t, p), tid in self._partition_tasks.items() if tid == managed.task.id
        ]
        if tps:
            consumer.resume(tps)

    def _update_state(self) -> None:
        tm = self.tm
        if tm is None:
            return
        states: dict[str, int] = {"RUNNING": 0, "RESTORING": 0}
        for managed in tm.active.values():
            states[managed.task.state.value] = states.get(managed.task.state.value, 0) + 1
        for name, count in states.items():
            self.metrics.set_gauge("active-tasks", count, state=name)
        self.metrics.set_gauge("standby-tasks", len(tm.standby))
        # An instance with nothing assigned (more instances than partitions) is RUNNING too: it is a
        # healthy, idle member, and readiness must not hold up a rollout because of it.
        if self._in_group and not tm.restoring():
            self._on_state("RUNNING")
        else:
            self._on_state("REBALANCING")

    # ----------------------------------------------------------------- standbys
    def _place_standbys(self) -> None:
        tm, consumer = self.tm, self.consumer
        assert tm is not None and consumer is not None
        self._standby_due = None
        try:
            state, members = self.admin.group_members(self.app_id)
        except Exception as exc:
            log.warning("cannot describe group for standby placement (%s); retrying", exc)
            self._standby_due = time.monotonic() + 1.0
            return
        me = consumer.memberid()
        mine = next((m for m in members if m.member_id == me), None)
        if mine is None or sorted(mine.assignment) != sorted(self.assigned) or state.upper() != "STABLE":
            self._standby_due = time.monotonic() + 0.5
            return
        wanted = standby_tasks_for(me, members, tm.task_ids_for, self.num_standbys)
        wanted -= set(tm.active)
        for task_id in list(tm.standby):
            if task_id not in wanted:
                tm.close_standby(task_id)
        for task_id in sorted(wanted, key=lambda t: (t.subtopology, t.partition)):
            if self.topology.sub_topologies()[task_id.subtopology].stores:
                tm.create_standby(task_id)

    # ----------------------------------------------------------------- EOS recovery
    def _abort_quietly(self) -> bool:
        """Abort the open transaction; False when the producer cannot (fenced or fatally failed)."""
        self._in_txn = False
        try:
            self.collector.producer.abort_transaction(30)
        except (KafkaException, SystemError) as exc:
            log.warning("abort_transaction failed: %s", exc)
            return False
        return True

    def _recover(self, exc: BaseException) -> None:
        """Abort (or replace a fenced producer), close the tasks dirty and reopen them (a tail restore),
        rewind to the committed offsets."""
        tm, consumer = self.tm, self.consumer
        assert tm is not None and consumer is not None
        log.warning("exactly-once: aborting the transaction and rewinding after: %s", exc)
        self.metrics.increment("transaction-aborts-total")
        if not self._abort_quietly():
            # Fenced (or otherwise fatal): a new producer's init_transactions takes over the epoch.
            log.warning("replacing the transactional producer")
            self._new_producer()
        for task_id in list(tm.active):
            tm.close_active(task_id, clean=False)
        tps = [TopicPartition(t, p) for t, p in self.assigned]
        committed = consumer.committed(tps, timeout=30) if tps else []
        for tp in committed:
            consumer.seek(
                TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING)
            )
        for task_id in set(self._partition_tasks.values()):
            managed = tm.create_active(task_id)
            if managed.task.state is TaskState.RESTORING:
                consumer.pause(
                    [TopicPartition(t, p) for (t, p), tid in self._partition_tasks.items() if tid == task_id]
                )

    # ----------------------------------------------------------------- lag and shutdown
    def _maybe_report_lag(self, consumer: Consumer) -> None:
        now = time.monotonic()
        if now - self._last_lag < LAG_INTERVAL_S or not self.assigned:
            return
        self._last_lag = now
        tps = [TopicPartition(t, p) for t, p in self.assigned]
        for tp in consumer.position(tps):
            try:
                _low, high = consumer.get_watermark_offsets(tp, cached=True)  # updated by fetches
            except KafkaException:
                continue
            if tp.offset >= 0:
                self.metrics.set_gauge(
                    "consumer-lag", max(0, high - tp.offset), topic=tp.topic, partition=str(tp.partition)
                )

    def _shutdown(self, consumer: Consumer, restore: Consumer, clean: bool) -> None:
        tm = self.tm
        try:
            if clean and self._fatal is None:
                self.commit()
        except Exception:
            log.exception("final commit failed")
            clean = False
        if self.eos and self._in_txn:
            self._abort_quietly()
        if tm is not None:
            with self.state_lock:
                tm.close_all(clean)
        if self.global_state is not None:
            self.global_state.close(clean)
            self.global_state = None  # it holds the collector: let the producer go with it
        try:
            consumer.close()  # leaves the group (static members stay until the session times out)
        except Exception:
            log.exception("closing the consumer failed")
        restore.close()
        self.collector.producer.flush(10)
        # confluent-kafka clients have no close(): dropping the last references destroys them now,
        # instead of leaving background threads that keep reconnecting until interpreter exit.
        del self.collector
        self.admin = None  # type: ignore[assignment]
        self.consumer = None
        self.tm = None
