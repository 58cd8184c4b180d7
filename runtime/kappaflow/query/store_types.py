"""`QueryableStoreTypes` and the read-only views `KafkaStreams.store(...)` hands out.

Each view spans every local copy of one store (Java's composite read-only stores): a key lookup goes to
the one local partition that can hold the key, a range or scan visits all of them. Values come back
plain (timestamps unwrapped), as in Java's `keyValueStore()` type; `timestamped_key_value()` keeps the
ValueAndTimestamp. Results are lists, read under the stream thread's state lock (runner/local_stores).
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from kappaflow.api.errors import InvalidStateStoreError
from kappaflow.api.serdes import Serde
from kappaflow.api.windows import Windowed
from kappaflow.query.versioned import ReadOnlyVersionedKeyValueStore, is_versioned, not_versioned_error
from kappaflow.runner.local_stores import LocalStoreProvider
from kappaflow.state.builders import ReadOnlyKeyValueView
from kappaflow.state.session_store import ReadOnlySessionView
from kappaflow.state.window_store import ReadOnlyWindowView

V = TypeVar("V")


class QueryableStoreType(Generic[V]):
    """Which kind of store a query expects, and how to build its view over the local copies."""

    kinds: tuple[str, ...] = ()
    label = ""

    def create(self, provider: LocalStoreProvider) -> V:
        if provider.kind not in self.kinds:
            kind = provider.kind.replace("_", "-")
            raise InvalidStateStoreError(
                f"store '{provider.name}' is a {kind} store, not a {self.label} store"
            )
        return self._view(provider)

    def _view(self, provider: LocalStoreProvider) -> V:
        raise NotImplementedError


class ReadOnlyKeyValueStore:
    """Reads of a key-value store across this instance's partitions."""

    def __init__(self, provider: LocalStoreProvider, timestamped: bool = False) -> None:
        self._provider = provider
        self._timestamped = timestamped
        self.name = provider.name

    def _wrap(self, store: Any) -> Any:
        return store if self._timestamped else ReadOnlyKeyValueView(store)

    def get(self, key: Any) -> Any:
        return self._provider.read_key(key, lambda s: self._wrap(s).get(key))

    def range(self, from_key: Any, to_key: Any) -> list[tuple[Any, Any]]:
        return self._provider.read_all(lambda s: list(self._wrap(s).range(from_key, to_key)))

    def reverse_range(self, from_key: Any, to_key: Any) -> list[tuple[Any, Any]]:
        return self._provider.read_all(lambda s: list(self._wrap(s).reverse_range(from_key, to_key)))

    def all(self) -> list[tuple[Any, Any]]:
        return self._provider.read_all(lambda s: list(self._wrap(s).all()))

    def reverse_all(self) -> list[tuple[Any, Any]]:
        return self._provider.read_all(lambda s: list(self._wrap(s).reverse_all()))

    def prefix_scan(self, prefix: Any, prefix_key_serde: Serde[Any]) -> list[tuple[Any, Any]]:
        return self._provider.read_all(lambda s: list(self._wrap(s).prefix_scan(prefix, prefix_key_serde)))

    def approximate_num_entries(self) -> int:
        return sum(self._provider.read_all(lambda s: [int(s.approximate_num_entries())]))


class ReadOnlyWindowStore:
    """Reads of a window store: `fetch(key, from, to)` -> [(window start, value)], scans -> Windowed."""

    def __init__(self, provider: LocalStoreProvider) -> None:
        self._provider = provider
        self.name = provider.name

    def fetch(self, key: Any, time_from: int, time_to: int | None = None) -> Any:
        return self._provider.read_key(key, lambda s: ReadOnlyWindowView(s).fetch(key, time_from, time_to))

    def backward_fetch(self, key: Any, time_from: int, time_to: int) -> list[tuple[int, Any]]:
        return self._provider.read_key(
            key, lambda s: ReadOnlyWindowView(s).backward_fetch(key, time_from, time_to)
        )

    def fetch_range(
        self, key_from: Any, key_to: Any, time_from: int, time_to: int
    ) -> list[tuple[Windowed[Any], Any]]:
        return self._provider.read_all(
            lambda s: ReadOnlyWindowView(s).fetch_range(key_from, key_to, time_from, time_to)
        )

    def fetch_all(self, time_from: int, time_to: int) -> list[tuple[Windowed[Any], Any]]:
        return self._provider.read_all(lambda s: ReadOnlyWindowView(s).fetch_all(time_from, time_to))

    def all(self) -> list[tuple[Windowed[Any], Any]]:
        return self._provider.read_all(lambda s: ReadOnlyWindowView(s).all())


