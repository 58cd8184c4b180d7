"""Versioned key queries (KIP-960, KIP-968): a key's value as of a time, and its history over a time range,
read from a versioned store (`Stores.persistent_versioned_key_value_store`).

Kafka Streams offers these only through IQv2 (`streams.query(StateQueryRequest.inStore(name)
.withQuery(VersionedKeyQuery.withKey(k).asOf(t)))`). kappaflow's interactive queries are store views
(`KafkaStreams.store(name, type)`), so the same query objects run against the view
`QueryableStoreTypes.versioned_key_value()` gives: `view.query(VersionedKeyQuery.with_key(k).as_of(t))`.
A view reads the one local partition that holds the key (in the worker process that holds it, with
`num.stream.threads` > 1); the HTTP API routes the request to the owning instance first, as any key
lookup (query/server.py).

The query objects are immutable values (each builder method returns a new one), so one can be built once
and reused, and crosses a process boundary as it is. Times are epoch milliseconds or aware datetimes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Generic, TypeVar, overload

from kappaflow.api.errors import InvalidStateStoreError
from kappaflow.query import render
from kappaflow.runner.local_stores import LocalStoreProvider
from kappaflow.state.versioned import VersionedKeyValueStore, VersionedKeyValueStoreBuilder, VersionedRecord

K = TypeVar("K")
V = TypeVar("V")


def epoch_ms(time: int | datetime) -> int:
    """A query time as epoch milliseconds (Java takes an `Instant`)."""
    if isinstance(time, datetime):
        if time.tzinfo is None:
            raise ValueError("a query time must be an aware datetime (or epoch milliseconds)")
        return int(time.timestamp() * 1000)
    return int(time)


class ResultOrder(enum.Enum):
    """The order of a history query's versions. `ANY` is what Java's default gives: newest first."""

    ANY = "any"
    ASCENDING = "ascending"
    DESCENDING = "descending"


@dataclass(frozen=True)
class VersionedKeyQuery(Generic[K, V]):
    """The version of a key valid at a time (`as_of`), or its latest version: Java's VersionedKeyQuery."""

    key: K
    as_of_timestamp: int | None = None

    @staticmethod
    def with_key(key: K) -> VersionedKeyQuery[K, Any]:
        """The latest version of `key` (narrow it with `as_of`); a ValueError for a None key."""
        if key is None:
            raise ValueError("a versioned key query needs a key (got None)")
        return VersionedKeyQuery(key)

    def as_of(self, time: int | datetime) -> VersionedKeyQuery[K, V]:
        """The version valid at `time` rather than the latest one."""
        return replace(self, as_of_timestamp=epoch_ms(time))


@dataclass(frozen=True)
class MultiVersionedKeyQuery(Generic[K, V]):
    """Every version of a key valid at some time in `[from_time, to_time]` (each end optional):
    Java's MultiVersionedKeyQuery. Tombstones are not versions: a deleted interval is simply absent."""

    key: K
    from_timestamp: int | None = None
    to_timestamp: int | None = None
    result_order: ResultOrder = ResultOrder.ANY

    @staticmethod
    def with_key(key: K) -> MultiVersionedKeyQuery[K, Any]:
        """Every version of `key` the store still holds, newest first (narrow it with the methods
        below); a ValueError for a None key."""
        if key is None:
            raise ValueError("a multi-versioned key query needs a key (got None)")
        return MultiVersionedKeyQuery(key)

    def from_time(self, time: int | datetime) -> MultiVersionedKeyQuery[K, V]:
        """Only versions still valid at or after `time` (epoch ms or a datetime)."""
        return replace(self, from_timestamp=epoch_ms(time))

    def to_time(self, time: int | datetime) -> MultiVersionedKeyQuery[K, V]:
        """Only versions that became valid at or before `time` (epoch ms or a datetime)."""
        return replace(self, to_timestamp=epoch_ms(time))

    def with_ascending_timestamps(self) -> MultiVersionedKeyQuery[K, V]:
        """Oldest version first."""
        return replace(self, result_order=ResultOrder.ASCENDING)

    def with_descending_timestamps(self) -> MultiVersionedKeyQuery[K, V]:
        """Newest version first (the default)."""
        return replace(self, result_order=ResultOrder.DESCENDING)

    def validate(self) -> None:
        """Java refuses a range that ends before it starts; so does kappaflow, before reading a store."""
        low, high = self.from_timestamp, self.to_timestamp
        if low is not None and high is not None and low > high:
            raise ValueError(f"the from time ({low}) must not be after the to time ({high})")


def run_versioned(store: Any, query: VersionedKeyQuery[Any, Any]) -> VersionedRecord[Any] | None:
    """`query` on one versioned store (a task's local copy)."""
    return _versioned(store).get(query.key, query.as_of_timestamp)


def run_multi_versioned(store: Any, query: MultiVersionedKeyQuery[Any, Any]) -> list[VersionedRecord[Any]]:
    """`query` on one versioned store: its versions in the order asked."""
    query.validate()
    ascending = query.result_order is ResultOrder.ASCENDING
    return _versioned(store).get_versions(query.key, query.from_timestamp, query.to_timestamp, ascending)


def _versioned(store: Any) -> VersionedKeyValueStore:
    if not isinstance(store, VersionedKeyValueStore):
        raise InvalidStateStoreError(f"store '{store.name}' is not a versioned store")
    return store


