"""The stream thread's producer and, under exactly_once_v2, its transactions (Kafka Streams'
StreamsProducer).

It owns the librdkafka producers and their delivery reports (the tasks' record collector, built beside
it in `assembly.py`, sends through it). Under exactly_once_v2 it begins a transaction when the stream
thread is about to process or punctuate (`begin`), or when a commit carries offsets and none is open; it
commits it together with the consumed offsets, aborts it, and replaces a producer that was fenced or
failed fatally (a new producer's init_transactions takes over the epoch and fences the old one).
Every failure leaves as a typed error the stream thread acts on:

- ProducerFencedError: the producer is done for; `replace()` it and redo the work since the last commit.
- TransactionAbortedError: the transaction cannot commit; `abort()` it and redo the work.
- ProductionError (at_least_once): a record was not delivered and the production handler said fail.

A timed-out call is not a failed call. librdkafka answers send_offsets_to_transaction and
commit_transaction with a retriable error (`_TIMED_OUT` after its own request timeout, about
transaction.timeout.ms, whatever timeout the call was given) while the call goes on in the background and
may still succeed on the broker; calling it again resumes it and returns its real outcome. So a retriable
error is resumed (`_resumed`) until `default.api.timeout.ms` has passed since the call began, and only
then is the transaction given up. Treating the first timeout as a failure (as this module once did)
aborted, by re-initializing the producer, transactions the broker was about to complete, right after a
broker restart: a single combined KRaft node drops the markers of transactions it completes while its
partitions are leaderless (tests/harness/kafka_split.py), and a dropped abort marker leaves the aborted
records pending under the producer id, to be committed by that producer id's next commit marker - one
update applied twice (issue 29; docs/operations.md "Broker outages under exactly_once_v2").

An abort is an EndTxn only while every call of the transaction has succeeded. Once adding the offsets or
committing has failed or timed out, librdkafka may still hold that call's requests and retry them: a
TxnOffsetCommit landing after the abort's markers leaves offsets pending that no marker ever settles (a
hanging transaction), and every read_committed offset fetch of the group then waits on it for good. Such
a transaction is ended by re-initializing the producer instead: the coordinator aborts it under a bumped
epoch, which the partitions' leaders then hold against any late request of the old one.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from kappaflow.api.errors import (
    ConfigError,
    HandlerResponse,
    ProducerFencedError,
    StreamsError,
    TransactionAbortedError,
)
from kappaflow.api.record import Headers
from kappaflow.clients.kafka import DeliveryReports, ProductionError, new_producer, production_failure
from kappaflow.runner.native_produce import FailurePlugin
from kappaflow.runner.retry import retry_unreachable
from kappaflow.tasks.handlers import FailedRecord, resolve_handler

log = logging.getLogger(__name__)

ProducerFactory = Callable[[dict[str, Any]], Producer]
# Beyond the API timeout librdkafka is given, how long a transaction call may take before it is abandoned.
CALL_GRACE_S = 5.0
# How long one attempt of a resumed transaction call waits (`_resumed`).
RESUME_SLICE_S = 5.0


def _call_thread(
    call: Callable[[], None], outcome: list[BaseException | None], name: str
) -> threading.Thread:
    """A started daemon thread running `call`, which appends None or what the call raised to `outcome`
    (handed over to the stream thread by its owner's wait)."""

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:  # handed over, not lost with the thread
            outcome.append(exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


class _BoundedCall:
    """A transaction call on its own thread, waited for at most `limit` seconds: librdkafka's
    send_offsets_to_transaction was seen blocking for minutes past its own timeout after a broker
    restart. A call that does not return is abandoned on its thread with its producer, which
    `ProducerFencedError` has replaced."""

    def __init__(self, call: Callable[[], None], limit: float) -> None:
        self._limit = limit
        self._deadline = time.monotonic() + limit
        self._outcome: list[BaseException | None] = []
        self._thread = _call_thread(call, self._outcome, "kappaflow-transaction-call")

    def wait(self, what: str) -> None:
        """Return when the call did, raise what it raised, or ProducerFencedError past the limit."""
        self._thread.join(max(0.0, self._deadline - time.monotonic()))
        if not self._outcome:
            raise ProducerFencedError(f"{what} did not return within {self._limit:.0f}s")
        if self._outcome[0] is not None:
            raise self._outcome[0]


def _resumed(what: str, call: Callable[[float], None], budget_s: float) -> None:
    """`call(timeout)`, resumed while librdkafka answers with a retriable error, until `budget_s` has
    passed: a retriable answer (a timeout) leaves the call going on in the background, and calling it
    again (same arguments) waits for the same operation rather than starting another (module docstring).
    Each attempt waits at most RESUME_SLICE_S, so a call the broker cannot answer says so in the log
    while it waits. Abortable and fatal answers, and the last retriable one, are raised."""
    deadline = time.monotonic() + budget_s
    attempts = 0
    while True:
        remaining = deadline - time.monotonic()
        log.debug("%s: calling librdkafka (attempt %d)", what, attempts + 1)  # the last action before a crash
        try:
            call(max(0.001, min(remaining, RESUME_SLICE_S)))
            if attempts:
                log.warning("%s: completed after %d resumed attempt(s)", what, attempts)
            return
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            retriable = isinstance(err, KafkaError) and err.retriable() and not err.fatal()
            if not retriable or time.monotonic() >= deadline:
                raise
            attempts += 1
            if attempts == 1 or attempts % 10 == 0:
                log.warning(
                    "%s: %s; resuming the call (up to %.0fs in all: its outcome is not known yet)",
                    what, err, budget_s,
                )  # fmt: skip


class StreamsProducer:
    """The stream thread's producer (Kafka Streams' StreamsProducer). It exists so that the loop, the
    commit and the rebalance handler deal with one object whatever the processing guarantee: it owns
    the librdkafka producers (one transactional producer, or at at_least_once one for changelogs and
    one for the rest), their delivery reports, and under exactly_once_v2 the open transaction and its
    recovery (abort, or replacement when fenced or a call failed). It holds no collector and no task."""

    def __init__(
        self,
        settings: dict[str, Any],
        exactly_once: bool,
        production_handler: Callable[[Any, Any], HandlerResponse] | None,
        api_timeout_s: float,
        factory: ProducerFactory = new_producer,
        failure_plugin: FailurePlugin | None = None,
    ) -> None:
        """`production_handler` decides, under at_least_once, whether a failed delivery is dropped;
        under exactly_once_v2 a failed delivery always aborts the transaction. Under exactly_once_v2 the
        producer's init_transactions runs in the constructor, before any task is restored or its committed
        offsets are read: the predecessor with this transactional id is fenced and its open transaction
        ended first, as in Kafka Streams. `failure_plugin` (the native core's, at at_least_once) is loaded
        into the sink and repartition producer: see `reports_failures_natively`."""
        self._settings = settings
        # None until the first producer is created: then the plugin, if that producer took it
        self._plugin = None if exactly_once else failure_plugin
        self._plugin_loaded: bool | None = None
        self.exactly_once = exactly_once
        self._api_timeout_s = api_timeout_s
        self._factory = factory
        self._in_transaction = False
        # a call of the open transaction failed or timed out: abort by re-initializing (module docstring)
        self._call_failed = False
        self.deliveries = DeliveryReports(
            None if exactly_once else production_handler, transactional=exactly_once
        )
        self.producer, changelog_producer = self._create()
        self.changelog_producer = changelog_producer or self.producer

    def _create(self) -> tuple[Producer, Producer | None]:
        """The producer and, at at_least_once, the changelog producer (see KafkaRecordCollector):
        sinks and repartition topics report only failed deliveries, changelogs every delivery."""
        if self.exactly_once:
            return self._create_one(self._settings), None
        client_id = self._settings.get("client.id", "kappaflow-producer")
        return (
            self._create_reporting_failures({**self._settings, "delivery.report.only.error": True}),
            self._create_one({**self._settings, "client.id": f"{client_id}-changelog"}),
        )

    def _create_reporting_failures(self, settings: dict[str, Any]) -> Producer:
        """The at_least_once sink and repartition producer, with the failure plugin when there is one.
        Whether the first producer took it is kept (`reports_failures_natively`): the native send then
        produces records with no delivery state, so every later producer must take it too, and a
        replacement that cannot fails rather than lose failures."""
        plugin = self._plugin
        if plugin is None or self._plugin_loaded is False:
            return self._create_one(settings)
        with_plugin = {**settings, "plugin.library.paths": plugin.path}
        if self._plugin_loaded:
            producer = self._create_one(with_plugin)
            if plugin.take(producer) is None:
                raise ProducerFencedError("the producer did not load the failed-delivery plugin")
            return producer
        try:
            producer = self._create_one(with_plugin)
        except (KafkaException, SystemError, ValueError) as exc:
            log.warning("failed deliveries reported through confluent-kafka: %s", exc)
            self._plugin_loaded = False
            return self._create_one(settings)
        self._plugin_loaded = plugin.take(producer) is not None
        if self._plugin_loaded:
            log.info("failed deliveries of natively sent records reported by the core's librdkafka plugin")
        else:
            log.warning("failed deliveries reported through confluent-kafka: the plugin did not load")
        return producer

    @property
    def reports_failures_natively(self) -> bool:
        """Whether the sink and repartition producer's failed deliveries of records with no delivery
        state reach the production handler through the native core's plugin (drained in
        `serve_reports` and before a flush raises): the native send may then produce them with none."""
        return bool(self._plugin_loaded)

    def _take_native_failures(self) -> None:
        """Hand the plugin's failures of the sink and repartition producer to the delivery reports."""
        if self._plugin_loaded and self._plugin is not None:
            failures = self._plugin.take(self.producer)
            if failures:
                self.deliveries.failed_natively(failures)

    def _create_one(self, settings: dict[str, Any]) -> Producer:
        producer = self._factory(dict(settings))
        if self.exactly_once:
            log.debug("initializing the transactional producer: calling librdkafka")
            retry_unreachable(
                "initializing the transactional producer",
                lambda: producer.init_transactions(self._api_timeout_s),
                self._api_timeout_s,
            )
        return producer

    @property
    def acknowledged(self) -> dict[tuple[str, int], int]:
        """The last offset Kafka acknowledged per changelog partition written."""
        return self.deliveries.written

    def producers(self) -> list[Producer]:
        """The producers records go through: one, or at at_least_once two."""
        if self.changelog_producer is self.producer:
            return [self.producer]
        return [self.producer, self.changelog_producer]

    def serve_reports(self) -> None:
        """Serve delivery reports and the producers' queued librdkafka log lines (an idle thread's too)."""
        try:
            self.producer.poll(0)
            if self.changelog_producer is not self.producer:
                self.changelog_producer.poll(0)
        except (KafkaException, SystemError) as exc:
            raise production_failure(exc, "serving delivery reports") from exc
        self._take_native_failures()

    def begin(self) -> None:
        """Open a transaction unless one is open (exactly_once_v2 only; a no-op otherwise)."""
        if not self.exactly_once or self._in_transaction:
            return
        self._in_transaction = True
        try:
            self.producer.begin_transaction()
        except (KafkaException, SystemError) as exc:
            # a producer that cannot begin is in no state to abort with an EndTxn: the reset replaces it
            self._call_failed = True
            raise self._typed(exc, "beginning a transaction") from exc

    def flush(self) -> None:
        """Wait until every record sent is acknowledged (or raise why one was not)."""
        try:
            self._flush_all(self._api_timeout_s)
        except ProductionError as exc:
            if self.exactly_once:
                raise TransactionAbortedError(str(exc)) from exc
            raise

    def _flush_all(self, timeout: float) -> None:
        """Wait for every record's delivery; raise the first production error (ProducerFencedError
        when the producer itself failed)."""
        remaining = 0
        deadline = time.monotonic() + timeout
        for producer in self.producers():
            try:
                remaining += producer.flush(max(deadline - time.monotonic(), 0.0))
            except (KafkaException, SystemError) as exc:
                raise production_failure(exc, "flushing the producer") from exc
        self._take_native_failures()
        if remaining:
            raise ProductionError(f"{remaining} records not delivered within {timeout}s")
        self.deliveries.raise_error()

    def commit(
        self, offsets: list[TopicPartition], group_metadata: Any, prepare: Callable[[], None] = lambda: None
    ) -> None:
        """exactly_once_v2: add `offsets` to the transaction, run `prepare`, flush and commit. at_least_once:
        `prepare`, then flush only (the consumer commits the offsets).

        `prepare` is the tasks' store flushes: the record cache forwards and logs its dirty entries, which
        produces into the transaction. It runs while the offsets' two coordinator round trips
        (AddOffsetsToTxn, TxnOffsetCommit) are in flight on their own thread, and the flush that follows
        waits for the records' acknowledgements (in the word count benchmark's 100 ms commits: adding the
        offsets ~5-7 ms, the store flushes ~2-3 ms, the producer flush ~2-4 ms, EndTxn ~2 ms). librdkafka
        takes records into a transaction while its offsets are being added (only a commit or an abort
        stops them), and nothing is visible before the commit, so the order changes no outcome: a record
        or store flush that fails aborts the transaction, offsets included. If the store flush fails, its
        error is raised once the offsets call has returned - unless that call did not return in time:
        then the producer is done for (ProducerFencedError), which the stream thread must act on first."""
        if self.exactly_once and offsets:
            self.begin()
        if not self._in_transaction:
            prepare()
            self.flush()
            return
        producer = self.producer
        # A retriable answer is resumed, not retried anew (module docstring); a transaction that cannot
        # commit within the API timeout is aborted and its work redone. Resuming holds the transaction
        # open no longer than the broker allows: an Ongoing transaction past transaction.timeout.ms is
        # aborted by the coordinator, and the resumed call then answers fenced or abortable.
        budget = self._api_timeout_s
        if offsets:
            adding = self._start(
                lambda: _resumed(
                    "adding offsets to the transaction",
                    lambda t: producer.send_offsets_to_transaction(offsets, group_metadata, t),
                    budget,
                )
            )
            try:
                prepare()
            except BaseException as failure:
                try:
                    self._transaction_call("adding offsets to the transaction", adding)
                except ProducerFencedError as fenced:  # the call is still out there: replace the producer
                    raise fenced from failure
                except Exception:  # a failed call is marked for the abort (_transaction_call)
                    pass  # and the store flush's error is the one to raise
                raise
            self._transaction_call("adding offsets to the transaction", adding)
        else:
            prepare()
        self.flush()
        committing = self._start(
            lambda: _resumed("committing the transaction", producer.commit_transaction, budget)
        )
        self._transaction_call("committing the transaction", committing)
        self._in_transaction = False

    def _transaction_call(self, what: str, call: _BoundedCall) -> None:
        """Wait for a call of the open transaction (`_start`ed); its failure marks the transaction for an
        abort by re-initialization (module docstring) and leaves as a typed error."""
        try:
            call.wait(what)
        except (KafkaException, SystemError) as exc:
            self._call_failed = True
            raise self._typed(exc, what) from exc

    def _start(self, call: Callable[[], None]) -> _BoundedCall:
        """`call()` started on its own thread, to be waited for at most the API timeout plus a grace."""
        return _BoundedCall(call, self._api_timeout_s + CALL_GRACE_S)

    def abort(self) -> None:
        """Abort the open transaction, if any: an EndTxn while every call of the transaction succeeded,
        else (or when the EndTxn fails) a new producer, whose init_transactions aborts it (module
        docstring)."""
        if self._call_failed:
            log.warning("a call of the transaction failed: aborting it by re-initializing the producer")
            self.replace()
            return
        if not self._in_transaction:
            return
        self._in_transaction = False
        producer, timeout = self.producer, self._api_timeout_s
        log.debug("aborting the transaction: calling librdkafka")
        try:
            self._start(lambda: producer.abort_transaction(timeout)).wait("aborting the transaction")
        except (KafkaException, SystemError, ProducerFencedError) as exc:
            log.warning("aborting the transaction: %s", exc)
            self._call_failed = True  # kept until a replacement succeeds: the next reset tries again
            self.replace()

    def reset(self, fenced: bool) -> None:
        """Drop the work since the last commit: abort the transaction, or replace the producer when it
        was `fenced`."""
        if fenced:
            self.replace()
        else:
            self.abort()

    def replace(self) -> None:
        """A new producer in place of a fenced or failed one (same settings, so the same transactional
        id: its init_transactions fences the old epoch). Records the old one still held are dropped."""
        log.warning("replacing the producer")
        old = self.producers()
        producer, changelog_producer = self._create()
        self.producer, self.changelog_producer = producer, changelog_producer or producer
        self.deliveries.error = None  # the old producers' failure: they are gone
        self._in_transaction = self._call_failed = False  # only now: a failed replacement is tried again
        for producer in old:
            with contextlib.suppress(KafkaException, SystemError, RuntimeError):
                producer.purge()  # a fatally failed producer may refuse even this; dropped either way

    def close(self) -> None:
        """Abort an open transaction and deliver what at_least_once still holds (bounded)."""
        try:
            self.abort()
            for producer in self.producers():
                producer.flush(10)
            self._take_native_failures()
        except (KafkaException, SystemError, StreamsError) as exc:
            log.warning("closing the producer: %s", exc)

    def _typed(self, exc: BaseException, what: str) -> StreamsError:
        """A fatal or fencing error is ProducerFencedError; any other failure of a transaction call
        leaves a transaction that cannot commit: TransactionAbortedError."""
        typed = production_failure(exc, what)
        if isinstance(typed, ProducerFencedError):
            return typed
        return TransactionAbortedError(f"{what}: {exc}")


def production_handler(spec: Any) -> Callable[[Any, Any], HandlerResponse]:
    """The configured `production.exception.handler` as the collector's delivery-failure decision:
    CONTINUE drops the record, FAIL fails the commit, RETRY (KIP-1065) redoes the work since the last
    commit when the failure is retriable (else it fails, as Java's RecordCollectorImpl)."""
    handler = resolve_handler(spec, "production.exception.handler")

    def decide(err: Any, msg: Any) -> HandlerResponse:
        failed = FailedRecord(
            msg.topic(), msg.partition(), -1, -1, msg.key(), msg.value(), Headers(msg.headers() or [])
        )
        response = handler(ProductionError(str(err)), failed)
        if not isinstance(response, HandlerResponse):
            raise ConfigError(
                f"config 'production.exception.handler': the handler answered {response!r}, "
                "not a HandlerResponse (CONTINUE, FAIL or RETRY)"
            )
        return response

    return decide
