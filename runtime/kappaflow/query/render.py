"""Keys from URLs and values to JSON, through the store's serdes.

A key in a URL is text; the store's key serde says what it means: a String key is the text itself, a
Long/Integer key a decimal number, a Double/Float a decimal, a Json key a JSON document, a Bytes key
base64. Values are whatever the store's value serde produced: JSON-able values are written as they are,
bytes as base64 (with `"encoding": "base64"` beside them), pydantic models and dataclasses as their
fields, windowed keys as {"key", "start", "end"}. So a client reads the same value the application
computed, without knowing the wire format.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
from typing import Any

from kappaflow.api import serdes
from kappaflow.api.errors import StreamsError
from kappaflow.api.windows import Window, Windowed


class BadKey(StreamsError):
    """A key in the URL cannot be read with the store's key serde (the client gets 400)."""


def parse_key(text: str, serde: serdes.Serde[Any]) -> Any:
    try:
        if isinstance(serde, serdes.String):
            return text
        if isinstance(serde, serdes.Long | serdes.Integer):
            return int(text)
        if isinstance(serde, serdes.Double | serdes.Float):
            return float(text)
        if isinstance(serde, serdes.Bytes):
            return base64.b64decode(text, validate=True)
        if isinstance(serde, serdes.Json):
            return json.loads(text)
        if isinstance(serde, serdes.Pydantic):
            return serde.model.model_validate_json(text)
    except (ValueError, binascii.Error) as exc:
        raise BadKey(f"key {text!r} is not valid for the store's {serde.name} key serde: {exc}") from exc
    raise BadKey(f"keys of a {serde.name} store cannot be given in a URL")


def key_text(key: Any) -> str:
    """The URL form of a key (the inverse of parse_key for the common serdes)."""
    if isinstance(key, bytes):
        return base64.b64encode(key).decode()
    if isinstance(key, str):
        return key
    if isinstance(key, bool) or key is None or isinstance(key, dict | list):
        return json.dumps(key)
    return str(key)


def to_json(value: Any) -> Any:
    """A JSON-able rendering of a store key or value."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return {"encoding": "base64", "data": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, Windowed):
        return {"key": to_json(value.key), "start": value.window.start, "end": value.window.end}
    if isinstance(value, Window):
        return {"start": value.start, "end": value.end}
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_json(v) for v in value]
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return to_json(dump(mode="json"))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_json(dataclasses.asdict(value))
    return str(value)


def entries(pairs: list[tuple[Any, Any]]) -> list[dict[str, Any]]:
    return [{"key": to_json(k), "value": to_json(v)} for k, v in pairs]
