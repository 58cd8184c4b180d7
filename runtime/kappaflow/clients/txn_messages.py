"""The requests of KIP-664's transaction tooling, encoded and decoded (pure; framing in clients/wire.py).

Each API has the version range kappaflow speaks (`*_VERSIONS`); clients/wire_client.py sends each at the
highest version the broker speaks too. Field order and types follow Kafka's message schemas
(`common/message/<Name>Request.json` / `Response.json`); the fields kappaflow does not use are read and
dropped, so a decoder stays in step with the bytes.

- FindCoordinator (10) with key type 1 finds a transactional id's coordinator, with key type 0 a
  consumer group's (v3: one key; v4+: a batch of keys, answered per key).
- DescribeProducers (61), asked of a partition's leader, lists the producers it remembers for the
  partition, with the first offset of each one's open transaction: the only place that says which
  producer holds a last stable offset back.
- ListTransactions (66), asked of every broker (each coordinates the transactional ids hashed to its
  `__transaction_state` partitions), lists transactional ids with producer id and state.
- DescribeTransactions (65), asked of a transactional id's coordinator, gives its state, timeout, start
  time and the partitions in its current transaction.
- WriteTxnMarkers (27), sent to a partition's leader, writes an abort marker for one producer: the
  admin abort of KIP-664 (the coordinator normally sends it). The leader accepts it when the producer
  epoch is not older than the producer's and the coordinator epoch not older than the one it has seen.

The registry below (`API_NAMES`, `SUPPORTED`, `is_flexible`) is the one clients/wire_client.py sends by; it
also lists LeaveGroup (13), whose messages are in clients/group_messages.py (a static member's removal on
close, KIP-1153).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kappaflow.clients.group_messages import LEAVE_GROUP, LEAVE_GROUP_VERSIONS
from kappaflow.clients.group_messages import is_flexible as leave_group_is_flexible
from kappaflow.clients.wire import Reader, VersionRange, Writer

FIND_COORDINATOR, WRITE_TXN_MARKERS = 10, 27
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66
API_NAMES = {
    FIND_COORDINATOR: "FindCoordinator", WRITE_TXN_MARKERS: "WriteTxnMarkers",
    DESCRIBE_PRODUCERS: "DescribeProducers", DESCRIBE_TRANSACTIONS: "DescribeTransactions",
    LIST_TRANSACTIONS: "ListTransactions", LEAVE_GROUP: "LeaveGroup",
}  # fmt: skip
FIND_COORDINATOR_VERSIONS = VersionRange(3, 6)
DESCRIBE_PRODUCERS_VERSIONS = VersionRange(0, 0)
LIST_TRANSACTIONS_VERSIONS = VersionRange(0, 2)
DESCRIBE_TRANSACTIONS_VERSIONS = VersionRange(0, 0)
WRITE_TXN_MARKERS_VERSIONS = VersionRange(1, 2)  # v0 is gone since Kafka 4.0
SUPPORTED = {
    FIND_COORDINATOR: FIND_COORDINATOR_VERSIONS, DESCRIBE_PRODUCERS: DESCRIBE_PRODUCERS_VERSIONS,
    LIST_TRANSACTIONS: LIST_TRANSACTIONS_VERSIONS, DESCRIBE_TRANSACTIONS: DESCRIBE_TRANSACTIONS_VERSIONS,
    WRITE_TXN_MARKERS: WRITE_TXN_MARKERS_VERSIONS, LEAVE_GROUP: LEAVE_GROUP_VERSIONS,
}  # fmt: skip
KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION = 0, 1


def is_flexible(api_key: int, version: int) -> bool:
    """Whether `version` of `api_key` uses the compact encodings (and request header v2). The others are
    flexible from the first version kappaflow speaks."""
    if api_key == LEAVE_GROUP:
        return leave_group_is_flexible(version)
    return version >= 3 if api_key == FIND_COORDINATOR else True


# ------------------------------------------------------------------------------------ FindCoordinator
@dataclass(frozen=True, slots=True)
class Coordinator:
    key: str
    node_id: int
    host: str
    port: int
    error_code: int
    error_message: str | None


def encode_find_coordinator(version: int, key: str, key_type: int = KEY_TYPE_TRANSACTION) -> bytes:
    w = Writer(flexible=True)
    if version <= 3:
        w.string(key)
        w.int8(key_type)
    else:
        w.int8(key_type)
        w.array([key], lambda w2, k: w2.string(k))
    w.tags()
    return w.getvalue()


def decode_find_coordinator(version: int, r: Reader, key: str) -> list[Coordinator]:
    r.int32()  # throttle time
    if version <= 3:
        error, message = r.int16(), r.nullable_string()
        node_id, host, port = r.int32(), r.string(), r.int32()
        r.tags()
        return [Coordinator(key, node_id, host, port, error, message)]

    def one(c: Reader) -> Coordinator:
        found = Coordinator(c.string(), c.int32(), c.string(), c.int32(), c.int16(), c.nullable_string())
        c.tags()
        return found

    coordinators = r.array(one)
    r.tags()
    return coordinators


# ---------------------------------------------------------------------------------- DescribeProducers
@dataclass(frozen=True, slots=True)
class ProducerState:
    """A producer a partition's leader remembers; `current_txn_start_offset` is -1 when it has no open
    transaction there, `coordinator_epoch` -1 when no transaction of it has been completed there yet."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


@dataclass(frozen=True, slots=True)
class PartitionProducers:
    topic: str
    partition: int
    error_code: int
    error_message: str | None
    producers: tuple[ProducerState, ...]


