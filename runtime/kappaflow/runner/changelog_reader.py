"""The changelog reader: restores active tasks and keeps standby tasks current, from their changelogs.

One assign()-only restore consumer serves every task of the process, incrementally, so the poll loop
keeps serving the group while state is restored. Where each changelog's restoration starts is the task's
state manager's decision (`restore_offsets`), and the state manager owns each store's changelog offset;
this reader only moves data and decides when an active task has caught up.

An active task is restored to its changelog's high watermark, read_uncommitted, as Kafka Streams does
since KAFKA-10167, and not merely to the first end-of-partition: under exactly_once_v2 the restore
consumer reads read_committed, and a transaction a crashed predecessor left open pins the last stable
offset below changelog transactions the task's next owners committed later. Stopping at that LSO would
give the task the state of before them while its input resumes at their committed offsets (issue 11:
updates silently lost, aggregates going backwards). So restoration waits until the consumer's position
passes the high watermark taken when the task opened, i.e. until every transaction below it has ended
(committed, or aborted by fencing or by `transaction.timeout.ms`).

With the native core's `RestoreQueues` (runner/native_restore.py), each changelog partition is opened in
the core before it is assigned, and its records, fetch errors and end-of-partition events come from the
core in per-partition runs with no Python object per record; `consume()` is still called every step, with
a zero timeout: it serves the consumer's other events (errors, logs) with confluent-kafka's call state,
and any record it returns (a partition the core could not open) is applied first, as before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from kappaflow.api.errors import StreamsError
from kappaflow.api.metrics import Metrics
from kappaflow.api.processor import TaskId
from kappaflow.runner.managed_task import ManagedTask
from kappaflow.runner.open_transactions import OpenTransactionWatch, remedy
from kappaflow.runner.retry import retry_unreachable
from kappaflow.tasks.native import ChangelogMessages, ChangelogRun, RestoreQueues
from kappaflow.tasks.state_manager import ProcessorStateManager

log = logging.getLogger(__name__)

RESTORE_LOG_INTERVAL_S = 5.0
HANGING_LOG_INTERVAL_S = 30.0
# Records per `step`: enough that a step's fixed costs (and the poll loop's around it) vanish per record,
# few enough that a step stays well under the ~20 ms a running task on the same thread may wait.
RESTORE_BATCH = 10000
# the bound on the restore consumer's lookup of a changelog topic's metadata (`_know_topics`)
METADATA_TIMEOUT_S = 5.0


class CommittedOffsets(Protocol):
    """The application's committed offsets of partitions (None: nothing committed there)."""

    def __call__(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int | None]: ...


Bootstrap = Callable[[TaskId, ProcessorStateManager, Mapping[tuple[str, int], tuple[int, int]]], bool]


