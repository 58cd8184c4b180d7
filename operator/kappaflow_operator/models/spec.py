"""The StreamApp spec (`kappaflow.io/v1alpha1`): what a user declares about a streaming application.

Field names are the CRD's camelCase (pydantic aliases); the docstrings become the CRD's descriptions,
so `kubectl explain streamapp.spec.<field>` shows them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from kappaflow_contract import config as keys

from .common import CamelModel, Port, Quantity, SecretKeySelector
from .pod import PodTemplateOverrides

ENTRY_POINT_PATTERN = (
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
)
#: Kafka's legal topic characters; internal topics are `<applicationId>-<name>`, so keep it short.
APPLICATION_ID_PATTERN = r"^[a-zA-Z0-9._-]+$"
BOOTSTRAP_PATTERN = r"^[^,\s]+:[0-9]+(,[^,\s]+:[0-9]+)*$"
CONFIG_KEY_PATTERN = r"^[a-zA-Z0-9][a-zA-Z0-9._-]*$"
SPARK_MEMORY_PATTERN = r"^[0-9]+[kKmMgGtT]?$"

#: Runtime config keys the operator sets itself, mapped to the spec field a user should set instead.
RESERVED_CONFIG_KEYS: dict[str, str] = {
    keys.APPLICATION_ID: "spec.applicationId",
    keys.BOOTSTRAP_SERVERS: "spec.kafka.bootstrapServers",
    keys.GROUP_INSTANCE_ID: "the pod name (static membership, set by the operator)",
    keys.STATE_DIR: "the state volume mount (set by the operator)",
    keys.APPLICATION_SERVER: "spec.interactiveQueries",
    keys.QUERY_HTTP_ENABLED: "spec.interactiveQueries.enabled",
    keys.METRICS_PORT: "spec.metrics.port",
    keys.PROCESSING_GUARANTEE: "spec.processingGuarantee",
    keys.NUM_STANDBY_REPLICAS: "spec.standbyReplicas",
    keys.NUM_STREAM_THREADS: "spec.streamThreads",
    keys.INTERNAL_TOPICS_CREATE: "the operator (it creates internal topics itself)",
    keys.SECURITY_PROTOCOL: "spec.kafka.securityProtocol",
    keys.SASL_MECHANISM: "spec.kafka.sasl.mechanism",
    keys.SASL_MECHANISMS: "spec.kafka.sasl.mechanism",
    keys.SASL_USERNAME: "spec.kafka.sasl.usernameSecretRef",
    keys.SASL_PASSWORD: "spec.kafka.sasl.passwordSecretRef",
    keys.SSL_CA_LOCATION: "spec.kafka.tls.caSecretRef",
    keys.SSL_CERTIFICATE_LOCATION: "spec.kafka.tls.certificateSecretRef",
    keys.SSL_KEY_LOCATION: "spec.kafka.tls.keySecretRef",
    keys.SSL_KEY_PASSWORD: "a Secret (credentials are never inline)",
}

RESERVED_ENV_NAMES = frozenset(
    {keys.env_key(k) for k in RESERVED_CONFIG_KEYS} | {"POD_NAME", "POD_NAMESPACE"}
)


class SaslConfig(CamelModel):
    """SASL authentication; both credentials come from Secrets, never from the StreamApp itself."""

    mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "SCRAM-SHA-512"
    """SASL mechanism the brokers accept."""
    username_secret_ref: SecretKeySelector
    password_secret_ref: SecretKeySelector


class TlsConfig(CamelModel):
    """TLS material, mounted read-only from Secrets as files."""

    ca_secret_ref: SecretKeySelector | None = None
    """CA bundle (PEM) to verify the brokers; the system trust store when unset."""
    certificate_secret_ref: SecretKeySelector | None = None
    """Client certificate (PEM) for mutual TLS."""
    key_secret_ref: SecretKeySelector | None = None
    """Client private key (PEM) for mutual TLS."""

    @model_validator(mode="after")
    def _pair(self) -> TlsConfig:
        if (self.certificate_secret_ref is None) != (self.key_secret_ref is None):
            raise ValueError("tls: certificateSecretRef and keySecretRef must be set together (mutual TLS)")
        return self


class KafkaConnection(CamelModel):
    """How the application reaches Kafka."""

    bootstrap_servers: Annotated[str, Field(min_length=3, pattern=BOOTSTRAP_PATTERN)]
    """Comma-separated host:port list."""
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    """Kafka security.protocol: SSL needs tls, SASL_* needs sasl."""
    tls: TlsConfig | None = None
    sasl: SaslConfig | None = None
    replication_factor: Annotated[int, Field(ge=-1, le=32)] = -1
    """Replication factor of the internal topics (-1: the broker default): the operator creates them with
    it and passes it to the pods as `replication.factor`; 3 or more also sets `min.insync.replicas=2` on
    them (unless the topic config sets it)."""

    @model_validator(mode="after")
    def _consistent(self) -> KafkaConnection:
        uses_sasl = self.security_protocol.startswith("SASL_")
        uses_tls = self.security_protocol in ("SSL", "SASL_SSL")
        if uses_sasl and self.sasl is None:
            raise ValueError(f"kafka.sasl is required with securityProtocol {self.security_protocol}")
        if self.sasl is not None and not uses_sasl:
            raise ValueError("kafka.sasl needs securityProtocol SASL_PLAINTEXT or SASL_SSL")
        if self.tls is not None and not uses_tls:
            raise ValueError("kafka.tls needs securityProtocol SSL or SASL_SSL")
        return self


#: A volume only grows: the API server refuses a smaller state.size on update (a transition rule, so
#: creation is free); `volumes.py` reports claims that are larger than the spec anyway.
_NO_SHRINK = (
    "!has(self.size) || !has(oldSelf.size) || !isQuantity(string(self.size)) "
    "|| !isQuantity(string(oldSelf.size)) "
    "|| quantity(string(self.size)).compareTo(quantity(string(oldSelf.size))) >= 0"
)


class StateVolume(CamelModel):
    """The persistent volume each pod keeps its RocksDB state in (one claim per pod)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": _NO_SHRINK,
                    "messageExpression": "'state.size cannot shrink from ' + string(oldSelf.size) + ' to ' "
                    "+ string(self.size) + ': Kubernetes cannot shrink a volume'",
                    "fieldPath": ".size",
                    "reason": "FieldValueForbidden",
                }
            ]
        }
    )

    storage_class_name: str | None = None
    """Storage class of the claims; the cluster default when unset. A claim keeps the class it was
    created with."""
    size: Quantity = "1Gi"
    """Requested size of each pod's state volume. It can only grow: the operator then raises every
    existing claim's request when its storage class has allowVolumeExpansion, and replicas added later
    get the new size."""