class ReadOnlySessionStore:
    """Reads of a session store: sessions of a key, as (Windowed(key, Window(start, end)), value)."""

    def __init__(self, provider: LocalStoreProvider) -> None:
        self._provider = provider
        self.name = provider.name

    def fetch(self, key: Any) -> list[tuple[Windowed[Any], Any]]:
        return self._provider.read_key(key, lambda s: ReadOnlySessionView(s).fetch(key))

    def backward_fetch(self, key: Any) -> list[tuple[Windowed[Any], Any]]:
        return self._provider.read_key(key, lambda s: ReadOnlySessionView(s).backward_fetch(key))

    def find_sessions(
        self, key: Any, earliest_end: int, latest_start: int
    ) -> list[tuple[Windowed[Any], Any]]:
        return self._provider.read_key(
            key, lambda s: ReadOnlySessionView(s).find_sessions(key, earliest_end, latest_start)
        )

    def fetch_session(self, key: Any, start: int, end: int) -> Any:
        return self._provider.read_key(key, lambda s: ReadOnlySessionView(s).fetch_session(key, start, end))

    def all(self) -> list[tuple[Windowed[Any], Any]]:
        return self._provider.read_all(lambda s: ReadOnlySessionView(s).all())


class _KeyValueType(QueryableStoreType[ReadOnlyKeyValueStore]):
    kinds = ("key_value",)
    label = "key-value"

    def __init__(self, timestamped: bool = False) -> None:
        self.timestamped = timestamped

    def _view(self, provider: LocalStoreProvider) -> ReadOnlyKeyValueStore:
        return ReadOnlyKeyValueStore(provider, self.timestamped)


class _WindowType(QueryableStoreType[ReadOnlyWindowStore]):
    kinds = ("window",)
    label = "window"

    def _view(self, provider: LocalStoreProvider) -> ReadOnlyWindowStore:
        return ReadOnlyWindowStore(provider)


class _SessionType(QueryableStoreType[ReadOnlySessionStore]):
    kinds = ("session",)
    label = "session"

    def _view(self, provider: LocalStoreProvider) -> ReadOnlySessionStore:
        return ReadOnlySessionStore(provider)


class _VersionedType(QueryableStoreType[ReadOnlyVersionedKeyValueStore]):
    kinds = ("key_value",)
    label = "versioned key-value"

    def _view(self, provider: LocalStoreProvider) -> ReadOnlyVersionedKeyValueStore:
        if not is_versioned(provider):
            raise not_versioned_error(provider.name, provider.kind)
        return ReadOnlyVersionedKeyValueStore(provider)


class QueryableStoreTypes:
    """Java's QueryableStoreTypes, in snake_case: `key_value()`, `window_store()`, `session_store()`; and
    `versioned_key_value()`, for the versioned queries Java runs through IQv2 only."""

    @staticmethod
    def key_value() -> QueryableStoreType[ReadOnlyKeyValueStore]:
        """A key-value store, read as plain values (Java's `QueryableStoreTypes.keyValueStore()`)."""
        return _KeyValueType()

    key_value_store = key_value

    @staticmethod
    def timestamped_key_value() -> QueryableStoreType[ReadOnlyKeyValueStore]:
        """A key-value store, read as `ValueAndTimestamp`s (Java's `timestampedKeyValueStore()`)."""
        return _KeyValueType(timestamped=True)

    timestamped_key_value_store = timestamped_key_value

    @staticmethod
    def versioned_key_value() -> QueryableStoreType[ReadOnlyVersionedKeyValueStore]:
        """A versioned store (KIP-889), read with `VersionedKeyQuery` / `MultiVersionedKeyQuery` (KIP-960,
        KIP-968) through the view's `query`, or its `get(key, as_of)` and `get_versions(...)`."""
        return _VersionedType()

    @staticmethod
    def window_store() -> QueryableStoreType[ReadOnlyWindowStore]:
        """A window store: `fetch(key, from, to)` and ranges (Java's `windowStore()`)."""
        return _WindowType()

    @staticmethod
    def session_store() -> QueryableStoreType[ReadOnlySessionStore]:
        """A session store: a key's sessions (Java's `sessionStore()`)."""
        return _SessionType()
