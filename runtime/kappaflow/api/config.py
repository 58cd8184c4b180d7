"""`StreamsConfig`: Kafka Streams' dotted configuration names, defaults, parsing and validation.

Configuration comes from a dict, a Java-style `.properties` file and `KAPPAFLOW_*` environment variables
(environment wins), so one image can be configured by the operator's ConfigMap and the pod's env alike.
Values stay as given and are converted by typed getters, which name the key in every error.

Every key is either honoured or rejected at start-up with a message naming it (Java only logs an
unknown key; here a typo must not pass silently): the keys below (`DEFAULTS`), librdkafka settings the
clients pass through (`CLIENT_PASSTHROUGH`) and per-client overrides under `CLIENT_PREFIXES`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kappaflow.api.errors import ConfigError
from kappaflow.api.serdes import Serde, serde_from_config

AT_LEAST_ONCE = "at_least_once"
EXACTLY_ONCE_V2 = "exactly_once_v2"

EMIT_INTERVAL_OUTER_JOIN = "__emit.interval.ms.kstreams.outer.join.spurious.results.fix__"
EMIT_INTERVAL_WINDOWED_AGGREGATION = "__emit.interval.ms.kstreams.windowed.aggregation__"

DEFAULTS: dict[str, Any] = {
    "application.id": None,
    "bootstrap.servers": None,
    "client.id": "",
    "default.key.serde": None,
    "default.value.serde": None,
    "default.timestamp.extractor": None,
    "default.deserialization.exception.handler": "log_and_fail",
    "processing.exception.handler": "log_and_fail",
    "production.exception.handler": "fail",
    "errors.dead.letter.queue.topic.name": None,
    "statestore.cache.max.bytes": 10 * 1024 * 1024,
    # a callable (store_name, rocksdict.Options, config) or its `module:attribute` path, called before
    # each RocksDB store opens (kappaflow.state.rocksdb_config)
    "rocksdb.config.setter": None,
    "commit.interval.ms": None,  # 30000, or 100 under exactly_once_v2 (resolved by commit_interval_ms)
    "processing.guarantee": AT_LEAST_ONCE,
    "num.standby.replicas": 0,
    # stream workers of this instance: 1 runs in-process; N > 1 runs N worker processes (runner/workers.py)
    "num.stream.threads": 1,
    "state.dir": str(Path(tempfile.gettempdir()) / "kappaflow"),
    "application.server": "",
    "group.instance.id": None,
    "poll.ms": 100,
    "max.task.idle.ms": 0,
    "replication.factor": -1,
    "metrics.port": 9464,
    "query.http.enabled": False,
    "kappaflow.internal.topics.create": True,
    # compile chains of built-in processors into direct calls (kappaflow.tasks.fusion); false keeps every
    # record on the generic node-by-node path, the same results slower
    "kappaflow.fusion.enabled": True,
    # run the tasks' drain loop and the built-in processors' compiled stages in the native core when it
    # is installed (kappaflow_native, Rust); false, or the core absent, runs their Python twins: same
    # results, slower
    "kappaflow.native.enabled": True,
    "topology.optimization": "none",
    # Kafka Streams' internal throttles (StreamsConfig.InternalConfig): unmatched left/outer stream-stream
    # join results and emit-on-window-close results are looked for at most once per interval of wall-clock
    # time; the TopologyTestDriver sets both to 0, as Java's does
    EMIT_INTERVAL_OUTER_JOIN: 1000,
    EMIT_INTERVAL_WINDOWED_AGGREGATION: 1000,
    "metrics.host": None,
    "query.http.host": None,
    "repartition.purge.interval.ms": 30000,
    # how long calls to an unreachable broker are retried before the stream thread fails (Kafka Streams')
    "default.api.timeout.ms": 60000,
}

# librdkafka settings passed verbatim to every client when present in the streams configuration.
CLIENT_PASSTHROUGH = (
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
    "client.rack",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
)
# `<prefix><librdkafka key>` overrides one client's settings (librdkafka validates the rest).
CLIENT_PREFIXES = ("consumer.", "restore.consumer.", "producer.", "admin.")

# Keys kappaflow knows but implements only at one value: (the accepted value, why others fail).
ONLY_VALUE: dict[str, tuple[str, str]] = {
    "topology.optimization": ("none", "kappaflow does not rewrite topologies; use 'none'"),
}
# Kafka Streams keys kappaflow does not implement: named so the error says so rather than "unknown".
NOT_IMPLEMENTED = frozenset(
    {
        "acceptable.recovery.lag",
        "buffered.records.per.partition",
        "built.in.metrics.version",
        "cache.max.bytes.buffering",
        "default.dsl.store",
        "dsl.store.suppliers.class",
        "max.warmup.replicas",
        "metrics.recording.level",
        "probing.rebalance.interval.ms",
        "rack.aware.assignment.strategy",
        "task.assignor.class",
        "task.timeout.ms",
        "upgrade.from",
        "window.size.ms",
    }
)
# KAPPAFLOW_* environment variables of the tooling, not configuration.
NON_CONFIG_ENV = (
    "KAPPAFLOW_CACHE",
    "KAPPAFLOW_ENTRY_POINT",
    "KAPPAFLOW_KUBECONFIG",
    "KAPPAFLOW_VERSION",
    "KAPPAFLOW_LOG_LEVEL",  # logging (kappaflow.runner.logs), read by `kappaflow run`
    "KAPPAFLOW_LOG_FORMAT",
)
NON_CONFIG_ENV_PREFIXES = ("KAPPAFLOW_TEST_", "KAPPAFLOW_OPERATOR_")

_INT_KEYS = {
    EMIT_INTERVAL_OUTER_JOIN,
    EMIT_INTERVAL_WINDOWED_AGGREGATION,
    "statestore.cache.max.bytes",
    "commit.interval.ms",
    "num.standby.replicas",
    "num.stream.threads",
    "poll.ms",
    "max.task.idle.ms",
    "replication.factor",
    "metrics.port",
    "repartition.purge.interval.ms",
    "default.api.timeout.ms",
}
_BOOL_KEYS = {
    "query.http.enabled",
    "kappaflow.internal.topics.create",
    "kappaflow.fusion.enabled",
    "kappaflow.native.enabled",
}
ENV_PREFIX = "KAPPAFLOW_"


def env_key(key: str) -> str:
    """`bootstrap.servers` -> `KAPPAFLOW_BOOTSTRAP_SERVERS`."""
    return ENV_PREFIX + key.upper().replace(".", "_").replace("-", "_")


def read_properties(path: str | Path) -> dict[str, str]:
    """Parse a Java-style .properties file: `key=value` or `key: value`, `#`/`!` comments."""
    result: dict[str, str] = {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep <= 0:
            raise ConfigError(f"{path}:{number}: expected 'key=value', got {raw!r}")
        result[line[:sep].strip()] = line[sep + 1 :].strip()
    return result


def _tooling_env(name: str) -> bool:
    return name in NON_CONFIG_ENV or name.startswith(NON_CONFIG_ENV_PREFIXES)


def check_key(key: str, value: Any) -> None:
    """Reject a key kappaflow would not honour: unknown (a typo), not implemented, or an unsupported
    value of a key implemented at one value only. A pure decision, naming the key."""
    if key in ONLY_VALUE:
        accepted, why = ONLY_VALUE[key]
        if value is not None and str(value).strip() != accepted:
            raise ConfigError(f"config '{key}'={value!r} is not supported yet: {why}")
        return
    if key in DEFAULTS or key in CLIENT_PASSTHROUGH or key.startswith(CLIENT_PREFIXES):
        return
    if key in NOT_IMPLEMENTED:
        raise ConfigError(f"config '{key}' is a Kafka Streams setting kappaflow does not implement")
    raise ConfigError(f"config '{key}' is not a kappaflow config key (a typo?)")


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
            merged.update(read_properties(file))
        env = os.environ if environ is None else environ
        known = set(DEFAULTS) | set(CLIENT_PASSTHROUGH) | set(ONLY_VALUE) | NOT_IMPLEMENTED | set(merged)
        by_env = {env_key(k): k for k in known}
        for name, value in env.items():
            if not name.startswith(ENV_PREFIX) or _tooling_env(name):
                continue
            key = by_env.get(name) or name[len(ENV_PREFIX) :].lower().replace("_", ".")
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
        for key in _INT_KEYS:
            self.get_int(key)
        for key in _BOOL_KEYS:
            self.get_bool(key)
        if self.get_int("statestore.cache.max.bytes") < 0:
            raise ConfigError("config 'statestore.cache.max.bytes' must be >= 0")
        if self.get_int("num.stream.threads") < 1:
            raise ConfigError("config 'num.stream.threads' must be >= 1 (worker processes of this instance)")

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