class ResourceRequirements(CamelModel):
    """Container resources (the Kubernetes shape)."""

    requests: dict[str, Quantity] = Field(default_factory=dict)
    """Resources the scheduler reserves for the runtime container (e.g. cpu: 250m, memory: 256Mi)."""
    limits: dict[str, Quantity] = Field(default_factory=dict)
    """Upper bounds for the runtime container; memory over its limit gets the container killed."""


class InteractiveQueries(CamelModel):
    """The runtime's interactive-query HTTP server, reachable per pod through the headless Service."""

    enabled: bool = False
    """Serve interactive queries over HTTP from every pod."""
    port: Port = 8080
    """Container port of the interactive-query server."""


class Metrics(CamelModel):
    """The runtime's metrics and health endpoint (/metrics, /health/live, /health/ready)."""

    port: Port = 9464
    """Container port of /metrics and the health endpoints (the probes use it)."""


class Autoscaling(CamelModel):
    """Lag-based autoscaling: replicas = ceil(total consumer lag / lagPerReplica), within bounds."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.minReplicas <= self.maxReplicas",
                    "message": "minReplicas must be <= maxReplicas",
                }
            ]
        }
    )

    enabled: bool = False
    """Let the operator set the replica count from consumer lag (spec.replicas is then the starting point)."""
    min_replicas: Annotated[int, Field(ge=1, le=1000)] = 1
    """Fewest replicas the autoscaler keeps."""
    max_replicas: Annotated[int, Field(ge=1, le=1000)] = 10
    """Most replicas the autoscaler sets (also capped at the topology's partition count)."""
    lag_per_replica: Annotated[int, Field(ge=1)] = 10000
    """Target consumer lag (records) per replica."""
    scale_up_cooldown_seconds: Annotated[int, Field(ge=0, le=86400)] = 60
    """Least time between a scaling step and a following scale-up."""
    scale_down_cooldown_seconds: Annotated[int, Field(ge=0, le=86400)] = 300
    """Least time between a scaling step and a following scale-down (longer: moving tasks costs restores)."""
    interval_seconds: Annotated[int, Field(ge=5, le=3600)] = 30
    """How often the operator measures lag and decides."""

    @model_validator(mode="after")
    def _bounds(self) -> Autoscaling:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"autoscaling.minReplicas ({self.min_replicas}) must be <= maxReplicas ({self.max_replicas})"
            )
        return self


