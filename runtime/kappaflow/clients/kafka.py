"""Consumer and producer adapters over librdkafka (through confluent-kafka), shared by the runner's roles.

`client_configs` turns a StreamsConfig into librdkafka settings for each role, so security passthrough
(`security.protocol`, `sasl.*`, `ssl.*`) and per-role overrides (`consumer.*`, `producer.*`,
`restore.consumer.*`, `admin.*`, as in Kafka Streams) are applied in one place. `KafkaRecordCollector` is
the task-facing RecordCollector over the stream thread's producer; `DeliveryReports` remembers the last
offset written per changelog partition so a commit can checkpoint stores at exactly what Kafka holds.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from kappaflow.api.config import CLIENT_PASSTHROUGH, StreamsConfig
from kappaflow.api.errors import HandlerResponse, ProducerFencedError, StreamsError, TaskCorruptedError
from kappaflow.api.record import Headers
from kappaflow.clients.rdkafka_log import serve_consumer_logs, with_logger

log = logging.getLogger(__name__)

# librdkafka settings passed through verbatim when present in the streams configuration.
# Group-membership settings: passed to the group consumer only (librdkafka's producer and admin client
# warn about every consumer property on each start).
GROUP_CONSUMER_ONLY = ("session.timeout.ms", "heartbeat.interval.ms", "max.poll.interval.ms")
PASSTHROUGH = tuple(key for key in CLIENT_PASSTHROUGH if key not in GROUP_CONSUMER_ONLY)
# Kafka Streams' exactly-once producer defaults. A 10 s transaction timeout (not the 60 s client default)
# bounds how long a transaction a crashed instance left open can hold back read_committed readers.
EOS_PRODUCER_DEFAULTS: dict[str, Any] = {"transaction.timeout.ms": 10000}
# How long the producer batches records. Kafka Streams gives its producers linger.ms=100 (the client's is
# 5), but the Java producer also sends a batch as soon as it holds batch.size (16 KB) of encoded records,
# framing included, so small records (the word count's repartition records) leave well before 100 ms.
# librdkafka counts only keys and values against batch.size, so it held them the whole 100 ms, and at
# at_least_once that hop is end-to-end latency: a cached count is emitted at the 30 s commit only if its
# repartition record was processed before it (bench/latency.py at 25% of the maximum: the hop from the
# input's append to the repartition record's took 74 ms on average, Java's 42, and kappaflow's p50 was
# 73 ms above Java's). 20 ms keeps the requests large: at exactly_once_v2 each 100 ms commit
# flushes the producer and waits for it anyway, and there the word count ran 43.0/44.7k lines/s at 5 ms,
# 47.5k at 10, 49.4/50.9/50.7k at 20, 50.3k at 50 and 49.8/49.5k at 100 ms, the commits growing from ~21
# to ~37 ms; at at_least_once 20 ms against 100 is in docs/performance-history.md.
# `producer.linger.ms` overrides both.
AT_LEAST_ONCE_LINGER_MS = 20
EOS_LINGER_MS = 20
# ListOffsets' special timestamps: a partition's log start and its end (high watermark or last stable offset)
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
# The restore consumer reads changelogs from their start as fast as the store can take them: librdkafka
# stops prefetching a partition once its local queue holds queued.min.messages (100k by default) and
# then backs off fetch.queue.backoff.ms (1 s), so a restore stalled every 100k records. Prefetching up to
# a million (bounded by queued.max.messages.kbytes, 64 MiB) keeps the fetcher ahead of the store.
# fetch.wait.max.ms: under exactly_once_v2 every changelog ends with a transaction marker, which is no
# record: a restoration learns it has passed it only from librdkafka's end-of-partition event, which
# comes with the next, empty, fetch, and the broker holds an empty fetch for fetch.wait.max.ms (500 ms by
# default). Each restored task waited that long after its last record; a recovery with nothing to
# restore but the markers took ~1 s (bench/restore.py --crash). 50 ms, as the group consumer, keeps an
# idle restore consumer (standbys kept current) at 20 fetches a second.
RESTORE_FETCH_TUNING: dict[str, Any] = {
    "queued.min.messages": 1_000_000,
    "fetch.queue.backoff.ms": 20,
    "fetch.wait.max.ms": 50,
}
# What the stream thread's consumer may prefetch, bounded independently of the partition count.
# librdkafka answers each fetch with up to max.partition.fetch.bytes (1 MiB) per assigned partition, up to
# fetch.max.bytes (50 MiB by default) per response, and keeps every fetched message as an op of its own:
# ~350 bytes beyond the payload, which is all queued.max.messages.kbytes counts. So with librdkafka's
# defaults a response grew with the partitions, and small records cost ~20x their size: counting 1M
# 16-byte records from 64 partitions, the process peaked at 474 MiB (RSS, 91 MiB idle), 207 MiB from 4
# (bench/scaling_cost.py). Capping a response at 2 MiB and the queue at 4 MiB of payload keeps the
# prefetch at queued.min.messages plus one response whatever the partition count (184 MiB at 64
# partitions, no slower). The Java consumer keeps fetched batches as their wire bytes, so Kafka Streams
# does not need this. `consumer.fetch.max.bytes` / `consumer.queued.max.messages.kbytes` override.
CONSUMER_MEMORY_BOUNDS: dict[str, Any] = {"fetch.max.bytes": 2 << 20, "queued.max.messages.kbytes": 4096}


def _base(config: StreamsConfig) -> dict[str, Any]:
    base: dict[str, Any] = {"bootstrap.servers": config.require("bootstrap.servers")}
    for key in PASSTHROUGH:
        if key in config:
            base[key] = config.get(key)
    return base


def connection_settings(config: StreamsConfig) -> dict[str, Any]:
    """How to reach the cluster (`bootstrap.servers`, security settings): what every client shares."""
    return _base(config)


def client_configs(
    config: StreamsConfig, client_id: str, process_id: str | None = None
) -> dict[str, dict[str, Any]]:
    """librdkafka configs for the roles `consumer`, `restore`, `producer` and `admin`.

    Under exactly_once_v2 the transactional id is `<application.id>-<group.instance.id>`, else
    `<application.id>-<process_id>` (the id persisted in state.dir, runner/process_id.py), so a restarted
    instance fences its predecessor; a random one only when neither is known."""
    app_id = config.application_id
    base = _base(config)
    eos = config.exactly_once
    consumer: dict[str, Any] = {
        **base,
        "group.id": app_id,
        "client.id": f"{client_id}-consumer",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "partition.assignment.strategy": "range",
        "isolation.level": "read_committed" if eos else "read_uncommitted",
        # Records flow through repartition topics within the app: a broker holding an empty fetch for
        # the default 500 ms would add that much latency to every hop.
        "fetch.wait.max.ms": 50,
        # librdkafka postpones a partition's next fetch by this much (1 s by default) once its local
        # queue is over queued.min.messages, which a prefetched source topic soon is: the repartition
        # records a task just wrote then come back a second late. A hand-written word count through a
        # repartition topic ran 2.4x faster with 0 on the bench broker; 20 ms keeps most of that.
        "fetch.queue.backoff.ms": 20,
        **CONSUMER_MEMORY_BOUNDS,
    }
    consumer.update({key: config.get(key) for key in GROUP_CONSUMER_ONLY if key in config})
    instance = config.get_str("group.instance.id")
    if instance:
        consumer["group.instance.id"] = instance
    consumer.update(config.prefixed("consumer."))
    if is_consumer_protocol(consumer):
        # KIP-848: the broker assigns (co-partitioning-aware `range`) and owns session timing, so the
        # classic-only client settings must not be sent.
        for key in ("partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms"):
            consumer.pop(key, None)
        consumer.setdefault("group.remote.assignor", "range")
    restore: dict[str, Any] = {
        **base,
        # assign()-only: this id is never joined or committed to, but librdkafka wants one.
        "group.id": f"{app_id}-restore",
        "client.id": f"{client_id}-restore-consumer",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed" if eos else "read_uncommitted",
        **RESTORE_FETCH_TUNING,
    }
    restore.update(config.prefixed("restore.consumer."))
    producer: dict[str, Any] = {
        **base,
        "client.id": f"{client_id}-producer",
        "partitioner": "murmur2_random",
        "linger.ms": EOS_LINGER_MS if eos else AT_LEAST_ONCE_LINGER_MS,
        "enable.idempotence": True,
        "acks": "all",
    }
    if eos:
        producer["transactional.id"] = f"{app_id}-{instance or process_id or uuid.uuid4().hex}"
        producer.update(EOS_PRODUCER_DEFAULTS)
    producer.update(config.prefixed("producer."))
    admin: dict[str, Any] = {**base, "client.id": f"{client_id}-admin"}
    admin.update(config.prefixed("admin."))
    return {"consumer": consumer, "restore": restore, "producer": producer, "admin": admin}


def is_consumer_protocol(settings: dict[str, Any]) -> bool:
    """True for the KIP-848 `consumer` group protocol, whose rebalances are incremental."""
    return str(settings.get("group.protocol", "classic")).lower() == "consumer"


def new_consumer(settings: dict[str, Any]) -> Consumer:
    """A consumer its owner polls (its librdkafka log lines arrive through those polls)."""
    return Consumer(with_logger(settings))


def new_producer(settings: dict[str, Any]) -> Producer:
    """A producer its owner polls (its librdkafka log lines arrive through those polls)."""
    return Producer(with_logger(settings))


class ProductionError(StreamsError):
    """A record could not be produced (reported by a delivery callback)."""


# Errors after which a producer is unusable: librdkafka's fatal error (raised as _FATAL once it is in
# that state) and the fencing codes of a transactional producer a newer instance took over.
_PRODUCER_FATAL = {
    KafkaError._FATAL,
    KafkaError._FENCED,
    KafkaError.PRODUCER_FENCED,
    KafkaError.INVALID_PRODUCER_EPOCH,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}


def producer_failed_fatally(err: KafkaError) -> bool:
    """True when `err` leaves the producer unusable: it must be replaced, not retried."""
    return bool(err.fatal()) or err.code() in _PRODUCER_FATAL


def production_failure(exc: BaseException, what: str) -> StreamsError:
    """The typed error for a failed producer call: ProducerFencedError when the producer is done for.

    confluent-kafka reports a fatal error raised around a delivery callback as a SystemError ("returned a
    result with an exception set"), the KafkaException only as its cause: both mean the same."""
    cause = exc if isinstance(exc, KafkaException) else exc.__cause__ or exc.__context__
    if isinstance(exc, SystemError) and not isinstance(cause, KafkaException):
        return ProducerFencedError(f"{what}: the producer failed fatally ({exc})")
    if isinstance(cause, KafkaException):
        err = cause.args[0]
        if isinstance(err, KafkaError) and producer_failed_fatally(err):
            return ProducerFencedError(f"{what}: {err}")
    return ProductionError(f"{what}: {exc}")


def produce_record(
    producer: Producer,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: Headers | None,
    timestamp: int,
    partition: int | None,
    on_delivery: Any,
) -> None:
    """Produce one record, waiting (while serving delivery reports) when the local queue is full.
    `partition=None` lets the producer's murmur2_random partitioner choose, as Kafka Streams does."""
    # the hot path (sinks, repartition topics) passes no partition or headers: no argument dict to build
    plain = partition is None and timestamp >= 0 and not headers
    kwargs: dict[str, Any] = {}
    if not plain:
        kwargs = {"key": key, "value": value, "on_delivery": on_delivery}
        if partition is not None:
            kwargs["partition"] = partition
        if timestamp >= 0:
            kwargs["timestamp"] = timestamp
        if headers is not None and len(headers):
            kwargs["headers"] = headers.to_list()
    while True:
        try:
            if plain:
                producer.produce(topic, value, key, on_delivery=on_delivery, timestamp=timestamp)
            else:
                producer.produce(topic, **kwargs)
            return
        except BufferError:
            try:
                producer.poll(0.05)  # the local queue is full: serve delivery reports, retry
            except (KafkaException, SystemError) as exc:
                raise production_failure(exc, f"cannot produce to '{topic}'") from exc
        except (KafkaException, SystemError) as exc:
            raise production_failure(exc, f"cannot produce to '{topic}'") from exc


class DeliveryReports:
    """What the producers' delivery reports tell Python: the last acknowledged offset of each changelog
    partition (`written`, which a commit checkpoints) and the first delivery that failed (`error`, which
    the next flush raises), after the production handler had its say. Owned by the producer whose
    records they report; the collector passes its callbacks to each send.

    Changelog records are the only ones whose successful delivery is reported to Python
    (`on_delivery`); every other record (sinks, repartition topics: most records) costs no Python call
    when delivered (`on_error_only`, and at at_least_once the producer is created with
    `delivery.report.only.error`). Over a transactional producer non-changelog records have no
    delivery report at all (`on_error_only` is None): a record that fails puts librdkafka's transaction
    in its abortable state, so the commit fails and names it. A delivery report served in Python costs
    about a third of producing the record. At at_least_once with the native core, the records it sends
    carry no delivery state either: their failures come from its librdkafka plugin (`failed_natively`)."""

    def __init__(self, production_handler: Any = None, *, transactional: bool = False) -> None:
        self.written: dict[tuple[str, int], int] = {}
        self.error: KafkaError | None = None
        self.error_topic = ""
        self.retry = False  # the handler answered RETRY for `error`, which is retriable
        self._handler = production_handler
        # bound once, not per record
        self.on_delivery = self._on_delivery
        self.on_error_only: Any = None if transactional else self._on_error_only

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self._failed(err, msg)
            return
        tp = (msg.topic(), msg.partition())
        offset = msg.offset()
        if offset > self.written.get(tp, -1):
            self.written[tp] = offset

    def _on_error_only(self, err: KafkaError | None, msg: Any) -> None:
        """The delivery report of a record whose offset nobody needs: only a failure matters."""
        if err is not None:
            self._failed(err, msg)

    def failed_natively(self, failures: list[Any]) -> None:
        """Failures the native core's librdkafka plugin kept (kappaflow.runner.native_produce), as
        (topic, partition, key, value, offset, error code, (timestamp type, timestamp)): each reaches the
        production handler as a report through confluent-kafka does, with a `Message` of the record and
        its `KafkaError` (confluent-kafka gives a producer's report the code's own text too)."""
        for topic, partition, key, value, offset, code, timestamp in failures:
            err = KafkaError(code)
            msg = Message(
                topic=topic, partition=partition, offset=offset, key=key, value=value, error=err,
                timestamp=timestamp,
            )  # fmt: skip
            self._failed(err, msg)

    def _failed(self, err: KafkaError, msg: Any) -> None:
        response = None if self._handler is None else self._handler(err, msg)
        if response is HandlerResponse.CONTINUE:
            log.warning("dropping record for %s after production error: %s", msg.topic(), err)
            return
        if self.error is None:
            self.error, self.error_topic = err, msg.topic()
            # KIP-1065: RETRY only for what may succeed when sent again (Java: a RetriableException)
            self.retry = response is HandlerResponse.RETRY and delivery_retriable(err)

    def raise_error(self) -> None:
        """Raise the failed delivery, once: ProducerFencedError when the producer itself failed."""
        if self.error is not None:
            err, topic = self.error, self.error_topic
            self.error = None
            if producer_failed_fatally(err):
                raise ProducerFencedError(f"producing to '{topic}' failed: {err}")
            if self.retry:
                self.retry = False
                raise TaskCorruptedError(
                    f"producing to '{topic}' failed: {err}; production.exception.handler answered RETRY: "
                    "redoing the work since the last commit"
                )
            raise ProductionError(f"producing to '{topic}' failed: {err}")


# librdkafka reports a delivery it gave up on after `message.timeout.ms` as _MSG_TIMED_OUT, which it does
# not flag retriable; Java's producer reports the same as a TimeoutException, a RetriableException
_TIMEOUTS = (KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT)


def delivery_retriable(err: KafkaError) -> bool:
    """Whether sending the record again may succeed (Java's RetriableException): what librdkafka flags
    retriable, and its timeouts (a broker short of in-sync replicas or unreachable until the timeout)."""
    return bool(err.retriable()) or err.code() in _TIMEOUTS


class ProducerClients(Protocol):
    """The librdkafka producers records go through now (a fenced or failed one is replaced: read them
    per send), their delivery reports, and the serving of those reports (the runner's StreamsProducer)."""

    producer: Producer
    changelog_producer: Producer
    deliveries: DeliveryReports

    def serve_reports(self) -> None: ...


class KafkaRecordCollector:
    """The RecordCollector of every task in a process (Kafka Streams' RecordCollectorImpl): it sends the
    tasks' serialized records through the stream thread's producer, which it is given and which owns
    the librdkafka producers, their transactions and their delivery reports. At at_least_once changelog
    records go through a producer of their own, which reports every delivery (see DeliveryReports);
    under exactly_once_v2 both are the one transactional producer."""

    def __init__(self, clients: ProducerClients, metadata_source: Any) -> None:
        self._clients = clients
        self._metadata_source = metadata_source
        self._partition_counts: dict[str, int] = {}
        self._sent = 0  # through `send` here; `sent` adds the native send's
        self._native: Any = None
        self._native_changelog: Any = None
        # the delivery callbacks, bound once, not per record (the reports object outlives producers)
        self._report_offset = clients.deliveries.on_delivery
        self._report_error = clients.deliveries.on_error_only

    @property
    def sent(self) -> int:
        """Records sent, by this collector and by the native sends it was given."""
        native: int = sum(
            sender.sent for sender in (self._native, self._native_changelog) if sender is not None
        )
        return self._sent + native

    @property
    def report_offset(self) -> Any:
        """The delivery callback of changelog records: their offsets are what the checkpoints keep."""
        return self._report_offset

    @property
    def report_error(self) -> Any:
        """The delivery callback of sink and repartition records (None: the producer's default)."""
        return self._report_error

    def use_native(self, native_send: Any) -> None:
        """Send sink and repartition records through `native_send` (kappaflow.runner.native_produce),
        which falls back to this collector's `send` for what it does not produce itself. The method
        stays the reference; the instance attribute shadows it for the sinks that read `send`."""
        self._native = native_send
        self.send = native_send  # type: ignore[method-assign]

    def use_native_changelog(self, native_send: Any) -> None:
        """Send changelog records through `native_send.changelog` (a `ProduceSend` on the clients'
        `changelog_producer` with `report_offset` as its callback), which falls back to this collector's
        `send_changelog`; the method stays the reference, shadowed as `use_native` shadows `send`."""
        self._native_changelog = native_send
        self.send_changelog = native_send.changelog  # type: ignore[method-assign]

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
        timestamp: int,
        partition: int | None,
    ) -> None:
        producer = self._clients.producer
        if partition is None and timestamp >= 0 and not headers:
            try:  # the commonest record, produced without produce_record's frame
                producer.produce(topic, value, key, on_delivery=self._report_error, timestamp=timestamp)
            except BufferError:  # the local queue is full: produce_record waits and retries
                produce_record(producer, topic, key, value, headers, timestamp, None, self._report_error)
            except (KafkaException, SystemError) as exc:
                raise production_failure(exc, f"cannot produce to '{topic}'") from exc
        else:
            produce_record(producer, topic, key, value, headers, timestamp, partition, self._report_error)
        self._sent += 1  # counted inline: this runs for every record
        if self._sent & 0x3FF == 0:  # every 1024 records: neither producer's queue of reports grows
            self._clients.serve_reports()

    def send_dead_letter(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        timestamp: int,
        on_written: Callable[[], None],
    ) -> None:
        """Dead letters are rare: each gets its own delivery report, so only a written one is counted.
        They go through the producer that reports successes (`producer` reports only errors at
        at_least_once)."""

        def report(err: KafkaError | None, msg: Any) -> None:
            if err is None:
                on_written()
            else:
                self._report_error(err, msg)

        produce_record(self._clients.changelog_producer, topic, key, value, headers, timestamp, None, report)
        self._sent += 1

    def send_changelog(
        self, topic: str, key: bytes, value: bytes | None, timestamp: int, partition: int
    ) -> None:
        produce_record(
            self._clients.changelog_producer,
            topic,
            key,
            value,
            None,
            timestamp,
            partition,
            self._report_offset,
        )
        self._sent += 1
        if self._sent & 0x3FF == 0:
            self._clients.serve_reports()

    def partition_count(self, topic: str) -> int | None:
        count = self._partition_counts.get(topic)
        if count is None:
            metadata = self._metadata_source.list_topics(topic, timeout=10)
            found = metadata.topics.get(topic)
            if found is None or found.error is not None or not found.partitions:
                return None
            count = self._partition_counts[topic] = len(found.partitions)
        return count