class OffsetBounds(Protocol):
    """(log start, high watermark) of partitions, read_uncommitted (clients.kafka.WatermarkReader)."""

    def __call__(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ChangelogPartition:
    """A changelog partition being read: the task it restores, that task's state manager (registered
    directly, so a step applies records without reaching through the task) and the store it feeds."""

    managed: ManagedTask
    manager: ProcessorStateManager
    store: str
    # a source topic serving as the store's changelog (`reuse.ktable.source.topics`) is read up to the
    # committed input offset only, and without its null-key records (which the table never stored)
    limit: int | None = None


@dataclass(frozen=True, slots=True)
class ChangelogEnds:
    """The (log start, high watermark) of changelog partitions and the ids of their topics, looked up
    together for all the tasks of an assignment (`ChangelogReader.look_up`)."""

    bounds: Mapping[tuple[str, int], tuple[int, int]]
    topic_ids: Mapping[str, str]


class ChangelogReader:
    """Reads the changelogs of registered tasks; `step()` applies a batch and names the tasks done."""

    def __init__(
        self,
        consumer: Consumer,
        metrics: Metrics,
        offset_bounds: OffsetBounds,
        api_timeout_s: float = 60.0,
        topic_ids: Callable[[list[str]], dict[str, str]] | None = None,
        hanging_after_s: float | None = None,
        committed_offsets: CommittedOffsets | None = None,
        bootstrap: Bootstrap | None = None,
        native: ChangelogMessages | None = None,
        queues: RestoreQueues | None = None,
    ) -> None:
        """`offset_bounds`: the (log start, high watermark) of changelog partitions, read_uncommitted
        (a consumer reading read_committed reports the last stable offset instead). Asking is retried
        for up to `api_timeout_s` while the broker cannot be reached. `topic_ids`: changelog topic ->
        topic id, so that a store checkpointed in a deleted and recreated changelog is detected (the
        state manager decides; see `restore_offsets`). `hanging_after_s` (exactly_once_v2): a restoration
        held by an open transaction longer than that is behind a hanging one, which is logged and
        published (runner/open_transactions.py). `committed_offsets`: the group's committed offsets of
        input partitions, where restoring a source topic that is a store's changelog stops.
        `bootstrap`: called as a task opens, before its restoration starts, to install stores that
        have no local state from a peer's snapshot (runner/bootstrap.py); True when it installed one.
        `native`: the native core's splitter and writer of consumed batches (`routing.changelog_messages`),
        or None for `_by_partition` and the stores' Python loops. `queues`: the native core's reader of
        this `consumer`'s fetches (`runner.native_restore.restore_queues`), or None for `consume()` only."""
        self._native = native
        self._queues = queues
        self._committed_offsets = committed_offsets
        self._bootstrap = bootstrap
        self._api_timeout_s = api_timeout_s
        self._topic_ids = topic_ids
        self._consumer = consumer
        self._metrics = metrics
        self._offset_bounds = offset_bounds
        self._index: dict[tuple[str, int], ChangelogPartition] = {}
        self._last_log = 0.0
        self._last_wait_log = 0.0
        # Progress: records restored (active tasks) in total and at the last progress line, and when each
        # restoring task started, for the rates the log shows.
        self._restored = 0
        self._restored_at_log = 0
        self._started: dict[ManagedTask, float] = {}
        # tasks whose end-of-restoration checkpoint waits for the flushes it started (`_finish`)
        self._settling: dict[ManagedTask, None] = {}
        # changelog topics whose metadata the restore consumer was given (`_know_topics`)
        self._known_topics: set[str] = set()
        self._watch = OpenTransactionWatch(hanging_after_s) if hanging_after_s else None
        # from the start, at 0 (and always 0 at at_least_once, which reads uncommitted): plotted, alertable
        metrics.set_gauge("hanging-transaction-partitions", 0, reader="restore")
        self._last_hanging_log = 0.0

    def look_up(self, managers: list[ProcessorStateManager]) -> ChangelogEnds:
        """The ends of the changelogs of all `managers`' stores and their topics' ids, in one lookup of
        each (not one per task): an assignment's tasks are registered with what this returns, as Kafka
        Streams' StoreChangelogReader asks for the end offsets of all its changelogs in one request."""
        tps = sorted({tp for manager in managers for tp in manager.changelog_partitions()})
        if not tps:
            return ChangelogEnds({}, {})
        ask = self._offset_bounds
        bounds = retry_unreachable("reading changelog ends", lambda: ask(tps), self._api_timeout_s)
        ids: dict[str, str] = {}
        if self._topic_ids is not None:
            topics, describe = sorted({t for t, _p in tps}), self._topic_ids
            ids = retry_unreachable("describing changelogs", lambda: describe(topics), self._api_timeout_s)
        return ChangelogEnds(bounds, ids)

    def register(self, managed: ManagedTask, known: ChangelogEnds | None = None) -> None:
        """Start reading the task's changelogs from where its stores' state ends; an active task that is
        already at the end of all of them has nothing pending. `known`: the ends and topic ids `look_up`
        found for this task among others (else they are looked up for this task alone)."""
        manager = managed.state_manager
        partitions = manager.changelog_partitions()
        tps = list(partitions)
        if known is None or any(tp not in known.bounds for tp in tps):
            known = self.look_up([manager])
        bounds = {tp: known.bounds[tp] for tp in tps}
        if self._bootstrap is not None and tps and self._bootstrap(managed.task.id, manager, bounds):
            # the snapshot's offset may be past the ends read before it was taken: read them again
            ask = self._offset_bounds
            bounds = retry_unreachable("reading changelog ends", lambda: ask(tps), self._api_timeout_s)
        ids = {t: known.topic_ids[t] for t, _p in tps if t in known.topic_ids}
        starts = manager.restore_offsets(bounds, ids)
        limits = self._source_limits(managed, manager.source_changelog_partitions())
        assignments = []
        for tp, store in partitions.items():
            if managed.standby and tp in limits:
                continue  # see `_source_limits`
            start = starts[store]
            low, high = bounds[tp]
            limit = limits.get(tp)
            if limit is not None:
                high = limit
            managed.end_offsets[tp] = high
            if start is not None and start < low:
                start = None  # the state manager wiped such a store (see `restore_offsets`): read it all
            first = start if start is not None else low
            manager.advance(store, first)
            if managed.standby or first < high:
                managed.pending.add(tp)
                assignments.append(TopicPartition(*tp, start if start is not None else OFFSET_BEGINNING))
                self._index[tp] = ChangelogPartition(managed, manager, store, limit)
        if assignments:
            self._know_topics({tp.topic for tp in assignments})
            if self._queues is not None:
                # before the assignment, so that no fetched record reaches the consumer queue first
                for assigned in assignments:
                    if not self._queues.open(assigned.topic, assigned.partition):
                        log.debug(
                            "restore consumer: %s-%d through consume()", assigned.topic, assigned.partition
                        )
            self._consumer.incremental_assign(assignments)
        # Counters at zero from the task's start: a restore stuck from its first record still has a
        # series (rate 0) for dashboards and alerts, not none.
        kind = "standby-updated-records-total" if managed.standby else "restored-records-total"
        for store in partitions.values():
            self._metrics.increment(kind, 0, task=str(managed.task.id), store=store)
        if not managed.standby:
            # every active task has the gauge, 0 when its stores are already at the changelog's end
            remaining = self.remaining(managed)
            self._metrics.set_gauge("restore-remaining-records", remaining, task=str(managed.task.id))
            if managed.pending:
                self._started[managed] = time.monotonic()

    def _know_topics(self, topics: set[str]) -> None:
        """Have the restore consumer look up topics it is about to read for the first time, before they
        are assigned. Assigned a partition of a topic it has no metadata for, librdkafka took 0.5-0.7 s
        to fetch its first records (1M-record restores in bench/restore.py waited up to 1.3 s for the
        first one); with the metadata asked for first, 0.03-0.2 s. Only a head start: when the lookup
        fails, the assignment goes ahead and librdkafka finds the topic itself."""
        for topic in sorted(topics - self._known_topics):
            try:
                self._consumer.list_topics(topic, timeout=METADATA_TIMEOUT_S)
            except KafkaException as exc:
                log.debug("restore consumer: no metadata for %s yet (%s)", topic, exc)
                continue
            self._known_topics.add(topic)

    def _source_limits(
        self, managed: ManagedTask, sources: set[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        """Where restoring each source-topic changelog stops: the committed input offset (0 when none was
        committed), as Kafka Streams restores such changelogs. Past it lie records the task has not
        processed yet: restored, they would be processed a second time, after the store already holds
        them (a table forwarding an update whose old value is itself). Under exactly_once_v2 it is also
        where the state the committed transactions made ends. A standby does not follow the group's
        commits, so it leaves these partitions to the restoration of the task that becomes active (the
        limit of standbys: their other changelogs stay warm)."""
        if not sources:
            return {}
        if managed.standby:
            return dict.fromkeys(sources, 0)
        if self._committed_offsets is None:
            raise StreamsError("restoring from a source topic needs the committed offsets: none reader given")
        ask, tps = self._committed_offsets, sorted(sources)
        found = retry_unreachable("reading committed offsets", lambda: ask(tps), self._api_timeout_s)
        return {tp: found.get(tp) or 0 for tp in tps}

    def unregister(self, managed: ManagedTask) -> None:
        live = [tp for tp, entry in self._index.items() if entry.managed is managed]
        for tp in live:
            del self._index[tp]
            self._release(tp)
        if live:
            self._consumer.incremental_unassign([TopicPartition(t, p) for t, p in live])
        self._started.pop(managed, None)
        self._settling.pop(managed, None)  # closing the task checkpoints or drops it (state manager)

    def has_work(self) -> bool:
        return bool(self._index)

    def cached_end(self, tp: tuple[str, int], default: int) -> int:
        """The changelog's end as the last fetch saw it (no request), or `default`."""
        try:
            _low, high = self._consumer.get_watermark_offsets(TopicPartition(*tp), cached=True)
        except KafkaException:
            return default
        return int(high) if high is not None and high >= 0 else default

    def step(self, max_records: int = RESTORE_BATCH, timeout: float = 0.0) -> list[ManagedTask]:
        """Apply a batch of changelog records; return the active tasks that finished restoring now."""
        if self._settling:
            self._settle()
        if not self._index:
            return []
        queues = self._queues
        messages: list[Any] = self._consumer.consume(max_records, timeout if queues is None else 0.0)
        native = self._native
        if native is None:
            batches, ends = self._by_partition(messages)
        else:
            batches, ends = self._split_natively(native, messages)
        for tp, records in batches.items():
            entry = self._index.get(tp)
            if entry is None:
                continue
            next_offset = records[-1].offset() + 1
            if entry.limit is not None:
                next_offset = min(next_offset, entry.limit)
                records = [m for m in records if m.offset() < entry.limit and m.key() is not None]
            if records:
                entry.manager.restore_messages(entry.store, records, next_offset, native)
            else:
                entry.manager.advance(entry.store, next_offset)
            self._applied(tp, entry, len(records))
        touched = set(batches)
        # A full batch from consume() may have left records of a partition there: the core's, which
        # librdkafka fetched later, wait for the next step.
        if queues is not None and len(messages) < max_records:
            wait = timeout if not messages else 0.0
            runs, native_ends, errors = queues.consume(max_records - len(messages), wait)
            for topic, partition, code, reason in errors:
                self._on_error((topic, partition), KafkaError(code, reason), native_ends)
            self._apply_runs(queues, runs)
            touched.update(tp for tp, _run in runs)
            for tp, end in native_ends.items():
                ends[tp] = max(end, ends.get(tp, end))
        # After the records: the end of a partition is past its last record and any transaction markers.
        for tp, end in ends.items():
            entry = self._index.get(tp)
            if entry is not None:
                limited = end if entry.limit is None else min(end, entry.limit)
                entry.manager.advance(entry.store, limited)
        finished = self._caught_up({*ends, *touched}, set(ends))
        self._report()
        return finished

    def _apply_runs(self, queues: RestoreQueues, runs: list[tuple[tuple[str, int], ChangelogRun]]) -> None:
        """The records the core fetched, per partition, as `step` applies consumed messages: up to a
        source changelog's limit and without its null keys, into the store through the core's writer."""
        for tp, run in runs:
            entry = self._index.get(tp)
            next_offset = run.next_offset
            if entry is None or next_offset is None:
                continue
            if entry.limit is not None:
                next_offset = min(next_offset, entry.limit)
                run = run.limited(entry.limit)
            if len(run):
                entry.manager.restore_run(entry.store, run, next_offset, queues)
            else:
                entry.manager.advance(entry.store, next_offset)
            self._applied(tp, entry, len(run))

    def _applied(self, tp: tuple[str, int], entry: ChangelogPartition, count: int) -> None:
        """`count` records of `tp` were applied: the counters, and `tp` is no longer held."""
        managed = entry.managed
        labels = {"task": str(managed.task.id), "store": entry.store}
        kind = "standby-updated-records-total" if managed.standby else "restored-records-total"
        self._metrics.increment(kind, count, **labels)
        if not managed.standby:
            self._restored += count
        self._release(tp)

    @staticmethod
    def _by_partition(
        messages: list[Any],
    ) -> tuple[dict[tuple[str, int], list[Any]], dict[tuple[str, int], int]]:
        """The consumed records per changelog partition, in order, and the end offset of the partitions
        that reported reaching their end.

        librdkafka hands a partition's records over in runs, so a run appends to one list and only a new
        partition costs a lookup: no per-record tuple or dict work. A plain loop on purpose: C-level
        `groupby`/`map` over `operator.methodcaller` measured 2x slower (a bound method per call)."""
        batches: dict[tuple[str, int], list[Any]] = {}
        ends: dict[tuple[str, int], int] = {}
        topic: str | None = None
        partition = -1
        run: list[Any] = []
        for msg in messages:
            err = msg.error()
            if err is not None:
                ChangelogReader._on_error((msg.topic(), msg.partition()), err, ends, msg.offset())
                topic = None
                continue
            if msg.partition() != partition or msg.topic() != topic:
                topic, partition = msg.topic(), msg.partition()
                run = batches.setdefault((topic, partition), [])
            run.append(msg)
        return batches, ends

    @staticmethod
    def _split_natively(
        native: ChangelogMessages, messages: list[Any]
    ) -> tuple[dict[tuple[str, int], list[Any]], dict[tuple[str, int], int]]:
        """`_by_partition` with the records split by the native core: the same batches and ends (the
        messages carrying an error are handled here, in order, after the split, which changes nothing
        before a fatal one raises)."""
        batches, failed = native.split(messages)
        ends: dict[tuple[str, int], int] = {}
        for msg in failed:
            ChangelogReader._on_error((msg.topic(), msg.partition()), msg.error(), ends, msg.offset())
        return batches, ends

    @staticmethod
    def _on_error(
        tp: tuple[str, int], err: KafkaError, ends: dict[tuple[str, int], int], offset: int = -1
    ) -> None:
        """A consumed message of `tp` carrying `err` (at `offset`): an end of partition is recorded in
        `ends`; a fatal error raises, naming the partition; any other is logged (librdkafka retries, e.g.
        a broker down). The core reports ends itself, and errors as code and reason (`KafkaError` of
        those is what confluent-kafka builds for a consumed message: never fatal)."""
        if err.code() != KafkaError._PARTITION_EOF:
            if err.fatal():
                raise StreamsError(f"restoring from {tp[0]}-{tp[1]} failed: {err}")
            log.warning("restore consumer: %s", err)
            return
        ends[tp] = offset

    def _caught_up(self, touched: set[tuple[str, int]], at_end: set[tuple[str, int]]) -> list[ManagedTask]:
        finished: list[ManagedTask] = []
        for tp in touched:
            entry = self._index.get(tp)
            if entry is None or entry.managed.standby or tp not in entry.managed.pending:
                continue
            managed = entry.managed
            position = entry.manager.offset(entry.store) or 0
            if position < managed.end_offsets[tp]:
                if tp in at_end:
                    self._log_open_transaction(managed, tp, position)
                continue
            managed.pending.discard(tp)
            if not managed.pending:
                self._finish(managed)
                finished.append(managed)
        return finished

    def _log_open_transaction(self, managed: ManagedTask, tp: tuple[str, int], position: int) -> None:
        """End of partition below the high watermark: a transaction is open there; wait for it to end,
        and say so loudly once the wait is past what the broker's transaction timeout allows."""
        now = time.monotonic()
        if self._watch is not None:
            self._watch.held(tp, position, managed.end_offsets[tp], now)
        if now - self._last_wait_log >= RESTORE_LOG_INTERVAL_S:
            self._last_wait_log = now
            log.info(
                "task %s: %s-%d is stable up to %d only: waiting for the transactions open below %d to end",
                managed.task.id,
                tp[0],
                tp[1],
                position,
                managed.end_offsets[tp],
            )

    def _check_hanging(self, now: float) -> None:
        """Publish, and now and then log, the partitions a hanging transaction holds (module docstring of
        runner/open_transactions.py)."""
        watch = self._watch
        if watch is None:
            return
        hanging = watch.check(now)
        if not hanging:
            return
        self._metrics.set_gauge("hanging-transaction-partitions", len(hanging), reader="restore")
        if now - self._last_hanging_log < HANGING_LOG_INTERVAL_S:
            return
        self._last_hanging_log = now
        for held in hanging:
            entry = self._index.get((held.topic, held.partition))
            topic, partition, offset = held.topic, held.partition, held.offset
            log.warning(
                "task %s: restoring %s-%d is held at offset %d below its high watermark %d for %.0f s, "
                "past the %.0f s a transaction may stay open (kappaflow.hanging.transaction.ms): a "
                "transaction open there is hanging and no timeout will end it. %s",
                entry.managed.task.id if entry is not None else "-", topic, partition, offset,
                held.high_watermark, held.held_s, watch.limit_s, remedy(topic, partition, offset),
            )  # fmt: skip

    def _release(self, tp: tuple[str, int]) -> None:
        """Reading `tp` moved on or stopped: it is no longer held by a hanging transaction."""
        watch = self._watch
        if watch is not None and watch.released(tp):
            log.warning("%s-%d: no longer held by a hanging transaction", *tp)
            self._metrics.set_gauge("hanging-transaction-partitions", len(watch.hanging()), reader="restore")

    def _finish(self, managed: ManagedTask) -> None:
        seconds = time.monotonic() - self._started.get(managed, time.monotonic())
        self.unregister(managed)
        manager = managed.state_manager
        if manager.checkpoint_in_background():
            self._settling[managed] = None
        managed.task.complete_restoration()
        self._metrics.set_gauge("restore-remaining-records", 0, task=str(managed.task.id))
        restored = sum(m.restored_records for m in manager.stores.values())
        log.info(
            "task %s: restored %d records in %.1f s (%s records/s), running",
            managed.task.id,
            restored,
            seconds,
            f"{restored / seconds:,.0f}" if seconds > 0 else "-",
        )

    def _settle(self) -> None:
        """Write the end-of-restoration checkpoints whose flushes are done (each step, restoring or not,
        checks: a few RocksDB property reads per waiting task)."""
        for managed in list(self._settling):
            if managed.state_manager.settle_checkpoint():
                del self._settling[managed]

    def remaining(self, managed: ManagedTask) -> int:
        manager = managed.state_manager
        partitions = manager.changelog_partitions()
        return sum(
            max(0, managed.end_offsets[tp] - (manager.offset(partitions[tp]) or 0)) for tp in managed.pending
        )

    def remaining_text(self, managed: ManagedTask) -> str:
        manager = managed.state_manager
        partitions = manager.changelog_partitions()
        return ", ".join(
            f"{t}-{p}: {manager.offset(partitions[(t, p)]) or 0}..{managed.end_offsets[(t, p)]}"
            for t, p in managed.pending
        )

    def _report(self) -> None:
        restoring = {id(e.managed): e.managed for e in self._index.values() if not e.managed.standby}
        remaining_total = 0
        for managed in restoring.values():
            remaining = self.remaining(managed)
            remaining_total += remaining
            self._metrics.set_gauge("restore-remaining-records", remaining, task=str(managed.task.id))
        now = time.monotonic()
        self._check_hanging(now)
        if remaining_total and now - self._last_log >= RESTORE_LOG_INTERVAL_S:
            rate = (self._restored - self._restored_at_log) / (now - self._last_log) if self._last_log else 0
            self._last_log, self._restored_at_log = now, self._restored
            log.info(
                "restoring: %d changelog records remaining%s",
                remaining_total,
                f" ({rate:,.0f} records/s)" if rate else "",
            )

    def close(self) -> None:
        self._index.clear()
        if self._queues is not None:
            self._queues.close()  # before the consumer: its queue is one of the consumer's rd_kafka_t
        self._consumer.close()
        self._offset_bounds.close()
        close = getattr(self._committed_offsets, "close", None)
        if close is not None:
            close()