class ScaleIn(CamelModel):
    """How a scale-in hands the tasks of the pods it removes over to their standbys."""

    standby_wait_seconds: Annotated[int, Field(ge=0, le=86400)] = 300
    """Longest a scale-in (by the autoscaler or spec.replicas) waits, before the StatefulSet loses pods,
    for every active task of those pods to have a standby on a pod that stays within config
    `acceptable.recovery.lag` of its changelog; then it proceeds and those tasks restore the rest. 0
    scales in at once. Without standbyReplicas there is nothing to wait for."""


SparkMemory = Annotated[str, Field(pattern=SPARK_MEMORY_PATTERN)]
#: A CPU quantity as Kubernetes writes one: cores (1, 0.5) or millicores (250m).
CpuQuantity = Annotated[str, Field(pattern=r"^([0-9]+(\.[0-9]+)?|[0-9]+m)$")]


class SparkDriver(CamelModel):
    """Resources of the Spark driver."""

    cores: Annotated[int, Field(ge=1, le=64)] = 1
    """CPU cores of the driver."""
    memory: SparkMemory = "1g"
    """Memory of the driver (Spark notation, e.g. 1g, 512m)."""
    core_request: CpuQuantity | None = None
    """CPU the driver pod requests (a Kubernetes quantity, e.g. 250m); `cores` when unset."""


class SparkExecutor(CamelModel):
    """Resources and count of the Spark executors."""

    instances: Annotated[int, Field(ge=1, le=1000)] = 2
    """Number of executors."""
    cores: Annotated[int, Field(ge=1, le=64)] = 1
    """CPU cores of each executor."""
    memory: SparkMemory = "2g"
    """Memory of each executor (Spark notation, e.g. 2g)."""
    core_request: CpuQuantity | None = None
    """CPU each executor pod requests (a Kubernetes quantity, e.g. 250m); `cores` when unset."""


class SparkSettings(CamelModel):
    """How the operator runs a reprocessing SparkApplication."""

    image: str | None = None
    """Image with Spark and kappaflow[spark]; the app's image when unset."""
    spark_version: Annotated[str, Field(pattern=r"^[0-9]+\.[0-9]+\.[0-9]+$")] = "4.0.0"
    """Spark version of the image, as the Spark operator expects it."""
    service_account_name: str | None = None
    """Service account of the driver (it creates executor pods)."""
    driver: SparkDriver = Field(default_factory=SparkDriver)
    executor: SparkExecutor = Field(default_factory=SparkExecutor)
    timeout_seconds: Annotated[int, Field(ge=60)] = 6 * 3600
    """A run longer than this is treated as failed and the old version keeps running."""
    cleanup_policy: Literal["Delete", "Retain"] = "Delete"
    """Once the pods run ready on the rebuilt application id: Delete removes the replaced id's internal
    topics and the earlier runs' SparkApplications; Retain keeps them (to roll back by hand)."""


class Upgrade(CamelModel):
    """What an incompatible change (image, entry point, topology) does to state.

    `rolling` keeps state and rolls pods one at a time; `reprocess` rebuilds outputs and state on Spark
    under a new application id before rolling; `reset` discards state and starts from scratch.
    """

    mode: Literal["rolling", "reprocess", "reset"] = "rolling"
    """rolling keeps state; reprocess rebuilds it on Spark under a new application id; reset discards it."""
    spark: SparkSettings = Field(default_factory=SparkSettings)
    progress_deadline_seconds: Annotated[int, Field(ge=30)] = 600
    """An upgrade whose pods are not all ready after this long is rolled back to status.lastStableSpec."""


