"""KIP-664's admin operations over clients/wire_client.py, routed as Kafka's Admin routes them.

confluent-kafka's metadata gives the brokers and each partition's leader; DescribeProducers and the
abort marker go to the leader of their partition, ListTransactions to every broker (each coordinates
its share of the transactional ids), DescribeTransactions to the id's coordinator (FindCoordinator).
A coordinator still loading its state, or one that moved, is asked again for a few seconds.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from kappaflow.clients import txn_messages as msg
from kappaflow.clients.hanging_transactions import TransactionsError
from kappaflow.clients.rdkafka_log import with_logger
from kappaflow.clients.wire import ProtocolError, error_name
from kappaflow.clients.wire_client import BrokerConnection, BrokerIOError, ssl_context

RETRIABLE = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
TRANSACTIONAL_ID_NOT_FOUND = 105
RETRY_FOR_S = 10.0


class TransactionsAdmin:
    """The cluster as the transaction commands see it; close() when done."""

    def __init__(self, settings: Mapping[str, Any], timeout_s: float) -> None:
        self.bootstrap = str(settings["bootstrap.servers"])
        self._timeout_s = timeout_s
        self._context = ssl_context(settings)
        admin = AdminClient(with_logger(dict(settings)))
        try:
            self.metadata = admin.list_topics(timeout=timeout_s)
        except KafkaException as exc:
            raise TransactionsError(
                f"cannot reach Kafka at bootstrap.servers={self.bootstrap}: {exc}"
            ) from exc
        self._connections: dict[tuple[str, int], BrokerConnection] = {}

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    # ------------------------------------------------------------------------------------- routing
    def _connect(self, host: str, port: int) -> BrokerConnection:
        key = (host, port)
        if key not in self._connections:
            try:
                self._connections[key] = BrokerConnection(host, port, self._timeout_s, self._context)
            except (BrokerIOError, ProtocolError) as exc:
                raise TransactionsError(str(exc)) from exc
        return self._connections[key]

    def _broker(self, node_id: int) -> BrokerConnection:
        broker = self.metadata.brokers.get(node_id)
        if broker is None:
            raise TransactionsError(f"broker {node_id} is not in the cluster's metadata ({self.bootstrap})")
        return self._connect(str(broker.host), int(broker.port))

    def _call(self, connection: BrokerConnection, api_key: int, encode: Any, decode: Any) -> Any:
        try:
            return connection.call(api_key, encode, decode)
        except (BrokerIOError, ProtocolError) as exc:
            raise TransactionsError(
                f"{msg.API_NAMES[api_key]} to broker {connection.address}: {exc}"
            ) from exc

    def leader(self, topic: str, partition: int) -> int:
        """The leader's broker id; an error naming --topic or --partition when there is none."""
        found = self.metadata.topics.get(topic)
        if found is None or found.error is not None:
            raise TransactionsError(
                f"--topic: topic '{topic}' does not exist on bootstrap.servers={self.bootstrap}"
            )
        if partition not in found.partitions:
            last = len(found.partitions) - 1
            raise TransactionsError(f"--partition: topic '{topic}' has partitions 0-{last}, not {partition}")
        leader = int(found.partitions[partition].leader)
        if leader < 0:
            raise TransactionsError(f"{topic}-{partition} has no leader at the moment: try again")
        return leader

    def partitions(self, topics: Iterable[str] | None) -> list[tuple[str, int]]:
        """Every partition of `topics` (None: of every topic, internal ones included, as a hanging
        transaction may hold `__consumer_offsets`)."""
        names = sorted(self.metadata.topics) if topics is None else list(topics)
        for name in names:
            if name not in self.metadata.topics or self.metadata.topics[name].error is not None:
                raise TransactionsError(
                    f"--topic: topic '{name}' does not exist on bootstrap.servers={self.bootstrap}"
                )
        return [(name, p) for name in names for p in sorted(self.metadata.topics[name].partitions)]

    # ---------------------------------------------------------------------------------- operations
    def describe_producers(self, partitions: Iterable[tuple[str, int]]) -> list[msg.PartitionProducers]:
        """Each partition's producers, asking each leader for its own partitions in one request."""
        by_leader: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
        for topic, partition in partitions:
            by_leader[self.leader(topic, partition)][topic].append(partition)
        found: list[msg.PartitionProducers] = []
        for leader, topics in sorted(by_leader.items()):
            found += self._call(self._broker(leader), msg.DESCRIBE_PRODUCERS,
                                lambda _v, t=topics: msg.encode_describe_producers(t),
                                lambda _v, r: msg.decode_describe_producers(r))  # fmt: skip
        for answer in found:
            if answer.error_code != 0:
                detail = f": {answer.error_message}" if answer.error_message else ""
                raise TransactionsError(f"DescribeProducers for {answer.topic}-{answer.partition}: "
                                        f"{error_name(answer.error_code)}{detail}")  # fmt: skip
        return sorted(found, key=lambda p: (p.topic, p.partition))

    def list_transactions(self, states: list[str] | None = None, producer_ids: list[int] | None = None,
                          ) -> list[tuple[int, msg.ListedTransaction]]:  # fmt: skip
        """(coordinator broker id, transaction) for every transactional id every broker coordinates."""
        found: list[tuple[int, msg.ListedTransaction]] = []
        for node_id in sorted(self.metadata.brokers):
            listing: msg.TransactionListing = self._call(
                self._broker(node_id), msg.LIST_TRANSACTIONS,
                lambda v: msg.encode_list_transactions(v, states or [], producer_ids or []),
                lambda _v, r: msg.decode_list_transactions(r),
            )  # fmt: skip
            if listing.error_code not in (0, *RETRIABLE):  # a loading coordinator lists nothing yet
                raise TransactionsError(
                    f"ListTransactions on broker {node_id}: {error_name(listing.error_code)}"
                )
            if listing.unknown_state_filters:
                unknown = ", ".join(listing.unknown_state_filters)
                raise TransactionsError(
                    f"--state: unknown to the broker: {unknown} (states: Empty, Ongoing, PrepareCommit, "
                    "PrepareAbort, CompleteCommit, CompleteAbort, Dead, PrepareEpochFence)"
                )
            found += [(node_id, t) for t in listing.transactions]
        return sorted(found, key=lambda item: item[1].transactional_id)

    def describe_transactions(
        self, transactional_ids: Iterable[str]
    ) -> dict[str, msg.TransactionDescription | None]:
        """Each id's description from its coordinator; None for an id the coordinator does not know."""
        result: dict[str, msg.TransactionDescription | None] = {}
        for txn_id in sorted(set(transactional_ids)):
            result[txn_id] = self._retrying(lambda t=txn_id: self._describe_one(t))
        return result

    def _describe_one(self, txn_id: str) -> msg.TransactionDescription | int | None:
        any_broker = self._broker(min(self.metadata.brokers))
        coordinators: list[msg.Coordinator] = self._call(
            any_broker, msg.FIND_COORDINATOR,
            lambda v: msg.encode_find_coordinator(v, txn_id),
            lambda v, r: msg.decode_find_coordinator(v, r, txn_id),
        )  # fmt: skip
        coordinator = next((c for c in coordinators if c.key == txn_id), None)
        if coordinator is None:
            raise TransactionsError(f"FindCoordinator gave no answer for transactional id '{txn_id}'")
        if coordinator.error_code != 0:
            return coordinator.error_code
        described: list[msg.TransactionDescription] = self._call(
            self._connect(coordinator.host, coordinator.port), msg.DESCRIBE_TRANSACTIONS,
            lambda _v: msg.encode_describe_transactions([txn_id]),
            lambda _v, r: msg.decode_describe_transactions(r),
        )  # fmt: skip
        found = next((d for d in described if d.transactional_id == txn_id), None)
        if found is None or found.error_code == TRANSACTIONAL_ID_NOT_FOUND:
            return None
        return found.error_code if found.error_code != 0 else found

    def _retrying(self, attempt: Any) -> msg.TransactionDescription | None:
        """`attempt()` until it returns a description (or None), an error code outside RETRIABLE
        failing at once, a retriable one after RETRY_FOR_S."""
        deadline = time.monotonic() + RETRY_FOR_S
        while True:
            outcome = attempt()
            if not isinstance(outcome, int):
                return outcome  # type: ignore[no-any-return]
            if outcome not in RETRIABLE or time.monotonic() > deadline:
                raise TransactionsError(f"DescribeTransactions: {error_name(outcome)}")
            time.sleep(0.2)

    def abort(self, spec: msg.AbortSpec) -> None:
        """Write the abort marker of `spec` on its partition (through its leader)."""
        leader = self._broker(self.leader(spec.topic, spec.partition))
        results: list[msg.MarkerResult] = self._call(
            leader, msg.WRITE_TXN_MARKERS,
            lambda v: msg.encode_write_txn_markers(v, spec),
            lambda _v, r: msg.decode_write_txn_markers(r),
        )  # fmt: skip
        mine = [r for r in results if (r.producer_id, r.topic, r.partition) ==
                (spec.producer_id, spec.topic, spec.partition)]  # fmt: skip
        if len(mine) != 1:
            raise TransactionsError(
                f"WriteTxnMarkers to broker {leader.address}: unexpected answer {results}"
            )
        if mine[0].error_code != 0:
            raise TransactionsError(
                f"aborting producer {spec.producer_id} (epoch {spec.producer_epoch}, coordinator epoch "
                f"{spec.coordinator_epoch}) on {spec.topic}-{spec.partition}: "
                f"{_abort_error(mine[0].error_code)}"
            )


def _abort_error(code: int) -> str:
    hints = {
        47: "--producer-epoch is older than the producer's epoch on the partition",
        52: "--coordinator-epoch is older than the one the partition has seen",
        31: "the principal lacks the ClusterAction permission WriteTxnMarkers needs",
    }
    name = error_name(code)
    return f"{name}: {hints[code]}" if code in hints else name
