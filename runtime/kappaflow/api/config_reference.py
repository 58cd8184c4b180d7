"""The configuration reference (docs/configuration.md), generated from the config definitions.

The keys and defaults are `kappaflow_contract.keys` (DEFAULTS, CLIENT_PASSTHROUGH, CLIENT_PREFIXES,
NOT_IMPLEMENTED), the types the runtime's parsing (`kappaflow.api.config`: INT_KEYS, BOOL_KEYS), the
environment variables `kappaflow_contract.config.env_key`; only what a reader needs besides - the Java
Kafka Streams name and a sentence of meaning - lives here, in `KEY_DOCS`. A key added to DEFAULTS without
an entry here fails `render()` (and so its drift test), and the committed page is checked against a fresh
rendering the way the CRDs are (tests/docs/test_config_reference.py):

    python -m kappaflow.api.config_reference           # rewrite docs/configuration.md
    python -m kappaflow.api.config_reference --check   # exit 1 if it is out of date
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kappaflow.api.config import BOOL_KEYS, INT_KEYS
from kappaflow_contract.config import env_key
from kappaflow_contract.keys import (
    CLIENT_PASSTHROUGH,
    CLIENT_PREFIXES,
    DEFAULTS,
    EMIT_INTERVAL_OUTER_JOIN,
    EMIT_INTERVAL_WINDOWED_AGGREGATION,
    NOT_IMPLEMENTED,
    ONLY_VALUE,
)

PAGE = Path("docs") / "configuration.md"
SC = "StreamsConfig."
# Kafka Streams' internal throttles: set by the TopologyTestDriver, not meant for users (as in Java).
INTERNAL = frozenset({EMIT_INTERVAL_OUTER_JOIN, EMIT_INTERVAL_WINDOWED_AGGREGATION})

# key -> (type when neither INT_KEYS nor BOOL_KEYS says it, Java Kafka Streams equivalent or "", meaning)
KEY_DOCS: dict[str, tuple[str, str, str]] = {
    "application.id": (
        "string",
        SC + "APPLICATION_ID_CONFIG",
        "The application's name: its consumer group, the prefix of its internal topics and its state "
        "directory. Required.",
    ),
    "bootstrap.servers": (
        "string",
        SC + "BOOTSTRAP_SERVERS_CONFIG",
        "The brokers to connect to first (`host:port,...`). Required.",
    ),
    "client.id": (
        "string",
        SC + "CLIENT_ID_CONFIG",
        "Prefix of the clients' ids; empty: derived from the application id and a process id.",
    ),
    "default.key.serde": (
        "serde",
        SC + "DEFAULT_KEY_SERDE_CLASS_CONFIG",
        "Key serde where the topology names none: a builtin name (`String`, `Long`, ...), a `module:attr` "
        "path or a Serde instance.",
    ),
    "default.value.serde": (
        "serde",
        SC + "DEFAULT_VALUE_SERDE_CLASS_CONFIG",
        "Value serde where the topology names none (as `default.key.serde`).",
    ),
    "default.timestamp.extractor": (
        "callable",
        SC + "DEFAULT_TIMESTAMP_EXTRACTOR_CLASS_CONFIG",
        "`(record, partition_time) -> int` or its `module:attr` path; unset: the record's own timestamp.",
    ),
    "default.deserialization.exception.handler": (
        "handler",
        SC + "DESERIALIZATION_EXCEPTION_HANDLER_CLASS_CONFIG",
        "What a record that does not deserialize does: `log_and_fail`, `log_and_continue` or a callable.",
    ),
    "processing.exception.handler": (
        "handler",
        SC + "PROCESSING_EXCEPTION_HANDLER_CLASS_CONFIG",
        "What an exception in a processor or punctuator does: `log_and_fail`, `log_and_continue` or a "
        "callable; CONTINUE drops only the failing node's output (its siblings still see the record).",
    ),
    "production.exception.handler": (
        "handler",
        SC + "PRODUCTION_EXCEPTION_HANDLER_CLASS_CONFIG",
        "What a record the producer cannot send does: `fail`, `continue` or a callable answering "
        "CONTINUE, FAIL or RETRY (KIP-1065: a retriable failure redoes the work since the last commit).",
    ),
    "errors.dead.letter.queue.topic.name": (
        "string",
        SC + "ERRORS_DEAD_LETTER_QUEUE_TOPIC_NAME_CONFIG",
        "Topic that records skipped by a continue handler are written to, with the error in their headers.",
    ),
    "statestore.cache.max.bytes": (
        "",
        SC + "STATESTORE_CACHE_MAX_BYTES_CONFIG",
        "Bytes of the record cache in front of the stores, per instance; 0 turns caching off.",
    ),
    "rocksdb.config.setter": (
        "callable",
        SC + "ROCKSDB_CONFIG_SETTER_CLASS_CONFIG",
        "`(store_name, rocksdict.Options, config)` or its `module:attr` path, called before each RocksDB "
        "store opens.",
    ),
    "commit.interval.ms": (
        "",
        SC + "COMMIT_INTERVAL_MS_CONFIG",
        "How often offsets, stores and changelogs are committed: counted from each commit's start while "
        "the thread keeps up with its input, else from its end (as Kafka Streams), and at least half an "
        "interval after a commit ends. Unset: 30000, or 100 under `exactly_once_v2`.",
    ),
    "processing.guarantee": (
        "`at_least_once` \\| `exactly_once_v2`",
        SC + "PROCESSING_GUARANTEE_CONFIG",
        "Delivery guarantee; `exactly_once_v2` uses one transactional producer per process.",
    ),
    "num.standby.replicas": (
        "",
        SC + "NUM_STANDBY_REPLICAS_CONFIG",
        "Standby copies of each stateful task, kept on other instances for fast fail-over. Where the "
        "group's `range` assignment can be forecast, the first sits where a failover of the task's "
        "instance moves the task, the next where it moves after that one fails too.",
    ),
    "acceptable.recovery.lag": (
        "",
        SC + "ACCEPTABLE_RECOVERY_LAG_CONFIG",
        "Changelog records a copy may lag and still count as caught up: an instance joining the group "
        "first warms up the tasks it will get until each is within this lag (>= 0).",
    ),
    "max.warmup.replicas": (
        "",
        SC + "MAX_WARMUP_REPLICAS_CONFIG",
        "Tasks a joining instance warms up at once before it joins, bounding the restore load it puts "
        "on the brokers (>= 1).",
    ),
    "probing.rebalance.interval.ms": (
        "",
        SC + "PROBING_REBALANCE_INTERVAL_MS_CONFIG",
        "While an instance warms up, how often it reads the group again to forecast its tasks anew; "
        "it joins as soon as its warm-ups are caught up, without waiting for a probe (>= 60000).",
    ),
    "close.group.membership.operation": (
        "string",
        "CloseOptions.groupMembershipOperation",
        "What `close()` (and `kappaflow run` on SIGTERM) does to the group membership when not given "
        "CloseOptions: `DEFAULT` (dynamic members leave, static members remain until the session "
        "timeout), `LEAVE_GROUP` (static members are removed at once too: their partitions move without "
        "waiting out `session.timeout.ms`), `REMAIN_IN_GROUP` (static members only: a dynamic member "
        "always leaves, and start() refuses it).",
    ),
    "state.bootstrap.enabled": (
        "",
        "",
        "A task store with no local state (a new pod, a lost volume) is first fetched from a peer's "
        "standby (`GET /v1/snapshots` on its `application.server`, `query.http.enabled=true`), then only "
        "the changelog's tail is restored; false restores the whole changelog.",
    ),
    "state.bootstrap.min.records": (
        "",
        "",
        "Changelog offsets a store's changelog must span before a peer's snapshot is fetched instead of "
        "restoring it (>= 0).",
    ),
    "state.bootstrap.timeout.ms": (
        "",
        "",
        "How long fetching one store's snapshot may take, over every peer asked, before the task "
        "restores from the changelog instead; the stream thread waits for it while the task opens (>= 1).",
    ),
    "num.stream.threads": (
        "",
        SC + "NUM_STREAM_THREADS_CONFIG",
        "Stream workers of this instance: 1 runs in-process; N > 1 runs N worker processes.",
    ),
    "state.dir": ("path", SC + "STATE_DIR_CONFIG", "Where the local state (RocksDB, checkpoints) lives."),
    "application.server": (
        "string",
        SC + "APPLICATION_SERVER_CONFIG",
        "`host:port` other instances reach this one's interactive queries at.",
    ),
    "group.instance.id": (
        "string",
        "ConsumerConfig.GROUP_INSTANCE_ID_CONFIG",
        "Static group membership: a restart within the session timeout is no rebalance (the operator sets "
        "the pod name).",
    ),
    "poll.ms": (
        "",
        SC + "POLL_MS_CONFIG",
        "How long a poll waits for records when none are fetched (never past the due time of a commit "
        "with something to commit).",
    ),
    "max.task.idle.ms": (
        "",
        SC + "MAX_TASK_IDLE_MS_CONFIG",
        "How long a task with an empty input partition waits before processing its other inputs.",
    ),
    "replication.factor": (
        "",
        SC + "REPLICATION_FACTOR_CONFIG",
        "Replication factor of the internal topics; -1: the broker's default. 3 or more also gives them "
        "`min.insync.replicas=2` (unless the topic config sets it).",
    ),
    "metrics.port": (
        "",
        "",
        "Port of `/metrics` (Prometheus) and `/health/live`, `/health/ready`; 0 picks a free one.",
    ),
    "metrics.host": ("string", "", "Address the metrics and health server binds to; unset: 0.0.0.0."),
    "query.http.enabled": (
        "",
        "",
        "`kappaflow run` serves the stores over HTTP (interactive queries) on `application.server`'s port.",
    ),
    "query.http.host": ("string", "", "Address the interactive-query server binds to; unset: 0.0.0.0."),
    "kappaflow.internal.topics.create": (
        "",
        "",
        "Create missing internal topics at start-up (the operator creates them itself and sets false).",
    ),
    "kappaflow.fusion.enabled": (
        "",
        "",
        "Compile chains of built-in processors into direct calls; false runs every record node by node "
        "(same results, slower).",
    ),
    "kappaflow.native.enabled": (
        "",
        "",
        "Run the drain loop, compiled stages and restoring's per-record loops in the native core when it is "
        "installed; false runs their Python twins.",
    ),
    "kappaflow.native.produce.enabled": (
        "",
        "",
        "With the native core on, produce sink and repartition records through librdkafka's C API from "
        "the core (confluent-kafka's own rd_kafka_t); false produces them through confluent-kafka's Python "
        "produce. Same records and transactions; at at_least_once a failed delivery reaches the production "
        "handler through the core's librdkafka plugin (`plugin.library.paths` on the sink and repartition "
        "producer) instead of a per-record callback.",
    ),
    "kappaflow.native.changelog.enabled": (
        "",
        "",
        "With native produce on, produce the stores' changelog records through it too (the changelog "
        "producer, each record's delivery report handing its offset to the checkpoint as before); false "
        "produces them through confluent-kafka's Python produce.",
    ),
    "kappaflow.native.restore.enabled": (
        "",
        "",
        "With the native core on, take the restore consumer's fetched changelog records from librdkafka's "
        "partition queues in the core (confluent-kafka's own rd_kafka_t), with no Python message per "
        "record; false reads them through confluent-kafka's consume(). Same records, same store contents.",
    ),
    "kappaflow.native.consume.enabled": (
        "",
        "",
        "With the native core on, take the stream thread's fetched input records from librdkafka's "
        "partition queues in the core (opened as the rebalance callback assigns them) into the tasks' "
        "record tuples, with no Python message per record; confluent-kafka's consume() still serves the "
        "callbacks. False reads the records through consume(). Same records, offsets and pauses.",
    ),
    "topology.optimization": (
        "list",
        SC + "TOPOLOGY_OPTIMIZATION_CONFIG",
        "The rewrites `StreamsBuilder.build(props)` applies, as Java's: `all`, `none`, or a comma-separated "
        "list of `reuse.ktable.source.topics` (a source table's topic is its store's changelog), "
        "`merge.repartition.topics` (the repartitions after one key change share a topic) and "
        "`single.store.self.join` (KIP-862: a stream joined with itself keeps one window store). Only "
        "the props given to `build` rewrite; in the runtime's config the value is validated.",
    ),
    "ensure.explicit.internal.resource.naming": (
        "",
        SC + "ENSURE_EXPLICIT_INTERNAL_RESOURCE_NAMING_CONFIG",
        "KIP-1111: `StreamsBuilder.build(props)` refuses a topology whose repartition topics, stores or "
        "changelogs have generated names, naming each one.",
    ),
    "processor.wrapper.class": (
        "ProcessorWrapper",
        SC + "PROCESSOR_WRAPPER_CLASS_CONFIG",
        "KIP-1112: a `ProcessorWrapper` (object, class or `module:attr` path) whose "
        "`wrap_processor_supplier(name, supplier)` wraps every processor, DSL and Processor API alike.",
    ),
    "repartition.purge.interval.ms": (
        "",
        SC + "REPARTITION_PURGE_INTERVAL_MS_CONFIG",
        "How often records of repartition topics that every task has committed past are deleted.",
    ),
    "default.api.timeout.ms": (
        "",
        "ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG",
        "How long calls to an unreachable broker are retried before the stream thread fails.",
    ),
    "kappaflow.hanging.transaction.ms": (
        "",
        "",
        "exactly_once_v2: how long a restoration may wait on a transaction open on a changelog before it "
        "is reported as held by a hanging transaction (a warning naming the partition and offset, the "
        "`hanging-transaction-partitions` metric, `/health/ready`); 0: the producers' "
        "`transaction.timeout.ms` plus 15 s, the broker's abort check.",
    ),
    "security.protocol": (
        "string",
        "CommonClientConfigs.SECURITY_PROTOCOL_CONFIG",
        "Passed to every client: `PLAINTEXT`, `SSL`, `SASL_PLAINTEXT`, `SASL_SSL`.",
    ),
    "sasl.mechanism": ("string", "SaslConfigs.SASL_MECHANISM", "Passed to every client (Java's spelling)."),
    "sasl.mechanisms": ("string", "", "librdkafka's spelling of `sasl.mechanism`."),
    "sasl.username": ("string", "", "Passed to every client (Java puts it in `sasl.jaas.config`)."),
    "sasl.password": (
        "string",
        "",
        "Passed to every client; on Kubernetes from a Secret, as an environment variable.",
    ),
    "ssl.ca.location": (
        "path",
        "SslConfigs.SSL_TRUSTSTORE_LOCATION_CONFIG",
        "CA certificates (PEM) to verify the brokers with.",
    ),
    "ssl.certificate.location": (
        "path",
        "SslConfigs.SSL_KEYSTORE_LOCATION_CONFIG",
        "Client certificate (PEM).",
    ),
    "ssl.key.location": ("path", "SslConfigs.SSL_KEYSTORE_LOCATION_CONFIG", "Client private key (PEM)."),
    "ssl.key.password": ("string", "SslConfigs.SSL_KEY_PASSWORD_CONFIG", "Password of the client key."),
    "client.rack": (
        "string",
        "CommonClientConfigs.CLIENT_RACK_CONFIG",
        "Passed to every client: fetch from the closest replica.",
    ),
    "session.timeout.ms": (
        "int",
        "ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG",
        "Passed to the consumers: how long a silent member stays in the group.",
    ),
    "heartbeat.interval.ms": (
        "int",
        "ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG",
        "Passed to the consumers.",
    ),
    "max.poll.interval.ms": (
        "int",
        "ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG",
        "Passed to the consumers: the longest pause between polls before the member is removed.",
    ),
}


def key_type(key: str) -> str:
    """The type the runtime parses `key` as (INT_KEYS, BOOL_KEYS), else the one documented here."""
    if key in INT_KEYS:
        return "int"
    if key in BOOL_KEYS:
        return "boolean"
    return KEY_DOCS[key][0]


def _default(key: str) -> str:
    value: Any = DEFAULTS.get(key)
    if key == "commit.interval.ms":
        return "30000 (100 under `exactly_once_v2`)"
    if key == "state.dir":
        return "`<temp dir>/kappaflow`"  # the machine's temporary directory: not one value to print
    if value is None or value == "":
        return "required" if key in ("application.id", "bootstrap.servers") else ""
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def _row(key: str) -> str:
    _, java, meaning = KEY_DOCS[key]
    java_cell = f"`{java}`" if java else "(kappaflow only)"
    return f"| `{key}` | {key_type(key)} | {_default(key)} | {java_cell} | `{env_key(key)}` | {meaning} |"


def render() -> str:
    """The whole page. Raises KeyError naming a key that has no entry in KEY_DOCS."""
    keys = [k for k in DEFAULTS if k not in INTERNAL]
    missing = [k for k in (*keys, *CLIENT_PASSTHROUGH) if k not in KEY_DOCS]
    if missing:
        raise KeyError(f"config keys without a KEY_DOCS entry in kappaflow.api.config_reference: {missing}")
    header = [
        "| key | type | default | Java Kafka Streams | environment variable | meaning |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    prefixes = ", ".join(f"`{p}`" for p in CLIENT_PREFIXES)
    not_implemented = ", ".join(f"`{k}`" for k in sorted(NOT_IMPLEMENTED))
    only = "; ".join(f"`{k}` only at `{v}`" for k, (v, _) in ONLY_VALUE.items())
    lines = [
        "# Configuration reference",
        "",
        "<!-- generated by `python -m kappaflow.api.config_reference` from the config definitions",
        "     (kappaflow_contract.keys, kappaflow.api.config); tests/docs/test_config_reference.py fails",
        "     when this page drifts from them. Do not edit by hand. -->",
        "",
        "Every key can be given in a Java `.properties` file (`kappaflow run ... --config app.properties`),",
        "in the dict passed to `KafkaStreams`, or as its environment variable (upper case, `.` and `-` "
        "become",
        "`_`, prefixed `KAPPAFLOW_`); the environment wins over the file, the file over the dict. A key",
        "kappaflow does not know stops the start-up with a message naming it and the key it most likely",
        "means (`config 'comit.interval.ms' is not a kappaflow config key (did you mean",
        "commit.interval.ms?)`); the operator reports the same message in a StreamApp's status.",
        "",
        "## Streams settings",
        "",
        *header,
        *(_row(k) for k in keys),
        "",
        "## Client settings passed to librdkafka",
        "",
        "Passed verbatim to every consumer, producer and admin client when set.",
        "",
        *header,
        *(_row(k) for k in CLIENT_PASSTHROUGH),
        "",
        "## Per-client overrides",
        "",
        f"A key under {prefixes} sets that librdkafka setting on one kind of client only (for example",
        "`producer.linger.ms=50`, `consumer.fetch.min.bytes=1`); librdkafka validates the rest. The",
        "environment variable follows the same rule (`KAPPAFLOW_PRODUCER_LINGER_MS`).",
        "",
        "## Kafka Streams keys kappaflow does not implement",
        "",
        f"Refused at start-up with a message that says so: {not_implemented}."
        + (f" Implemented at one value only: {only}." if only else ""),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the repository root")
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed page is out of date")
    args = parser.parse_args(argv)
    page = args.root / PAGE
    text = render()
    if args.check:
        current = page.read_text(encoding="utf-8") if page.exists() else ""
        if current != text:
            print(f"{page} is out of date: run `make config-docs`", file=sys.stderr)
            return 1
        return 0
    page.write_text(text, encoding="utf-8")
    print(f"wrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
