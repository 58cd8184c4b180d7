"""Foreign-key table-table joins: `left.join(right, foreign_key_extractor, joiner)` (KIP-213).

The two tables are keyed differently, so the join runs as a conversation over two internal topics, as
in Kafka Streams:

1. *Subscription registration* (left task): each left update sends `(foreign key -> subscription)` to
   `<name>-subscription-registration-topic`; the subscription carries the left key, a hash of the
   left value and an instruction (delete / propagate always / propagate only if the right value exists).
   A changed foreign key first unsubscribes from the old one.
2. *Subscription processing* (right task, co-partitioned with the right table): subscriptions live in a
   changelogged store keyed `[4-byte fk length][fk][pk]`; a new subscription, and every later update of
   the right row, sends `(left key -> response(hash, right value))` to
   `<name>-subscription-response-topic`.
3. *Resolution* (left task): a response whose hash no longer matches the left row's current value is
   stale (the left row changed meanwhile) and is dropped, so no out-of-date result is ever emitted;
   otherwise `joiner(left, right)` is emitted - or a tombstone when the right row is gone (inner) or
   the left row is gone (both).

Nodes, stores and topics are named as Java names them (`KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-<n>-topic`,
`KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-<n>`, ...; with a name, `<name>-subscription-registration-topic`,
`<name>-subscription-store`, ...), so a Java twin uses the same topics. The internal topics' value
formats are kappaflow's own (only kappaflow reads them). A left join keeps
rows with a null foreign key (they join with null, KIP-962, Kafka 3.7+); an inner join drops and counts
them. Without `Materialized` the result has no store and needs no value serde, as in Java; a later
operation that must look the result up (a join) materializes it then.

The foreign key comes from a `ForeignKeyExtractor` (dsl/fk_extractor.py): from the value, or from the key
and the value (KIP-1104); it is asked with the row's key for the old value as for the new one.

`KTable.join` calls `foreign_key_join`, so it takes the tables as `TableSide`s and makes the result
table through the left one (`_derive_table`).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from typing import Any, TypeVar

from kappaflow.api.errors import TopologyError
from kappaflow.api.processor import ProcessorContext
from kappaflow.api.record import Record
from kappaflow.api.serdes import Bytes, Serde
from kappaflow.dsl.change import Change
from kappaflow.dsl.fk_extractor import ForeignKeyExtractor
from kappaflow.dsl.graph import InternalBuilder
from kappaflow.dsl.join_sides import TableSide
from kappaflow.dsl.joins import adapt_joiner, source_topics
from kappaflow.dsl.options import Materialized
from kappaflow.dsl.stream_processors import drop_record
from kappaflow.dsl.table_joins import KTableKTableMergeProcessor
from kappaflow.dsl.value_getters import ValueGetter, ValueGetterSupplier
from kappaflow.state.builders import Stores

Table = TypeVar("Table", bound=TableSide)

_LEN = struct.Struct(">i")
DELETE_NO_PROPAGATE, DELETE_AND_PROPAGATE, PROPAGATE_NULL_IF_NO_FK_VALUE, PROPAGATE_ONLY_IF_FK_VALUE = range(
    4
)


def _serde(explicit: Serde[Any] | None, context: ProcessorContext, which: str) -> Serde[Any]:
    serde = explicit or context.app_config.serde(f"default.{which}.serde")
    if serde is None:
        raise TopologyError(f"foreign-key join: no {which} serde (set one or default.{which}.serde)")
    return serde


def value_hash(raw: bytes | None) -> bytes | None:
    return None if raw is None else hashlib.blake2b(raw, digest_size=16).digest()


def encode_subscription(instruction: int, digest: bytes | None, pk: bytes) -> bytes:
    return bytes([instruction, 0 if digest is None else 1]) + (digest or b"") + pk


def decode_subscription(raw: bytes) -> tuple[int, bytes | None, bytes]:
    instruction, has_hash = raw[0], raw[1]
    if has_hash:
        return instruction, raw[2:18], raw[18:]
    return instruction, None, raw[2:]


def encode_response(digest: bytes | None, value: bytes | None) -> bytes:
    head = b"\x00" if digest is None else b"\x01" + digest
    return head + (b"\x00" if value is None else b"\x01" + value)


def decode_response(raw: bytes) -> tuple[bytes | None, bytes | None]:
    digest, rest = (None, raw[1:]) if raw[0] == 0 else (raw[1:17], raw[17:])
    return digest, (None if rest[0] == 0 else rest[1:])


def combined_prefix(fk: bytes) -> bytes:
    return _LEN.pack(len(fk)) + fk


def subscription_instructions(
    extractor: ForeignKeyExtractor[Any, Any, Any], key: Any, old: Any, new: Any, left: bool
) -> list[tuple[Any, int]]:
    """The (foreign key, instruction) messages one left change sends, as Kafka Streams 4.x decides them.

    A left join always subscribes to the new foreign key with `PROPAGATE_NULL_IF_NO_FK_VALUE`, even a
    null one (KIP-962: the row joins with null) or for a delete, so every change yields one result; a
    changed foreign key first unsubscribes the old one silently. An inner join skips a new row whose
    foreign key is null, but unsubscribes the old one with `DELETE_AND_PROPAGATE` so a previous result
    is retracted; a changed foreign key unsubscribes silently and asks the new one for a result or a
    tombstone; an insert or an unchanged foreign key only propagates an actual join."""
    old_fk = None if old is None else extractor.extract(key, old)
    new_fk = None if new is None else extractor.extract(key, new)
    if left:
        if old is None and new is None:
            return []
        moved = [(old_fk, DELETE_NO_PROPAGATE)] if old_fk is not None and old_fk != new_fk else []
        return [*moved, (new_fk, PROPAGATE_NULL_IF_NO_FK_VALUE)]
    if new is None or new_fk is None:
        return [] if old_fk is None else [(old_fk, DELETE_AND_PROPAGATE)]
    if old_fk is not None and old_fk != new_fk:
        return [(old_fk, DELETE_NO_PROPAGATE), (new_fk, PROPAGATE_NULL_IF_NO_FK_VALUE)]
    return [(new_fk, PROPAGATE_ONLY_IF_FK_VALUE)]


def _skips_null_fk(extractor: ForeignKeyExtractor[Any, Any, Any], key: Any, new: Any) -> bool:
    """An inner join's new row dropped for a null foreign key (counted as a dropped record)."""
    return new is not None and extractor.extract(key, new) is None


