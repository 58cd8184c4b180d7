"""Serializers and deserializers, byte-compatible with Kafka's Java serdes.

`Long` and `Integer` write Java's big-endian two's complement, `Double` IEEE-754 big-endian and `String`
UTF-8, so a Python and a Java application can share topics. `None` is always the tombstone: every serde
maps `None` to `None` in both directions, as Kafka's do.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from kappaflow.api.errors import ConfigError, SerializationError
from kappaflow.api.imports import import_object

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

_LONG = struct.Struct(">q")
_INT = struct.Struct(">i")
_DOUBLE = struct.Struct(">d")
_FLOAT = struct.Struct(">f")


class Serde(Generic[T]):
    """Turns values of one type into bytes and back. Subclasses override `to_bytes` and `from_bytes`."""

    name = "Serde"

    def serialize(self, topic: str, data: T | None) -> bytes | None:
        if data is None:
            return None
        try:
            return self.to_bytes(data)
        except SerializationError:
            raise
        except Exception as exc:
            raise SerializationError(
                f"{self.name} serde cannot serialize {type(data).__name__} {data!r:.80} for topic "
                f"'{topic}': {exc}"
            ) from exc

    def deserialize(self, topic: str, data: bytes | None) -> T | None:
        if data is None:
            return None
        return self.from_bytes(data)

    def decodes_to_itself(self, data: Any) -> bool:
        """True when `deserialize(serialize(data))` is an equal immutable object, so a cache may hand
        `data` itself back instead of decoding bytes again. False unless a serde knows better."""
        return False

    def with_default(self, default: Serde[Any] | None) -> Serde[T]:
        """Wrapping serdes (changes, windowed keys) built without an inner serde take the configured
        default here, when the task resolves serdes; plain serdes return themselves."""
        return self

    def to_bytes(self, data: T) -> bytes:
        raise NotImplementedError

    def from_bytes(self, data: bytes) -> T:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{self.name}()"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash(type(self))


class String(Serde[str]):
    name = "String"

    def decodes_to_itself(self, data: Any) -> bool:
        return type(data) is str

    # the hot path: one call per key or value instead of serialize -> to_bytes
    def serialize(self, topic: str, data: str | None) -> bytes | None:
        if type(data) is str:
            return data.encode("utf-8")
        return super().serialize(topic, data)

    def deserialize(self, topic: str, data: bytes | None) -> str | None:
        return None if data is None else data.decode("utf-8")

    def to_bytes(self, data: str) -> bytes:
        if not isinstance(data, str):
            raise SerializationError(f"String serde expects str, got {type(data).__name__}: {data!r:.80}")
        return data.encode("utf-8")

    def from_bytes(self, data: bytes) -> str:
        return data.decode("utf-8")


def is_utf8(serde: Serde[Any] | None) -> bool:
    """True for the plain String serde, whose bytes are exactly the text's UTF-8: the per-record loops
    then encode and decode inline (`str.encode`, `bytes.decode`) instead of calling the serde."""
    return type(serde) is String


class Long(Serde[int]):
    name = "Long"

    def decodes_to_itself(self, data: Any) -> bool:
        return type(data) is int

    def serialize(self, topic: str, data: int | None) -> bytes | None:
        if type(data) is int:
            try:
                return _LONG.pack(data)
            except struct.error:
                pass
        return super().serialize(topic, data)

    def deserialize(self, topic: str, data: bytes | None) -> int | None:
        if data is not None and len(data) == 8:
            return int(_LONG.unpack(data)[0])
        return None if data is None else self.from_bytes(data)

    def to_bytes(self, data: int) -> bytes:
        if not isinstance(data, int) or isinstance(data, bool):
            raise SerializationError(f"Long serde expects int, got {type(data).__name__}: {data!r:.80}")
        try:
            return _LONG.pack(data)
        except struct.error as exc:
            raise SerializationError(f"Long serde: {data} does not fit in 64 bits") from exc

    def from_bytes(self, data: bytes) -> int:
        if len(data) != 8:
            raise SerializationError(f"Long serde expects 8 bytes, got {len(data)}")
        return int(_LONG.unpack(data)[0])


class Integer(Serde[int]):
    name = "Integer"

    def decodes_to_itself(self, data: Any) -> bool:
        return type(data) is int

    def to_bytes(self, data: int) -> bytes:
        if not isinstance(data, int) or isinstance(data, bool):
            raise SerializationError(f"Integer serde expects int, got {type(data).__name__}: {data!r:.80}")
        return _INT.pack(data)

    def from_bytes(self, data: bytes) -> int:
        if len(data) != 4:
            raise SerializationError(f"Integer serde expects 4 bytes, got {len(data)}")
        return int(_INT.unpack(data)[0])


class Double(Serde[float]):
    name = "Double"

    def decodes_to_itself(self, data: Any) -> bool:
        return type(data) is float

    def to_bytes(self, data: float) -> bytes:
        return _DOUBLE.pack(float(data))

    def from_bytes(self, data: bytes) -> float:
        if len(data) != 8:
            raise SerializationError(f"Double serde expects 8 bytes, got {len(data)}")
        return float(_DOUBLE.unpack(data)[0])


class Float(Serde[float]):
    name = "Float"

    def to_bytes(self, data: float) -> bytes:
        return _FLOAT.pack(float(data))

    def from_bytes(self, data: bytes) -> float:
        if len(data) != 4:
            raise SerializationError(f"Float serde expects 4 bytes, got {len(data)}")
        return float(_FLOAT.unpack(data)[0])


class Bytes(Serde[bytes]):
    name = "Bytes"

    def decodes_to_itself(self, data: Any) -> bool:
        return type(data) is bytes

    def to_bytes(self, data: bytes) -> bytes:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise SerializationError(f"Bytes serde expects bytes, got {type(data).__name__}")
        return bytes(data)

    def from_bytes(self, data: bytes) -> bytes:
        return bytes(data)


class Json(Serde[Any]):
    """Compact UTF-8 JSON. Tuples come back as lists, as JSON has no tuple."""

    name = "Json"

    def to_bytes(self, data: Any) -> bytes:
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def from_bytes(self, data: bytes) -> Any:
        return json.loads(data)


class Pydantic(Serde[M]):
    """JSON through a pydantic model: validation on read means a malformed record fails to deserialize."""

    name = "Pydantic"

    def __init__(self, model: type[M]) -> None:
        self.model = model

    def to_bytes(self, data: M) -> bytes:
        if not isinstance(data, self.model):
            raise SerializationError(f"Pydantic({self.model.__name__}) serde got {type(data).__name__}")
        return data.model_dump_json().encode("utf-8")

    def from_bytes(self, data: bytes) -> M:
        return self.model.model_validate_json(data)

    def __repr__(self) -> str:
        return f"Pydantic({self.model.__name__})"

    def __hash__(self) -> int:
        return hash((Pydantic, self.model))


_BUILTIN: dict[str, type[Serde[Any]]] = {
    "String": String,
    "Long": Long,
    "Integer": Integer,
    "Double": Double,
    "Float": Float,
    "Bytes": Bytes,
    "Json": Json,
}


def serde_from_config(value: object, key: str) -> Serde[Any] | None:
    """Resolve a serde configured as an instance, a class, a builtin name or a `module:attr` path."""
    if value is None or value == "":
        return None
    if isinstance(value, Serde):
        return value
    if isinstance(value, type) and issubclass(value, Serde):
        return value()
    if isinstance(value, str):
        short = value.rsplit(".", 1)[-1].rsplit(":", 1)[-1]
        if short in _BUILTIN and (value == short or value.startswith("kappaflow")):
            return _BUILTIN[short]()
        if value == short:  # neither a builtin nor a path: "string" for "String", say
            raise ConfigError(
                f"config '{key}': unknown serde '{value}': a builtin name ({', '.join(_BUILTIN)}) "
                "or a 'module:attribute' path"
            )
        return serde_from_config(import_object(value, key, "serde"), key)
    raise ConfigError(f"config '{key}': {value!r} is not a serde")
