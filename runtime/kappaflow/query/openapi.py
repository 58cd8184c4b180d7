"""The OpenAPI 3 description of the interactive-query HTTP API (served at GET /openapi.json).

Written as data next to the server rather than generated, because the server is the standard library's
and the description is small; a test checks that every documented path is one the server answers.
"""

from __future__ import annotations

from typing import Any

_STORE = {"name": "store", "in": "path", "required": True, "schema": {"type": "string"}}
_KEY = {
    "name": "key",
    "in": "path",
    "required": True,
    "description": "the key as text, read with the store's key serde (numbers in decimal, Bytes base64, "
    "Json as JSON)",
    "schema": {"type": "string"},
}
_STALE = {
    "name": "stale",
    "in": "query",
    "description": "true also reads standby and restoring copies (enable_stale_stores)",
    "schema": {"type": "boolean", "default": False},
}
_LOCAL = {
    "name": "local",
    "in": "query",
    "description": "true answers from this instance only (set by forwarding instances)",
    "schema": {"type": "boolean", "default": False},
}
_FROM = {"name": "from", "in": "query", "schema": {"type": "string"}}
_TO = {"name": "to", "in": "query", "schema": {"type": "string"}}
_AS_OF = {
    "name": "as_of",
    "in": "query",
    "description": "epoch ms: the version valid then (omitted: the latest version)",
    "schema": {"type": "integer"},
}
_ORDER = {
    "name": "order",
    "in": "query",
    "description": "asc: oldest first; desc (the default): newest first",
    "schema": {"type": "string", "enum": ["asc", "desc"], "default": "desc"},
}

_ANY = {"description": "a value rendered with the store's value serde (bytes: {encoding: base64, data})"}
# one version of a versioned store: valid from `timestamp` until `valid_to` (exclusive; null: the latest)
_VERSION: dict[str, Any] = {
    "value": _ANY,
    "timestamp": {"type": "integer"},
    "valid_to": {"type": "integer", "nullable": True},
}
_ENTRIES = {
    "type": "object",
    "properties": {
        "store": {"type": "string"},
        "entries": {
            "type": "array",
            "items": {"type": "object", "properties": {"key": _ANY, "value": _ANY}},
        },
        "partitions": {"type": "array", "items": {"type": "integer"}},
    },
}
_ERROR = {
    "type": "object",
    "properties": {"error": {"type": "string"}, "retryable": {"type": "boolean"}},
}
_RETRY = {
    "description": "the owner is rebalancing or restoring: retry after the Retry-After seconds",
    "headers": {"Retry-After": {"schema": {"type": "integer"}}},
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}


