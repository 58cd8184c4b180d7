"""The runtime's config keys and the check every key passes: shared by the runtime (start-up) and the
operator (a StreamApp's `spec.config`, checked before anything is deployed), so both refuse the same keys
with the same message. Moved here from `kappaflow.api.config`, which re-exports every name.

Every key is either honoured or rejected with a message naming it (Java only logs an unknown key; here a
typo must not pass silently): the keys below (`DEFAULTS`), librdkafka settings the clients pass through
(`CLIENT_PASSTHROUGH`) and per-client overrides under `CLIENT_PREFIXES`. The standard library only.
"""

from __future__ import annotations

import difflib
import os
import tempfile
from pathlib import Path
from typing import Any

from kappaflow_contract.optimization import (
    TOPOLOGY_OPTIMIZATION,
    OptimizationConfigError,
    optimization_rewrites,
)

# The temporary directory Python would pick, without probing the disk as `tempfile.gettempdir()` does:
# that probe raises when nothing is writable, and importing kappaflow must work in a container with a
# read-only root filesystem (`kappaflow describe`, the operator's pods before their volumes matter).
_TMP = tempfile.tempdir or next((os.environ[v] for v in ("TMPDIR", "TEMP", "TMP") if os.environ.get(v)), "")
_TMP = _TMP or "/tmp"

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
    # task placement (runner/range_forecast.py, runner/warmup.py): Kafka Streams' defaults
    "acceptable.recovery.lag": 10000,
    "max.warmup.replicas": 2,
    "probing.rebalance.interval.ms": 600000,
    # a store with no local state is first fetched from a peer's standby when its changelog spans at
    # least this many offsets (runner/bootstrap.py); then only the changelog's tail is restored
    "state.bootstrap.enabled": True,
    "state.bootstrap.min.records": 10000,
    "state.bootstrap.timeout.ms": 60000,
    # stream workers of this instance: 1 runs in-process; N > 1 runs N worker processes (runner/workers.py)
    "num.stream.threads": 1,
    "state.dir": str(Path(_TMP) / "kappaflow"),
    "application.server": "",
    "group.instance.id": None,
    # what close() does to the group membership when not told (runner/close_options.py): DEFAULT,
    # LEAVE_GROUP or REMAIN_IN_GROUP (KIP-1153)
    "close.group.membership.operation": "DEFAULT",
    "poll.ms": 100,
    "max.task.idle.ms": 0,
    "replication.factor": -1,
    "metrics.port": 9464,
    "query.http.enabled": False,
    "kappaflow.internal.topics.create": True,
    # compile chains of built-in processors into the native core's stages (kappaflow.tasks.fusion); false,
    # or the core absent, keeps every record on the generic node-by-node path, the same results slower
    "kappaflow.fusion.enabled": True,
    # run the tasks' drain loop and the built-in processors' compiled stages in the native core when it
    # is installed (kappaflow_native, Rust); false, or the core absent, runs the Python references
    # (drain_python, the generic processors): same results, slower
    "kappaflow.native.enabled": True,
    # with the native core on, produce sink and repartition records through librdkafka's C API from the
    # core (kappaflow.runner.native_produce); false produces them through confluent-kafka's Python produce
    "kappaflow.native.produce.enabled": True,
    "kappaflow.native.changelog.enabled": True,
    # with the native core on, the restore consumer's records are taken from librdkafka's partition queues
    # by the core (kappaflow.runner.native_restore); false reads them through confluent-kafka's consume()
    "kappaflow.native.restore.enabled": True,
    # with the native core on, the group consumer's input records are taken from librdkafka's partition
    # queues by the core (kappaflow.runner.native_input); false reads them through confluent-kafka's consume()
    "kappaflow.native.consume.enabled": True,
    "topology.optimization": "none",
    # KIP-1111: StreamsBuilder.build(props) refuses generated internal topic and store names
    "ensure.explicit.internal.resource.naming": False,
    # KIP-1112: a ProcessorWrapper (object, class or import path) every processor's supplier goes through
    "processor.wrapper.class": None,
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
    # exactly_once_v2: how long a restoration may be held by a transaction open on a changelog before it
    # is reported as hanging (log, metric, /health/ready); 0: the producers' transaction.timeout.ms plus
    # the broker's 15 s of abort checking (runner/open_transactions.py)
    "kappaflow.hanging.transaction.ms": 0,
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
ONLY_VALUE: dict[str, tuple[str, str]] = {}
# Kafka Streams keys kappaflow does not implement: named so the error says so rather than "unknown".
NOT_IMPLEMENTED = frozenset(
    {
        "buffered.records.per.partition",
        "built.in.metrics.version",
        "cache.max.bytes.buffering",
        "default.dsl.store",
        "dsl.store.suppliers.class",
        "metrics.recording.level",
        "rack.aware.assignment.strategy",
        "task.assignor.class",
        "task.timeout.ms",
        "upgrade.from",
        "window.size.ms",
    }
)


def key_problem(key: str, value: Any) -> str | None:
    """Why kappaflow would not honour `key` (unknown: a typo, with the nearest known key; not
    implemented; or an unsupported value of a key implemented at one value only), None if it would.
    A pure decision, naming the key."""
    if key == TOPOLOGY_OPTIMIZATION:
        try:
            optimization_rewrites(value)
        except OptimizationConfigError as exc:
            return f"config {exc}"
        return None
    if key in ONLY_VALUE:
        accepted, why = ONLY_VALUE[key]
        if value is not None and str(value).strip() != accepted:
            return f"config '{key}'={value!r} is not supported yet: {why}"
        return None
    if key in DEFAULTS or key in CLIENT_PASSTHROUGH or key.startswith(CLIENT_PREFIXES):
        return None
    if key in NOT_IMPLEMENTED:
        return f"config '{key}' is a Kafka Streams setting kappaflow does not implement"
    suggestion = closest_key(key)
    hint = f"did you mean {suggestion}?" if suggestion is not None else "a typo?"
    return f"config '{key}' is not a kappaflow config key ({hint})"


def closest_key(key: str) -> str | None:
    """The known key `key` most likely misspells (difflib), if one is close enough."""
    known = [k for k in (*DEFAULTS, *CLIENT_PASSTHROUGH, *ONLY_VALUE) if not k.startswith("__")]
    found = difflib.get_close_matches(key, known, n=1, cutoff=0.8)
    return found[0] if found else None