class SubscriptionSendProcessor:
    """Left task: turns each left change into subscription messages keyed by foreign key."""

    context: ProcessorContext

    def __init__(
        self, extractor: ForeignKeyExtractor[Any, Any, Any], left: bool, serdes: tuple[Any, Any], label: str
    ) -> None:
        self.extractor = extractor
        self.left = left
        self.serdes = serdes
        self.label = label

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.key_serde = _serde(self.serdes[0], context, "key")
        self.value_serde = _serde(self.serdes[1], context, "value")

    def _send(
        self, fk: Any, instruction: int, digest: bytes | None, pk: bytes, record: Record[Any, Any]
    ) -> None:
        payload = encode_subscription(instruction, digest, pk)
        self.context.forward(Record(fk, payload, record.timestamp, record.headers))

    def process(self, record: Record[Any, Any]) -> None:
        change: Change[Any] = record.value
        if record.key is None:
            return
        if not change.is_latest:
            drop_record(self.context, "out-of-order-version", self.label)  # KIP-914: not the current row
            return
        pk = self.key_serde.serialize("", record.key)
        assert pk is not None
        digest = value_hash(self.value_serde.serialize("", change.new_value))
        for fk, instruction in subscription_instructions(
            self.extractor, record.key, change.old_value, change.new_value, self.left
        ):
            self._send(fk, instruction, digest, pk, record)
        if not self.left and _skips_null_fk(self.extractor, record.key, change.new_value):
            drop_record(self.context, "null-foreign-key", self.label)

    def close(self) -> None:
        return None


class _RightSide:
    context: ProcessorContext

    def __init__(
        self, store_name: str | None, getter: ValueGetterSupplier | None, serdes: tuple[Any, Any, Any]
    ) -> None:
        self.store_name = store_name  # the subscription store, for the processors connected to it
        self.getter_supplier = getter  # the right table's values, for the processor that looks them up
        self.serdes = serdes  # right key, right value, left key

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        if self.store_name is not None:
            self.store = context.get_state_store(self.store_name)
        if self.getter_supplier is not None:
            self.lookup: ValueGetter = self.getter_supplier.get(context)
        self.fk_serde = _serde(self.serdes[0], context, "key")
        self.right_value_serde = _serde(self.serdes[1], context, "value")
        self.pk_serde = _serde(self.serdes[2], context, "key")

    def _respond(self, pk: bytes, digest: bytes | None, value: Any, record: Record[Any, Any]) -> None:
        raw_value = self.right_value_serde.serialize("", value)
        key = self.pk_serde.deserialize("", pk)
        self.context.forward(
            Record(key, encode_response(digest, raw_value), record.timestamp, record.headers)
        )

    def close(self) -> None:
        return None