def _config_schema_extra(schema: dict[str, Any]) -> None:
    """Let the API server refuse operator-owned keys at `kubectl apply` time (CEL), not only the operator."""
    keys = ", ".join(f"'{k}'" for k in RESERVED_CONFIG_KEYS)
    schema["maxProperties"] = 256
    schema["x-kubernetes-validations"] = [
        {
            "rule": f"self.all(k, !(k in [{keys}]))",
            "message": "config keys managed by the operator are not allowed: "
            + ", ".join(RESERVED_CONFIG_KEYS),
        }
    ]


class StreamAppSpec(CamelModel):
    """Desired state of a kappaflow streaming application."""

    image: Annotated[str, Field(min_length=1, max_length=512)]
    """Container image with the application and kappaflow installed."""
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    """When the kubelet pulls the image (unset: the Kubernetes default, Always for `:latest`, else
    IfNotPresent)."""
    entry_point: Annotated[str, Field(max_length=256, pattern=ENTRY_POINT_PATTERN)]
    """`module:attr` naming a Topology or a function returning one."""
    application_id: Annotated[str, Field(min_length=1, max_length=180, pattern=APPLICATION_ID_PATTERN)]
    """Kafka Streams application.id: the consumer group and the prefix of internal topics."""
    replicas: Annotated[int, Field(ge=0, le=1000)] = 1
    """Number of pods; 0 pauses the application (state volumes are kept)."""
    kafka: KafkaConnection
    processing_guarantee: Literal["at_least_once", "exactly_once_v2"] = "at_least_once"
    """at_least_once (a crash may replay records since the last commit) or exactly_once_v2
    (transactions: every record affects state and outputs exactly once)."""
    standby_replicas: Annotated[int, Field(ge=0, le=10)] = 0
    """Warm copies of each state store kept on other pods, so a failed pod's tasks resume without a
    full restore."""
    stream_threads: Annotated[
        int,
        Field(
            ge=1,
            le=64,
            # one paragraph for `kubectl explain` (a docstring's line breaks would show up there)
            description=(
                "Stream workers per pod (the runtime's num.stream.threads): more than 1 runs that many "
                "worker processes in each pod, sharing its tasks, so one pod uses that many cores. "
                "spec.resources are per pod; when they give no cpu, each pod requests one cpu per worker."
            ),
        ),
    ] = 1
    state: StateVolume = Field(default_factory=StateVolume)
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    """Resources of each pod's runtime container, for all its stream workers together."""
    config: dict[str, str] = Field(default_factory=dict, json_schema_extra=_config_schema_extra)
    """Extra runtime config (Kafka Streams dotted keys); keys the operator owns are refused."""
    interactive_queries: InteractiveQueries = Field(default_factory=InteractiveQueries)
    metrics: Metrics = Field(default_factory=Metrics)
    autoscaling: Autoscaling = Field(default_factory=Autoscaling)
    scale_in: ScaleIn = Field(default_factory=ScaleIn)
    upgrade: Upgrade = Field(default_factory=Upgrade)
    topic_cleanup_policy: Literal["Retain", "Delete"] = "Retain"
    """On deletion: keep (Retain) or delete (Delete) the internal topics."""
    pod_template: PodTemplateOverrides = Field(default_factory=PodTemplateOverrides)
    suspend: bool = False
    """Stop reconciling: the operator changes nothing (pods keep running as they are) until false again."""

    @field_validator("config")
    @classmethod
    def _config_keys(cls, config: dict[str, str]) -> dict[str, str]:
        import re

        for key in sorted(config):
            if not re.match(CONFIG_KEY_PATTERN, key):
                raise ValueError(f"config key {key!r} is not a valid runtime config name")
            owner = RESERVED_CONFIG_KEYS.get(key)
            if owner is not None:
                raise ValueError(f"config key {key!r} is managed by the operator; set {owner} instead")
            lowered = key.lower()
            if "password" in lowered or "secret" in lowered:
                raise ValueError(f"config key {key!r} looks like a credential; pass it from a Secret instead")
        return config

    @model_validator(mode="after")
    def _cross_field(self) -> StreamAppSpec:
        if self.interactive_queries.enabled and self.interactive_queries.port == self.metrics.port:
            raise ValueError(f"interactiveQueries.port and metrics.port are both {self.metrics.port}")
        for env in self.pod_template.env:
            if env.name in RESERVED_ENV_NAMES:
                raise ValueError(
                    f"podTemplate.env: {env.name} is set by the operator and cannot be overridden"
                )
        return self