def _json(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _get(summary: str, params: list[dict[str, Any]], ok: dict[str, Any], *extra: int) -> dict[str, Any]:
    responses: dict[str, Any] = {"200": ok, "503": _RETRY}
    for code in extra:
        responses[str(code)] = _json({"$ref": "#/components/schemas/Error"}, "not found or invalid")
    return {"get": {"summary": summary, "parameters": params, "responses": responses}}


def openapi_spec() -> dict[str, Any]:
    keyed: dict[str, Any] = {
        "type": "object",
        "properties": {
            "store": {"type": "string"},
            "key": _ANY,
            "value": _ANY,
            "partition": {"type": "integer"},
            "host": {"type": "string"},
        },
    }
    versions = {
        "type": "object",
        "properties": {
            "key": _ANY,
            "from": {},
            "to": {},
            "order": {"type": "string", "enum": ["asc", "desc"]},
            "versions": {"type": "array", "items": {"type": "object", "properties": _VERSION}},
        },
    }
    windows = {
        "type": "object",
        "properties": {
            "key": _ANY,
            "windows": {
                "type": "array",
                "items": {"type": "object", "properties": {"start": {}, "value": _ANY}},
            },
        },
    }
    sessions = {
        "type": "object",
        "properties": {
            "key": _ANY,
            "sessions": {
                "type": "array",
                "items": {"type": "object", "properties": {"start": {}, "end": {}, "value": _ANY}},
            },
        },
    }
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "kappaflow interactive queries",
            "version": "1",
            "description": "Read the state stores of a running kappaflow application from any instance; "
            "key requests are forwarded to the instance that owns the key.",
        },
        "paths": {
            "/v1/stores/{store}/keys/{key}": _get(
                "the value of a key in a key-value store",
                [_STORE, _KEY, _STALE, _LOCAL],
                _json(keyed),
                400,
                404,
            ),
            "/v1/stores/{store}/keys/{key}/version": _get(
                "a versioned store's version of a key valid at `as_of` (epoch ms; omitted: the latest)",
                [_STORE, _KEY, _AS_OF, _STALE, _LOCAL],
                _json({"type": "object", "properties": {**keyed["properties"], **_VERSION, "as_of": {}}}),
                400,
                404,
            ),
            "/v1/stores/{store}/keys/{key}/versions": _get(
                "a versioned store's versions of a key valid at some time in [from, to] (epoch ms)",
                [_STORE, _KEY, _FROM, _TO, _ORDER, _STALE, _LOCAL],
                _json(versions),
                400,
                404,
            ),
            "/v1/stores/{store}/keys/{key}/windows": _get(
                "the windows of a key in a window store, starting in [from, to] (epoch ms)",
                [_STORE, _KEY, _FROM, _TO, _STALE, _LOCAL],
                _json(windows),
                400,
                404,
            ),
            "/v1/stores/{store}/keys/{key}/sessions": _get(
                "the sessions of a key in a session store",
                [_STORE, _KEY, _STALE, _LOCAL],
                _json(sessions),
                400,
                404,
            ),
            "/v1/stores/{store}/keys/{key}/metadata": _get(
                "the active host, standby hosts and partition of a key",
                [_STORE, _KEY],
                _json({"type": "object"}),
                400,
                404,
            ),
            "/v1/stores/{store}/range": _get(
                "key-value entries with from <= key <= to, gathered from every instance",
                [_STORE, _FROM, _TO, _STALE, _LOCAL],
                _json(_ENTRIES),
                400,
                404,
            ),
            "/v1/stores/{store}/all": _get(
                "every entry of a store (window stores: windows starting in [from, to]), from every instance",
                [_STORE, _FROM, _TO, _STALE, _LOCAL],
                _json(_ENTRIES),
                404,
            ),
            "/v1/metadata": {
                "get": {
                    "summary": "every instance, its endpoint and the stores and partitions it hosts",
                    "responses": {"200": _json({"type": "object"})},
                }
            },
            "/v1/lags": {
                "get": {
                    "summary": "how far each local store partition is behind its changelog",
                    "responses": {"200": _json({"type": "object"})},
                }
            },
            "/v1/tasks": {
                "get": {
                    "summary": "each task's active and standby hosts, and this instance's tasks with their "
                    "role (active, restoring, standby, warmup) and changelog lag",
                    "responses": {"200": _json({"type": "object"})},
                }
            },
            "/v1/snapshots/{task}/{store}": {
                "get": {
                    "summary": "a RocksDB checkpoint of this instance's standby copy of a task's store, as a "
                    "tar, for a peer bootstrapping the task (runner/bootstrap.py)",
                    "parameters": [
                        {"name": "task", "in": "path", "required": True, "schema": {"type": "string"}},
                        _STORE,
                    ],
                    "responses": {
                        "200": {
                            "description": "the checkpoint directory's files",
                            "headers": {
                                "X-Kappaflow-Changelog-Offset": {
                                    "description": "the changelog offset the snapshot's contents reach",
                                    "schema": {"type": "integer"},
                                }
                            },
                            "content": {
                                "application/x-tar": {"schema": {"type": "string", "format": "binary"}}
                            },
                        },
                        "404": _json({"$ref": "#/components/schemas/Error"}, "no standby of the task here"),
                        "409": _json({"$ref": "#/components/schemas/Error"}, "the store is not RocksDB"),
                    },
                }
            },
        },
        "components": {"schemas": {"Error": _ERROR}},
    }
