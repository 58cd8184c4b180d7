"""Objects a configuration names by path: `module:attribute`, or the dotted `module.attribute`.

Serdes and the RocksDB config setter can be given as objects in Python or as paths in a properties file or
an environment variable; both resolve a path here, so the forms accepted and the error are the same.
"""

from __future__ import annotations

import importlib

from kappaflow.api.errors import ConfigError


def import_object(path: str, key: str, what: str) -> object:
    """The object `path` names; ConfigError naming the config `key` when it cannot be imported."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    try:
        found: object = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"config '{key}': cannot import {what} '{path}': {exc}") from exc
    return found