def is_versioned(provider: LocalStoreProvider) -> bool:
    """Whether the store a provider reads is versioned (its builder says so, before any task opens it)."""
    return isinstance(provider.streams.topology.stores.get(provider.name), VersionedKeyValueStoreBuilder)


def not_versioned_error(name: str, kind: str) -> InvalidStateStoreError:
    """The refusal of a versioned query on any other store, saying what the store is and what to use."""
    return InvalidStateStoreError(
        f"store '{name}' is a {kind.replace('_', '-')} store, not a versioned one: versioned key queries "
        "need a store from Stores.persistent_versioned_key_value_store / in_memory_versioned_key_value_store"
    )


class ReadOnlyVersionedKeyValueStore:
    """Versioned reads of one store across this instance's partitions (each key read in its partition)."""

    def __init__(self, provider: LocalStoreProvider) -> None:
        self._provider = provider
        self.name = provider.name

    def get(self, key: Any, as_of_timestamp: int | None = None) -> VersionedRecord[Any] | None:
        """The latest version of `key`, or the one valid at `as_of_timestamp`; None when there is none."""
        query: VersionedKeyQuery[Any, Any] = VersionedKeyQuery.with_key(key)
        if as_of_timestamp is not None:
            query = query.as_of(as_of_timestamp)
        return self._provider.read_key(key, lambda s: run_versioned(s, query))

    def get_versions(
        self, key: Any, from_time: int | None = None, to_time: int | None = None, ascending: bool = False
    ) -> list[VersionedRecord[Any]]:
        """The versions of `key` valid within `[from_time, to_time]`, newest first unless `ascending`."""
        order = ResultOrder.ASCENDING if ascending else ResultOrder.DESCENDING
        query: MultiVersionedKeyQuery[Any, Any] = MultiVersionedKeyQuery(key, from_time, to_time, order)
        query.validate()
        return self._provider.read_key(key, lambda s: run_multi_versioned(s, query))

    @overload
    def query(self, query: VersionedKeyQuery[Any, V]) -> VersionedRecord[V] | None: ...

    @overload
    def query(self, query: MultiVersionedKeyQuery[Any, V]) -> list[VersionedRecord[V]]: ...

    def query(self, query: VersionedKeyQuery[Any, Any] | MultiVersionedKeyQuery[Any, Any]) -> Any:
        """Run a `VersionedKeyQuery` (one version or None) or a `MultiVersionedKeyQuery` (a list)."""
        if isinstance(query, VersionedKeyQuery):
            return self.get(query.key, query.as_of_timestamp)
        ascending = query.result_order is ResultOrder.ASCENDING
        return self.get_versions(query.key, query.from_timestamp, query.to_timestamp, ascending)


# ----------------------------------------------------------------- the HTTP API's part (query/server.py)
HTTP_ACTIONS = ("version", "versions")  # /v1/stores/{store}/keys/{key}/version | /versions
_ORDERS = {"asc": ResultOrder.ASCENDING, "desc": ResultOrder.DESCENDING}


def _param_ms(params: dict[str, str], name: str) -> int | None:
    text = params.get(name)
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"'{name}' must be an integer (epoch milliseconds), got {text!r}") from None


def query_from_params(
    action: str, key: Any, params: dict[str, str]
) -> VersionedKeyQuery[Any, Any] | MultiVersionedKeyQuery[Any, Any]:
    """The query a request asks for: `version?as_of=` (omitted: the latest), or `versions?from=&to=
    &order=asc|desc` (each omitted: unbounded, newest first). A bad parameter raises ValueError (400)."""
    if action == "version":
        single: VersionedKeyQuery[Any, Any] = VersionedKeyQuery.with_key(key)
        as_of = _param_ms(params, "as_of")
        return single if as_of is None else single.as_of(as_of)
    order = params.get("order", "desc")
    if order not in _ORDERS:
        raise ValueError(f"'order' must be 'asc' or 'desc', got {order!r}")
    many: MultiVersionedKeyQuery[Any, Any] = MultiVersionedKeyQuery(
        key, _param_ms(params, "from"), _param_ms(params, "to"), _ORDERS[order]
    )
    many.validate()
    return many


def version_json(record: VersionedRecord[Any]) -> dict[str, Any]:
    """One version as JSON: its value (as the store's serde produced it), valid from `timestamp` until
    `valid_to` (exclusive; null for the latest version, valid until a newer one arrives)."""
    return {"value": render.to_json(record.value), "timestamp": record.timestamp, "valid_to": record.valid_to}


def read_for_http(
    provider: LocalStoreProvider, key: Any, action: str, params: dict[str, str]
) -> dict[str, Any]:
    """This instance's answer to a versioned request for `key` (already routed here): the fields of the
    JSON body; LookupError when no version matches a `version` request (404)."""
    query = query_from_params(action, key, params)
    if isinstance(query, VersionedKeyQuery):
        record = provider.read_key(key, lambda s: run_versioned(s, query))
        if record is None:
            where = "latest" if query.as_of_timestamp is None else f"as of {query.as_of_timestamp}"
            raise LookupError(f"no version of the key ({where})")
        return {"as_of": query.as_of_timestamp, **version_json(record)}
    records = provider.read_key(key, lambda s: run_multi_versioned(s, query))
    return {
        "from": query.from_timestamp,
        "to": query.to_timestamp,
        "order": "asc" if query.result_order is ResultOrder.ASCENDING else "desc",
        "versions": [version_json(record) for record in records],
    }