def encode_describe_producers(topics: dict[str, list[int]]) -> bytes:
    w = Writer(flexible=True)

    def topic(w2: Writer, item: tuple[str, list[int]]) -> None:
        w2.string(item[0])
        w2.array(item[1], lambda w3, p: w3.int32(p))
        w2.tags()

    w.array(sorted(topics.items()), topic)
    w.tags()
    return w.getvalue()


def decode_describe_producers(r: Reader) -> list[PartitionProducers]:
    r.int32()  # throttle time
    found: list[PartitionProducers] = []

    def producer(p: Reader) -> ProducerState:
        state = ProducerState(p.int64(), p.int32(), p.int32(), p.int64(), p.int32(), p.int64())
        p.tags()
        return state

    def topic(t: Reader) -> None:
        name = t.string()

        def partition(p: Reader) -> None:
            index, error, message = p.int32(), p.int16(), p.nullable_string()
            producers = tuple(p.array(producer))
            p.tags()
            found.append(PartitionProducers(name, index, error, message, producers))

        t.array(partition)
        t.tags()

    r.array(topic)
    r.tags()
    return found


# ----------------------------------------------------------------------------------- ListTransactions
@dataclass(frozen=True, slots=True)
class ListedTransaction:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class TransactionListing:
    error_code: int
    unknown_state_filters: tuple[str, ...]
    transactions: tuple[ListedTransaction, ...]


def encode_list_transactions(version: int, states: list[str], producer_ids: list[int],
                             older_than_ms: int = -1) -> bytes:  # fmt: skip
    """`older_than_ms` >= 0 (v1+) lists only transactions running longer than that; with a broker that
    only speaks v0 the caller filters by itself."""
    w = Writer(flexible=True)
    w.array(states, lambda w2, s: w2.string(s))
    w.array(producer_ids, lambda w2, p: w2.int64(p))
    if version >= 1:
        w.int64(older_than_ms)
    if version >= 2:
        w.string(None)  # no transactional id pattern
    w.tags()
    return w.getvalue()


def decode_list_transactions(r: Reader) -> TransactionListing:
    r.int32()  # throttle time
    error = r.int16()
    unknown = tuple(r.array(lambda s: s.string()))

    def one(t: Reader) -> ListedTransaction:
        listed = ListedTransaction(t.string(), t.int64(), t.string())
        t.tags()
        return listed

    transactions = tuple(r.array(one))
    r.tags()
    return TransactionListing(error, unknown, transactions)


# ------------------------------------------------------------------------------- DescribeTransactions
@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """The coordinator's view of a transactional id. `partitions`: those in its current transaction (in
    PrepareCommit/PrepareAbort, only those still without a marker); `start_time_ms` -1 when none."""

    error_code: int
    transactional_id: str
    state: str
    timeout_ms: int
    start_time_ms: int
    producer_id: int
    producer_epoch: int
    partitions: frozenset[tuple[str, int]] = field(default_factory=frozenset)


def encode_describe_transactions(transactional_ids: list[str]) -> bytes:
    w = Writer(flexible=True)
    w.array(sorted(transactional_ids), lambda w2, t: w2.string(t))
    w.tags()
    return w.getvalue()


def decode_describe_transactions(r: Reader) -> list[TransactionDescription]:
    r.int32()  # throttle time

    def one(t: Reader) -> TransactionDescription:
        error, txn_id, state = t.int16(), t.string(), t.string()
        timeout, start, pid, epoch = t.int32(), t.int64(), t.int64(), t.int16()
        partitions: set[tuple[str, int]] = set()

        def topic(p: Reader) -> None:
            name = p.string()
            partitions.update((name, index) for index in p.array(lambda q: q.int32()))
            p.tags()

        t.array(topic)
        t.tags()
        return TransactionDescription(error, txn_id, state, timeout, start, pid, epoch, frozenset(partitions))

    described = r.array(one)
    r.tags()
    return described


# ------------------------------------------------------------------------------------ WriteTxnMarkers
@dataclass(frozen=True, slots=True)
class AbortSpec:
    """What the leader of `topic`-`partition` needs to abort a producer's open transaction there: the
    producer id and epoch and the coordinator epoch, as DescribeProducers reports them."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int


@dataclass(frozen=True, slots=True)
class MarkerResult:
    producer_id: int
    topic: str
    partition: int
    error_code: int


def encode_write_txn_markers(version: int, spec: AbortSpec) -> bytes:
    """One abort marker (transaction result false) for one partition. From v2 the marker carries a
    transaction version; 0 (legacy), as Kafka's own admin abort sends, keeps the leader's classic check
    (the producer epoch may equal the one it has)."""
    w = Writer(flexible=True)

    def marker(w2: Writer, s: AbortSpec) -> None:
        w2.int64(s.producer_id)
        w2.int16(s.producer_epoch)
        w2.boolean(False)

        def topic(w3: Writer, t: tuple[str, list[int]]) -> None:
            w3.string(t[0])
            w3.array(t[1], lambda w4, p: w4.int32(p))
            w3.tags()

        w2.array([(s.topic, [s.partition])], topic)
        w2.int32(s.coordinator_epoch)
        if version >= 2:
            w2.int8(0)
        w2.tags()

    w.array([spec], marker)
    w.tags()
    return w.getvalue()


def decode_write_txn_markers(r: Reader) -> list[MarkerResult]:
    results: list[MarkerResult] = []

    def marker(m: Reader) -> None:
        producer_id = m.int64()

        def topic(t: Reader) -> None:
            name = t.string()

            def partition(p: Reader) -> None:
                results.append(MarkerResult(producer_id, name, p.int32(), p.int16()))
                p.tags()

            t.array(partition)
            t.tags()

        m.array(topic)
        m.tags()

    r.array(marker)
    r.tags()
    return results