class SubscriptionReceiveProcessor(_RightSide):
    """Right task: stores (or deletes) a subscription, then passes it on to be answered (Java's
    SubscriptionReceiveProcessorSupplier; the answer is `SubscriptionJoinProcessor`'s, as in Java)."""

    def process(self, record: Record[Any, Any]) -> None:
        instruction, _digest, pk = decode_subscription(record.value)
        if record.key is None:
            # a left join's row with a null foreign key: joins with null, nothing to subscribe to
            if instruction == PROPAGATE_NULL_IF_NO_FK_VALUE:
                self.context.forward(record)
            return
        fk_raw = self.fk_serde.serialize("", record.key)
        assert fk_raw is not None
        store_key = combined_prefix(fk_raw) + pk
        if instruction in (DELETE_NO_PROPAGATE, DELETE_AND_PROPAGATE):
            self.store.delete(store_key)
        else:
            self.store.put(store_key, record.value)
        if instruction != DELETE_NO_PROPAGATE:
            self.context.forward(record)


class SubscriptionJoinProcessor(_RightSide):
    """Right task: answers a subscription with the right row's current value."""

    def process(self, record: Record[Any, Any]) -> None:
        instruction, digest, pk = decode_subscription(record.value)
        if record.key is None:
            self._respond(pk, digest, None, record)
            return
        found = self.lookup(record.key)
        right = None if found is None else found.value
        if instruction == PROPAGATE_ONLY_IF_FK_VALUE and right is None:
            return
        if instruction == DELETE_AND_PROPAGATE:
            right = None
        timestamp = record.timestamp if found is None else max(record.timestamp, found.timestamp)
        self._respond(pk, digest, right, record.with_timestamp(timestamp))


class ForeignTableChangeProcessor(_RightSide):
    """Right task: a right-row update answers every subscription of that foreign key again."""

    def __init__(
        self, store_name: str, getter: ValueGetterSupplier | None, serdes: tuple[Any, Any, Any], label: str
    ) -> None:
        super().__init__(store_name, getter, serdes)
        self.label = label

    def process(self, record: Record[Any, Any]) -> None:
        if record.key is None:
            return
        change: Change[Any] = record.value
        if not change.is_latest:
            drop_record(self.context, "out-of-order-version", self.label)  # KIP-914: not the current row
            return
        fk_raw = self.fk_serde.serialize("", record.key)
        assert fk_raw is not None
        prefix = combined_prefix(fk_raw)
        for _key, subscription in list(self.store.prefix_scan(prefix, Bytes())):
            _, digest, pk = decode_subscription(subscription)
            self._respond(pk, digest, change.new_value, record)


class ResponseResolverProcessor:
    """Left task: drops stale responses; emits joined values (or tombstones) for current ones."""

    context: ProcessorContext

    def __init__(
        self,
        getter: ValueGetterSupplier,
        joiner: Callable[[Any, Any, Any], Any],
        left: bool,
        serdes: tuple[Serde[Any] | None, Serde[Any] | None],
        label: str,
    ) -> None:
        self.getter_supplier = getter
        self.joiner = joiner
        self.left = left
        self.serdes = serdes  # left value, right value
        self.label = label

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.lookup: ValueGetter = self.getter_supplier.get(context)
        self.value_serde = _serde(self.serdes[0], context, "value")
        self.right_serde = _serde(self.serdes[1], context, "value")

    def process(self, record: Record[Any, Any]) -> None:
        digest, raw_right = decode_response(record.value)
        current = self.lookup(record.key)
        current_value = None if current is None else current.value
        if value_hash(self.value_serde.serialize("", current_value)) != digest:
            drop_record(self.context, "stale-foreign-key-response", self.label)
            return
        right = None if raw_right is None else self.right_serde.deserialize("", raw_right)
        if current_value is None or (right is None and not self.left):
            result = None
        else:
            result = self.joiner(record.key, current_value, right)
        self.context.forward(Record(record.key, Change(result, None), record.timestamp, record.headers))

    def close(self) -> None:
        return None


