"""The runtime config the operator hands to its pods: the keys it sets and the environment's names.

The operator writes most keys to the properties file (`kappaflow run <entry> --config <file>`) and the
per-pod ones, and the credentials, as `KAPPAFLOW_*` environment variables; the runtime merges the file,
then the environment (environment wins). `env_key` is the one mapping from a config key to its variable.
Every key named here must be one the runtime's `StreamsConfig` accepts (tests/contract checks it).
"""

from __future__ import annotations

ENV_PREFIX = "KAPPAFLOW_"

# Keys the operator sets itself (users set the StreamApp field instead; the operator refuses them in
# spec.config). The runtime's defaults and validation for them live in kappaflow.api.config.
APPLICATION_ID = "application.id"
BOOTSTRAP_SERVERS = "bootstrap.servers"
PROCESSING_GUARANTEE = "processing.guarantee"
NUM_STANDBY_REPLICAS = "num.standby.replicas"
NUM_STREAM_THREADS = "num.stream.threads"
STATE_DIR = "state.dir"
METRICS_PORT = "metrics.port"
QUERY_HTTP_ENABLED = "query.http.enabled"
INTERNAL_TOPICS_CREATE = "kappaflow.internal.topics.create"
REPLICATION_FACTOR = "replication.factor"  # of the internal topics (Kafka Streams' key)
GROUP_INSTANCE_ID = "group.instance.id"  # per pod: the environment, from the pod name
APPLICATION_SERVER = "application.server"  # per pod: the environment, host:port of the query server
SECURITY_PROTOCOL = "security.protocol"
SASL_MECHANISM = "sasl.mechanism"
SASL_MECHANISMS = "sasl.mechanisms"  # librdkafka's spelling of the same setting
SASL_USERNAME = "sasl.username"  # credentials: only ever the environment, from a Secret
SASL_PASSWORD = "sasl.password"
SSL_CA_LOCATION = "ssl.ca.location"
SSL_CERTIFICATE_LOCATION = "ssl.certificate.location"
SSL_KEY_LOCATION = "ssl.key.location"
SSL_KEY_PASSWORD = "ssl.key.password"

# `KAPPAFLOW_*` variables of the tooling, not configuration: the runtime's config loader skips them.
ENTRY_POINT_ENV = "KAPPAFLOW_ENTRY_POINT"  # the module:attr of jobs running `kappaflow <command>`
TOPOLOGY_CONFIGMAP_ENV = "KAPPAFLOW_TOPOLOGY_CONFIGMAP"  # the describe Job's publisher: where to write
DESCRIBE_KEY_ENV = "KAPPAFLOW_DESCRIBE_KEY"  # ... and which image/entry point the description is of
NON_CONFIG_ENV = frozenset(
    {
        "KAPPAFLOW_CACHE",
        ENTRY_POINT_ENV,
        "KAPPAFLOW_KUBECONFIG",
        "KAPPAFLOW_VERSION",
        TOPOLOGY_CONFIGMAP_ENV,
        DESCRIBE_KEY_ENV,
        "KAPPAFLOW_LOG_LEVEL",  # logging (kappaflow.runner.logs), read by `kappaflow run`
        "KAPPAFLOW_LOG_FORMAT",
        "KAPPAFLOW_SUMMARY_INTERVAL",  # `kappaflow run`'s summary line, seconds (0: none)
    }
)
NON_CONFIG_ENV_PREFIXES = ("KAPPAFLOW_TEST_", "KAPPAFLOW_OPERATOR_")


def env_key(key: str) -> str:
    """The environment variable the runtime reads for `key`: `bootstrap.servers` ->
    `KAPPAFLOW_BOOTSTRAP_SERVERS` (upper case, `.` and `-` become `_`)."""
    return ENV_PREFIX + key.upper().replace(".", "_").replace("-", "_")


def is_tooling_env(name: str) -> bool:
    """True for a `KAPPAFLOW_*` variable that is not configuration (see NON_CONFIG_ENV)."""
    return name in NON_CONFIG_ENV or name.startswith(NON_CONFIG_ENV_PREFIXES)
