"""Interactive queries: read-only views of a running application's stores, key -> instance metadata, and
an HTTP server that answers for any key from any instance (forwarding to the owner)."""

from kappaflow.query.server import QueryServer, QueryService
from kappaflow.query.store_types import (
    QueryableStoreType,
    QueryableStoreTypes,
    ReadOnlyKeyValueStore,
    ReadOnlySessionStore,
    ReadOnlyWindowStore,
)
from kappaflow.query.versioned import (
    MultiVersionedKeyQuery,
    ReadOnlyVersionedKeyValueStore,
    ResultOrder,
    VersionedKeyQuery,
)
from kappaflow.runner.metadata import NOT_AVAILABLE, HostInfo, KeyQueryMetadata, LagInfo, StreamsMetadata
from kappaflow.state.versioned import VersionedRecord

__all__ = [
    "NOT_AVAILABLE",
    "HostInfo",
    "KeyQueryMetadata",
    "LagInfo",
    "MultiVersionedKeyQuery",
    "QueryServer",
    "QueryService",
    "QueryableStoreType",
    "QueryableStoreTypes",
    "ReadOnlyKeyValueStore",
    "ReadOnlySessionStore",
    "ReadOnlyVersionedKeyValueStore",
    "ReadOnlyWindowStore",
    "ResultOrder",
    "StreamsMetadata",
    "VersionedKeyQuery",
    "VersionedRecord",
]
