"""State stores: protocols, memory and RocksDB backends, and the caching/logging/metered layers."""

from kappaflow.state.builders import KeyValueStoreBuilder, ReadOnlyKeyValueView, StoreBuilder, Stores
from kappaflow.state.kv_layers import MeteredKeyValueStore
from kappaflow.state.timestamped import ValueAndTimestamp

KeyValueStore = MeteredKeyValueStore
TimestampedKeyValueStore = MeteredKeyValueStore

__all__ = [
    "KeyValueStore",
    "KeyValueStoreBuilder",
    "MeteredKeyValueStore",
    "ReadOnlyKeyValueView",
    "StoreBuilder",
    "Stores",
    "TimestampedKeyValueStore",
    "ValueAndTimestamp",
]
