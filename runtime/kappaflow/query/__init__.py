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
from kappaflow.runner.metadata import NOT_AVAILABLE, HostInfo, KeyQueryMetadata, LagInfo, StreamsMetadata

__all__ = [
    "NOT_AVAILABLE",
    "HostInfo",
    "KeyQueryMetadata",
    "LagInfo",
    "QueryServer",
    "QueryService",
    "QueryableStoreType",
    "QueryableStoreTypes",
    "ReadOnlyKeyValueStore",
    "ReadOnlySessionStore",
    "ReadOnlyWindowStore",
    "StreamsMetadata",
]