def foreign_key_join(
    left: Table,
    right: Table,
    extractor: ForeignKeyExtractor[Any, Any, Any],
    joiner: Callable[..., Any],
    left_join: bool,
    materialized: Materialized | str | None,
    name: str | None = None,
) -> Table:
    builder: InternalBuilder = left._builder
    if right._builder is not builder:
        raise TopologyError("cannot join tables from different StreamsBuilders")
    adapted = adapt_joiner(joiner)
    topology = builder.topology
    left.enable_send_old_values()

    def named(suffix: str, prefix: str) -> str:
        """Java's `suffixWithOrElseGet`: `<name><suffix>` or a generated name; a number is used up either
        way."""
        return builder.name_or_new(name and f"{name}{suffix}", prefix)

    # Java's KTableImpl.doJoinOnForeignKey, name for name and in its order (the topics' and stores' names
    # are what a Java twin of the application would use)
    registration_topic = named("-subscription-registration", "KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-")
    send = named("-subscription-registration-processor", "KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-")
    left_serdes = (left.key_serde, left.value_serde)
    topology.add_processor(
        send, lambda: SubscriptionSendProcessor(extractor, left_join, left_serdes, send), left.node
    )
    registration = builder.add_internal_topic_hop(
        send,
        f"{registration_topic}-topic",
        named("-subscription-registration-sink", "KTABLE-SINK-"),
        named("-subscription-registration-source", "KTABLE-SOURCE-"),
        right.key_serde,
        Bytes(),
    )
    store_name = named("-subscription-store", "KTABLE-FK-JOIN-SUBSCRIPTION-STATE-STORE-")
    serdes = (right.key_serde, right.value_serde, left.key_serde)
    receive = named("-subscription-receive", "KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-")
    topology.add_processor(
        receive, lambda: SubscriptionReceiveProcessor(store_name, None, serdes), registration
    )
    topology.add_state_store(
        Stores.key_value_store_builder(Stores.persistent_key_value_store(store_name), Bytes(), Bytes()),
        receive,
    )
    right_getter = right.value_getter_supplier
    join_foreign = named("-subscription-join-foreign", "KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-")
    topology.add_processor(
        join_foreign, lambda: SubscriptionJoinProcessor(None, right_getter, serdes), receive
    )
    topology.connect_processor_and_state_stores(join_foreign, *right_getter.store_names)
    right.enable_send_old_values()
    on_right = named("-foreign-join-subscription", "KTABLE-FK-JOIN-SUBSCRIPTION-PROCESSOR-")
    topology.add_processor(
        on_right, lambda: ForeignTableChangeProcessor(store_name, None, serdes, on_right), right.node
    )
    topology.connect_processor_and_state_stores(on_right, store_name)
    response_topic = named("-subscription-response", "KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-")
    response = builder.add_internal_topic_hop(
        (join_foreign, on_right),
        f"{response_topic}-topic",
        named("-subscription-response-sink", "KTABLE-SINK-"),
        named("-subscription-response-source", "KTABLE-SOURCE-"),
        left.key_serde,
        Bytes(),
    )
    topology.add_copartition_group(source_topics(builder, registration) | source_topics(builder, right.node))
    topology.add_copartition_group(source_topics(builder, response) | source_topics(builder, left.node))
    resolver = named(
        "-subscription-response-resolver", "KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-RESOLVER-PROCESSOR-"
    )
    left_getter = left.value_getter_supplier
    value_serdes = (left.value_serde, right.value_serde)
    topology.add_processor(
        resolver,
        lambda: ResponseResolverProcessor(left_getter, adapted, left_join, value_serdes, resolver),
        response,
    )
    topology.connect_processor_and_state_stores(resolver, *left_getter.store_names)
    output = named("-result", "KTABLE-FK-JOIN-OUTPUT-")
    return _output_table(builder, left, resolver, output, materialized)


def _output_table(
    builder: InternalBuilder,
    left: Table,
    parent: str,
    output: str,
    materialized: Materialized | str | None,
) -> Table:
    """The join's result table: with a store only when materialized, or when something asks for its
    value getter (then the store is added, named like Java's `KTABLE-FK-JOIN-OUTPUT-STATE-STORE-`)."""
    topology = builder.topology
    mat = Materialized.of(materialized)
    store: list[str] = []  # the output store's name, once the result is materialized
    # Java names the store (using up a number) whether or not it is ever built
    name = mat.name or builder.new_name("KTABLE-FK-JOIN-OUTPUT-STATE-STORE-")

    def materialize() -> None:
        store.append(name)
        topology.add_state_store(
            builder.kv_store_builder(mat, name, mat.key_serde or left.key_serde, mat.value_serde), output
        )

    def bind(context: ProcessorContext) -> ValueGetter:
        return context.get_state_store(store[0]).get  # type: ignore[no-any-return]

    topology.add_processor(
        output,
        lambda: KTableKTableMergeProcessor(
            store[0] if store else None, table.send_old_values_enabled, output
        ),
        parent,
    )
    if materialized is not None:
        materialize()
    else:  # Java checks the name it generated for KIP-1111 even if the store is never built
        topology.unbuilt_store_names.append(name)
    getter = ValueGetterSupplier(store, bind, None if store else materialize)
    table = left._derive_table(
        output, left.key_serde, mat.value_serde, store[0] if store else None, getter=getter
    )
    return table
