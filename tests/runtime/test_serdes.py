"""Serdes produce Java's bytes, round-trip, map None to None and fail with clear messages."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from kappaflow import serdes
from kappaflow.api.errors import ConfigError, SerializationError
from kappaflow.api.serdes import serde_from_config


@pytest.mark.parametrize(
    ("serde", "value", "raw"),
    [
        (serdes.Long(), 1, b"\x00\x00\x00\x00\x00\x00\x00\x01"),
        (serdes.Long(), -2, b"\xff\xff\xff\xff\xff\xff\xff\xfe"),
        (serdes.Long(), 2**63 - 1, b"\x7f\xff\xff\xff\xff\xff\xff\xff"),
        (serdes.Integer(), 256, b"\x00\x00\x01\x00"),
        (serdes.Integer(), -1, b"\xff\xff\xff\xff"),
        (serdes.Double(), 1.5, b"\x3f\xf8\x00\x00\x00\x00\x00\x00"),
        (serdes.Float(), 1.5, b"\x3f\xc0\x00\x00"),
        (serdes.String(), "héllo", "héllo".encode()),
        (serdes.Bytes(), b"\x00\x01", b"\x00\x01"),
        (serdes.Json(), {"a": [1, 2]}, b'{"a":[1,2]}'),
    ],
)
def test_java_compatible_bytes_and_round_trip(serde: serdes.Serde[object], value: object, raw: bytes) -> None:
    assert serde.serialize("t", value) == raw
    assert serde.deserialize("t", raw) == value


@pytest.mark.parametrize("serde", [serdes.Long(), serdes.String(), serdes.Json(), serdes.Bytes()])
def test_none_is_the_tombstone(serde: serdes.Serde[object]) -> None:
    assert serde.serialize("t", None) is None
    assert serde.deserialize("t", None) is None


class Order(BaseModel):
    id: int
    item: str


def test_pydantic_validates_on_read() -> None:
    serde = serdes.Pydantic(Order)
    raw = serde.serialize("orders", Order(id=1, item="book"))
    assert serde.deserialize("orders", raw) == Order(id=1, item="book")
    with pytest.raises(ValueError, match="item"):
        serde.deserialize("orders", b'{"id": 2}')


def test_wrong_type_names_serde_and_topic() -> None:
    with pytest.raises(SerializationError, match="Long serde expects int, got str"):
        serdes.Long().serialize("counts", "seven")  # type: ignore[arg-type]
    with pytest.raises(SerializationError, match="Long serde expects 8 bytes"):
        serdes.Long().deserialize("counts", b"\x01")


def test_serdes_from_config_strings() -> None:
    assert serde_from_config("String", "default.key.serde") == serdes.String()
    assert serde_from_config("kappaflow.serdes.Long", "default.value.serde") == serdes.Long()
    assert serde_from_config("kappaflow.serdes:Json", "k") == serdes.Json()
    with pytest.raises(ConfigError, match="default.value.serde"):
        serde_from_config("no.such.module:Thing", "default.value.serde")
    # a name that is neither a builtin nor a path: the builtins are listed, not an import error
    with pytest.raises(
        ConfigError, match=r"'default.key.serde': unknown serde 'string': a builtin name \(String, "
    ):
        serde_from_config("string", "default.key.serde")