class WatermarkReader:
    """(log start, high watermark) of partitions, read_uncommitted, from a consumer that is never
    assigned anything.

    Never assigned, it answers at once: a consumer that fetches answers only after its fetch long-poll
    (~0.5 s per partition). It reads read_uncommitted whatever the application's guarantee, so the high
    watermark lies past transactions still open below it (a read_committed consumer reports the last
    stable offset). Being a consumer, it refreshes partition leaders as consumers do after a broker
    restart (librdkafka's admin ListOffsets kept failing with FENCED_LEADER_EPOCH there).

    All the partitions asked for are looked up together: two ListOffsets requests per leader (earliest,
    latest: `offsets_for_times` with the protocol's special timestamps -2 and -1, answered at the
    consumer's isolation level as `get_watermark_offsets` is), not two per partition one after another.
    A task's registration asks for all of an assignment's changelogs at once (ChangelogReader.prefetch):
    4 partitions took 12.6 ms one by one against 1.1 ms together on a local broker."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self._consumer = Consumer(with_logger({**settings, "isolation.level": "read_uncommitted"}))

    def __call__(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        if not partitions:
            return {}
        serve_consumer_logs(self._consumer)  # it never fetches: only this hands over its log lines
        lows = self._offsets(partitions, EARLIEST_TIMESTAMP)
        highs = self._offsets(partitions, LATEST_TIMESTAMP)
        return {tp: (lows[tp], highs[tp]) for tp in partitions}

    def _offsets(self, partitions: list[tuple[str, int]], spec: int) -> dict[tuple[str, int], int]:
        """The earliest or latest offset (`spec`) of every partition; a KafkaException when any cannot
        be read. A client with no interest in a topic does not refresh its metadata by itself (after a
        broker restart it answers "Unknown partition" for as long as it lives): the topics that failed
        are looked up before the error is raised, for the caller's retry."""
        asked = [TopicPartition(topic, partition, spec) for topic, partition in partitions]
        try:
            found = self._consumer.offsets_for_times(asked, timeout=10)
        except KafkaException:
            for topic in sorted({topic for topic, _p in partitions}):
                self._consumer.list_topics(topic, timeout=10)
            raise
        failed = [tp for tp in found if tp.error is not None or tp.offset < 0]
        if failed:
            for topic in sorted({tp.topic for tp in failed}):
                self._consumer.list_topics(topic, timeout=10)
            error = failed[0].error
            if error is None:
                error = KafkaError(KafkaError._UNKNOWN_PARTITION, f"no offset for {failed[0].topic}")
            raise KafkaException(error)
        return {(tp.topic, tp.partition): int(tp.offset) for tp in found}

    def close(self) -> None:
        self._consumer.close()


class CommittedOffsetReader:
    """The application group's committed offsets of input partitions, from a consumer of the group's id
    that never joins it (an offset fetch needs no membership): where restoring a source topic that serves
    as a store's changelog stops (`reuse.ktable.source.topics`). Created on first use: most topologies
    never ask."""

    def __init__(self, settings: dict[str, Any], group_id: str) -> None:
        self._settings = {**settings, "group.id": group_id, "enable.auto.commit": False}
        self._consumer: Consumer | None = None

    def __call__(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
        if self._consumer is None:
            self._consumer = Consumer(with_logger(self._settings))
        serve_consumer_logs(self._consumer)
        found = self._consumer.committed([TopicPartition(t, p) for t, p in partitions], timeout=10)
        return {(tp.topic, tp.partition): (int(tp.offset) if tp.offset >= 0 else None) for tp in found}

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
