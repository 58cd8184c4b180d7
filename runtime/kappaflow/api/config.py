"""`StreamsConfig`: Kafka Streams' dotted configuration names, defaults, parsing and validation.

Configuration comes from a dict, a Java `.properties` file and `KAPPAFLOW_*` environment variables
(environment wins), so one image can be configured by the operator's ConfigMap and the pod's env alike.
The file format, the `KAPPAFLOW_*` names and the keys the operator sets are the runtime-operator contract,
defined once in `kappaflow_contract` (docs/contract.md).
Values stay as given and are converted by typed getters, which name the key in every error.

Every key is either honoured or rejected at start-up with a message naming it (Java only logs an
unknown key; here a typo must not pass silently): the key tables (`DEFAULTS`, `CLIENT_PASSTHROUGH`,
`CLIENT_PREFIXES`, ...) and the rule live in `kappaflow_contract.keys`, so the operator refuses the same
keys in a StreamApp's spec.config before deploying it; they are re-exported here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kappaflow.api.errors import ConfigError
from kappaflow.api.serdes import Serde, serde_from_config
from kappaflow_contract.config import ENV_PREFIX as ENV_PREFIX
from kappaflow_contract.config import NON_CONFIG_ENV as NON_CONFIG_ENV
from kappaflow_contract.config import NON_CONFIG_ENV_PREFIXES as NON_CONFIG_ENV_PREFIXES
from kappaflow_contract.config import env_key as env_key
from kappaflow_contract.config import is_tooling_env
from kappaflow_contract.keys import AT_LEAST_ONCE as AT_LEAST_ONCE
from kappaflow_contract.keys import CLIENT_PASSTHROUGH as CLIENT_PASSTHROUGH
from kappaflow_contract.keys import CLIENT_PREFIXES as CLIENT_PREFIXES
from kappaflow_contract.keys import DEFAULTS as DEFAULTS
from kappaflow_contract.keys import EMIT_INTERVAL_OUTER_JOIN as EMIT_INTERVAL_OUTER_JOIN
from kappaflow_contract.keys import EMIT_INTERVAL_WINDOWED_AGGREGATION as EMIT_INTERVAL_WINDOWED_AGGREGATION
from kappaflow_contract.keys import EXACTLY_ONCE_V2 as EXACTLY_ONCE_V2
from kappaflow_contract.keys import NOT_IMPLEMENTED as NOT_IMPLEMENTED
from kappaflow_contract.keys import ONLY_VALUE as ONLY_VALUE
from kappaflow_contract.keys import closest_key, key_problem
from kappaflow_contract.properties import PropertiesError, loads

# KAPPAFLOW_* environment variables of the tooling, not configuration (NON_CONFIG_ENV and
# NON_CONFIG_ENV_PREFIXES), and env_key, come from the contract: the operator sets some on its Jobs.

INT_KEYS = {
    EMIT_INTERVAL_OUTER_JOIN,
    EMIT_INTERVAL_WINDOWED_AGGREGATION,
    "statestore.cache.max.bytes",
    "commit.interval.ms",
    "num.standby.replicas",
    "num.stream.threads",
    "acceptable.recovery.lag",
    "max.warmup.replicas",
    "probing.rebalance.interval.ms",
    "state.bootstrap.min.records",
    "state.bootstrap.timeout.ms",
    "poll.ms",
    "max.task.idle.ms",
    "replication.factor",
    "metrics.port",
    "repartition.purge.interval.ms",
    "default.api.timeout.ms",
    "kappaflow.hanging.transaction.ms",
}
# Kafka Streams' lower bounds (StreamsConfig's `atLeast` validators) of integer settings
LEAST_VALUES = {
    "acceptable.recovery.lag": 0,
    "max.warmup.replicas": 1,
    "probing.rebalance.interval.ms": 60_000,
    "state.bootstrap.min.records": 0,
    "state.bootstrap.timeout.ms": 1,
}
BOOL_KEYS = {
    "query.http.enabled",
    "state.bootstrap.enabled",
    "kappaflow.internal.topics.create",
    "kappaflow.fusion.enabled",
    "kappaflow.native.enabled",
    "kappaflow.native.produce.enabled",
    "kappaflow.native.changelog.enabled",
    "kappaflow.native.restore.enabled",
    "kappaflow.native.consume.enabled",
    "ensure.explicit.internal.resource.naming",
}


def read_properties(path: str | Path) -> dict[str, str]:
    """Parse a `.properties` file by Java's `Properties.load` rules (escapes, continuations, `=`, `:` or
    whitespace separators, `#`/`!` comments: `kappaflow_contract.properties`), the format the operator
    writes. A line with a key and no separator is an error naming the file and line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    try:
        return loads(text, require_separator=True)
    except PropertiesError as exc:
        raise ConfigError(f"{path}:{exc.line}: {exc.reason}") from exc


def check_key(key: str, value: Any) -> None:
    """Reject a key kappaflow would not honour: unknown (a typo), not implemented, or an unsupported
    value of a key implemented at one value only. A pure decision, naming the key; the rule itself is
    the contract's (`kappaflow_contract.keys.key_problem`), which the operator applies to spec.config."""
    problem = key_problem(key, value)
    if problem is not None:
        raise ConfigError(problem)


