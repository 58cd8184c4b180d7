"""What every typed store facade shares: key-value, window and session stores alike.

Each typed store wraps a bytes store, resolves its serdes (its own, else the configured defaults) when a
task initializes it, serializes at the boundary with the store's changelog topic as the serde topic, and
delegates lifecycle to the layers inside.
"""

from __future__ import annotations

from typing import Any

from kappaflow.api.errors import InvalidStateStoreError
from kappaflow.api.serdes import Serde, is_utf8
from kappaflow.state.api import KeyValueBytesStore, StoreContext

IMMUTABLE_KEY_TYPES = frozenset({str, int, bytes, float})
"""Key types whose serialized bytes can be remembered by identity: an aggregation's get-then-put of one
key serializes it once."""
_NO_KEY: Any = object()


class MeteredStoreBase:
    """The typed facade shared by every store kind (see the module docstring). Slotted, with its
    key-value subclass: the native aggregation counts `gets` and `puts` through member descriptors."""

    __slots__ = ("_topic", "_utf8_keys", "inner", "key_serde", "last_key", "last_raw_key", "value_serde")
    kind = "store"  # how errors name the store: "store", "window store", "session store"

    def __init__(
        self, inner: KeyValueBytesStore, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None
    ) -> None:
        self.inner = inner
        self.key_serde = key_serde
        self.value_serde = value_serde
        self._topic = inner.name
        self.last_key: Any = _NO_KEY  # the last immutable key serialized, and its bytes
        self.last_raw_key = b""
        self._utf8_keys = is_utf8(key_serde)  # String keys: str.encode inline

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def persistent(self) -> bool:
        return self.inner.persistent

    def resolve_serdes(self, context: StoreContext) -> tuple[Serde[Any], Serde[Any]]:
        """The store's serdes, falling back to `default.key.serde` / `default.value.serde`."""
        key_serde = self.key_serde or context.app_config.serde("default.key.serde")
        value_serde = self.value_serde or context.app_config.serde("default.value.serde")
        self.last_key = _NO_KEY  # serdes (and the serde topic) are settled here: forget old bytes
        self._utf8_keys = is_utf8(key_serde)
        if key_serde is None or value_serde is None:
            which = "key" if key_serde is None else "value"
            raise InvalidStateStoreError(
                f"{self.kind} '{self.name}' has no {which} serde: pass one in Materialized or set "
                f"default.{which}.serde"
            )
        return key_serde, value_serde

    def flush(self) -> None:
        self.inner.flush()

    def close(self) -> None:
        self.inner.close()

    def is_open(self) -> bool:
        return self.inner.is_open()

    def _k(self, key: Any) -> bytes:
        if key is self.last_key:
            return self.last_raw_key
        if key is None:
            raise InvalidStateStoreError(f"{self.kind} '{self.name}': keys must not be None")
        raw: bytes | None
        if self._utf8_keys and type(key) is str:
            raw = key.encode()
        else:
            raw = self.key_serde.serialize(self._topic, key)  # type: ignore[union-attr]
            assert raw is not None
        if type(key) in IMMUTABLE_KEY_TYPES:
            self.last_key, self.last_raw_key = key, raw
        return raw

    def _dk(self, raw: bytes) -> Any:
        return self.key_serde.deserialize(self._topic, raw)  # type: ignore[union-attr]