def _check_source_key(key: str, value: Any, source: str) -> None:
    """`check_key`, with where the key came from (a properties file, an environment variable) in the
    message, and for a variable the name of the variable the intended key reads."""
    problem = key_problem(key, value)
    if problem is None:
        return
    suggestion = closest_key(key)
    hint = ""
    if source.startswith("environment variable") and suggestion is not None:
        hint = f"; the variable for {suggestion} is {env_key(suggestion)}"
    raise ConfigError(f"{source}: {problem}{hint}")


class StreamsConfig:
    """An immutable view of the configuration with typed getters."""

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        merged = dict(DEFAULTS)
        merged.update(values or {})
        self._values = merged
        self._validate()

    @classmethod
    def load(
        cls,
        values: Mapping[str, Any] | None = None,
        *,
        file: str | Path | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> StreamsConfig:
        """Merge, lowest precedence first: defaults, the dict, the properties file, `KAPPAFLOW_*` env."""
        merged: dict[str, Any] = dict(values or {})
        if file is not None:
            from_file = read_properties(file)
            for key, value in from_file.items():
                _check_source_key(key, value, f"{file}")
            merged.update(from_file)
        env = os.environ if environ is None else environ
        known = set(DEFAULTS) | set(CLIENT_PASSTHROUGH) | set(ONLY_VALUE) | NOT_IMPLEMENTED | set(merged)
        by_env = {env_key(k): k for k in known}
        for name, value in env.items():
            if not name.startswith(ENV_PREFIX) or is_tooling_env(name):
                continue
            key = by_env.get(name) or name[len(ENV_PREFIX) :].lower().replace("_", ".")
            _check_source_key(key, value, f"environment variable {name}")
            merged[key] = value
        return cls(merged)

    def _validate(self) -> None:
        for key, value in self._values.items():
            check_key(key, value)
        guarantee = self.get_str("processing.guarantee")
        if guarantee not in (AT_LEAST_ONCE, EXACTLY_ONCE_V2):
            raise ConfigError(
                f"config 'processing.guarantee': expected '{AT_LEAST_ONCE}' or '{EXACTLY_ONCE_V2}', "
                f"got '{guarantee}'"
            )
        for key in INT_KEYS:
            self.get_int(key)
        for key in BOOL_KEYS:
            self.get_bool(key)
        membership = self.get_str("close.group.membership.operation").upper()
        if membership not in ("DEFAULT", "LEAVE_GROUP", "REMAIN_IN_GROUP"):
            raise ConfigError(
                "config 'close.group.membership.operation': expected DEFAULT, LEAVE_GROUP or "
                f"REMAIN_IN_GROUP, got '{membership}'"
            )
        if self.get_int("statestore.cache.max.bytes") < 0:
            raise ConfigError("config 'statestore.cache.max.bytes' must be >= 0")
        if self.get_int("num.stream.threads") < 1:
            raise ConfigError("config 'num.stream.threads' must be >= 1 (worker processes of this instance)")
        # Kafka Streams' bounds for the task-placement settings
        for key, least in LEAST_VALUES.items():
            if self.get_int(key) < least:
                raise ConfigError(f"config '{key}' must be >= {least}, got {self.get_int(key)}")

    def get(self, key: str, default: Any = None) -> Any:
        value = self._values.get(key, default)
        return default if value is None else value

    def get_str(self, key: str) -> str:
        value = self._values.get(key)
        return "" if value is None else str(value)

    def get_int(self, key: str) -> int:
        value = self._values.get(key)
        if key == "commit.interval.ms" and value is None:
            return 100 if self.exactly_once else 30000
        if value is None:
            raise ConfigError(f"config '{key}' is required")
        try:
            return int(value)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"config '{key}': expected an integer, got {value!r}") from exc

    def get_bool(self, key: str) -> bool:
        value = self._values.get(key)
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "1", "yes", "on"):
            return True
        if text in ("false", "0", "no", "off", "none", ""):
            return False
        raise ConfigError(f"config '{key}': expected true or false, got {value!r}")

    def require(self, key: str) -> str:
        value = self._values.get(key)
        if value is None or value == "":
            raise ConfigError(f"config '{key}' is required")
        return str(value)

    def serde(self, key: str) -> Serde[Any] | None:
        return serde_from_config(self._values.get(key), key)

    @property
    def application_id(self) -> str:
        return self.require("application.id")

    @property
    def exactly_once(self) -> bool:
        return self._values.get("processing.guarantee") == EXACTLY_ONCE_V2

    def with_overrides(self, overrides: Mapping[str, Any]) -> StreamsConfig:
        values = dict(self._values)
        values.update(overrides)
        return StreamsConfig(values)

    def prefixed(self, prefix: str) -> dict[str, Any]:
        """Values under `prefix` (e.g. `consumer.`), with the prefix removed: client overrides."""
        return {
            k[len(prefix) :]: v for k, v in self._values.items() if k.startswith(prefix) and v is not None
        }

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def __contains__(self, key: object) -> bool:
        return key in self._values and self._values[key] is not None
