"""Pod template overrides: a curated, typed subset of the PodSpec a StreamApp may adjust.

Why not the whole PodTemplateSpec: the operator owns the container command, the state volume, probes
and the runtime's environment, and a free-form pod template would let a user silently break static
membership or the state directory. These fields cover scheduling (node selector, tolerations, affinity,
topology spread), identity, security contexts, and extension (extra env, volumes and sidecar containers,
which are passed through whole because they are the user's own); anything else is a feature request.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from .common import DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN, CamelModel, SecretKeySelector, SecretName

ENV_NAME_PATTERN = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"


class Toleration(CamelModel):
    """A Kubernetes toleration, field for field."""

    key: str | None = None
    """Taint key the toleration matches; empty with operator Exists matches every key."""
    operator: Literal["Exists", "Equal"] | None = None
    """Exists (any value) or Equal (the value below); Equal when unset."""
    value: str | None = None
    """Taint value to match with operator Equal."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect to match; every effect when unset."""
    toleration_seconds: int | None = None
    """With NoExecute: how long the pod stays bound after the taint appears (forever when unset)."""


class ConfigMapKeySelector(CamelModel):
    """One key of a ConfigMap in the StreamApp's namespace."""

    name: Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)]
    """Name of the ConfigMap."""
    key: Annotated[str, Field(min_length=1, max_length=253)]
    """Key inside the ConfigMap."""


class FieldSelector(CamelModel):
    """A downward-API field of the pod, such as `metadata.namespace` or `status.podIP`."""

    field_path: Annotated[str, Field(min_length=1)]
    """Path of the pod field, e.g. metadata.name or status.podIP."""


class EnvVarSource(CamelModel):
    """Where an environment variable's value comes from; exactly one source."""

    secret_key_ref: SecretKeySelector | None = None
    config_map_key_ref: ConfigMapKeySelector | None = None
    field_ref: FieldSelector | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> EnvVarSource:
        chosen = [s for s in (self.secret_key_ref, self.config_map_key_ref, self.field_ref) if s is not None]
        if len(chosen) != 1:
            raise ValueError("valueFrom needs exactly one of secretKeyRef, configMapKeyRef, fieldRef")
        return self


class EnvVar(CamelModel):
    """An extra environment variable for the runtime container."""

    name: Annotated[str, Field(min_length=1, max_length=253, pattern=ENV_NAME_PATTERN)]
    """Name of the variable; names the operator sets itself are refused."""
    value: str | None = None
    """Literal value; $(VAR) references to earlier variables are expanded."""
    value_from: EnvVarSource | None = None
    """Take the value from a Secret, ConfigMap or pod field instead."""

    @model_validator(mode="after")
    def _one_value(self) -> EnvVar:
        if self.value is not None and self.value_from is not None:
            raise ValueError(f"env {self.name}: set value or valueFrom, not both")
        return self


class KeyToPath(CamelModel):
    """Project one key of a Secret or ConfigMap to a relative file path."""

    key: Annotated[str, Field(min_length=1)]
    """Key of the Secret or ConfigMap."""
    path: Annotated[str, Field(min_length=1, pattern=r"^[^/].*$")]
    """Relative file path the key is written to."""


class SecretVolume(CamelModel):
    """Mount a Secret's keys as files."""

    secret_name: SecretName
    """Name of the Secret."""
    items: list[KeyToPath] | None = None
    """Only these keys, at these paths; every key as a file of its name when unset."""


class ConfigMapVolume(CamelModel):
    """Mount a ConfigMap's keys as files."""

    name: Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)]
    """Name of the ConfigMap."""
    items: list[KeyToPath] | None = None
    """Only these keys, at these paths; every key as a file of its name when unset."""


class EmptyDirVolume(CamelModel):
    """A scratch directory that lives as long as the pod."""

    medium: Literal["", "Memory"] | None = None
    """Memory for a tmpfs (counts against the container's memory); node disk when empty."""
    size_limit: str | None = None
    """Largest size the directory may grow to, e.g. 1Gi."""


#: Volume names and mount paths the operator uses itself; extra volumes may not collide with them.
RESERVED_VOLUME_NAMES = frozenset({"state", "config", "kafka-tls"})
RESERVED_MOUNT_PREFIXES = ("/var/lib/kappaflow", "/etc/kappaflow")


class ExtraVolume(CamelModel):
    """A volume mounted into the runtime container: exactly one of secret, configMap, emptyDir."""

    name: Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN)]
    """Volume name (not state, config or kafka-tls, which the operator uses)."""
    mount_path: Annotated[str, Field(min_length=2, pattern=r"^/.*$")]
    """Where the volume appears in the runtime container (not under /var/lib/kappaflow or /etc/kappaflow)."""
    read_only: bool = True
    """Mount read-only (default true)."""
    secret: SecretVolume | None = None
    config_map: ConfigMapVolume | None = None
    empty_dir: EmptyDirVolume | None = None

    @model_validator(mode="after")
    def _check(self) -> ExtraVolume:
        sources = [s for s in (self.secret, self.config_map, self.empty_dir) if s is not None]
        if len(sources) != 1:
            raise ValueError(f"volume {self.name}: set exactly one of secret, configMap, emptyDir")
        if self.name in RESERVED_VOLUME_NAMES:
            raise ValueError(f"volume name {self.name!r} is used by the operator; choose another")
        path = self.mount_path.rstrip("/")
        for prefix in RESERVED_MOUNT_PREFIXES:
            if path == prefix or path.startswith(prefix + "/") or prefix.startswith(path + "/"):
                raise ValueError(f"volume {self.name}: mountPath {self.mount_path} overlaps {prefix}")
        return self


def _affinity_schema(schema: dict[str, Any]) -> None:
    schema.clear()
    schema.update(
        {
            "type": "object",
            "description": "Kubernetes pod affinity rules, passed through unchanged (the API server "
            "validates them when the StatefulSet is created).",
            "x-kubernetes-preserve-unknown-fields": True,
        }
    )


class SeccompProfile(CamelModel):
    """The seccomp profile a pod or container runs under."""

    type: Literal["RuntimeDefault", "Localhost", "Unconfined"]
    """RuntimeDefault (the container runtime's profile, what PodSecurity `restricted` asks for), Localhost
    (a profile file on the node) or Unconfined."""
    localhost_profile: str | None = None
    """Path of the profile on the node, relative to the kubelet's seccomp directory (type Localhost)."""


class Capabilities(CamelModel):
    """Linux capabilities to add to or drop from a container."""

    add: list[str] = Field(default_factory=list)
    """Capabilities to add (PodSecurity `restricted` allows only NET_BIND_SERVICE)."""
    drop: list[str] = Field(default_factory=list)
    """Capabilities to drop; the operator's default drops ALL."""


class PodSecurityContext(CamelModel):
    """Pod-level security settings; each field set here replaces the operator's default for it."""

    run_as_user: Annotated[int, Field(ge=0)] | None = None
    """UID the containers run as (default 1000, the runtime image's user)."""
    run_as_group: Annotated[int, Field(ge=0)] | None = None
    """Primary GID of the containers' processes (default 1000)."""
    run_as_non_root: bool | None = None
    """Refuse to start a container whose user is root (default true)."""
    fs_group: Annotated[int, Field(ge=0)] | None = None
    """Group that owns the volumes, so the state volume is writable without root (default 1000)."""
    fs_group_change_policy: Literal["OnRootMismatch", "Always"] | None = None
    """When volume ownership is changed to fsGroup (default OnRootMismatch: only on first use)."""
    supplemental_groups: list[Annotated[int, Field(ge=0)]] = Field(default_factory=list)
    """Extra groups of the containers' processes."""
    seccomp_profile: SeccompProfile | None = None
    """Seccomp profile of every container (default RuntimeDefault)."""


class ContainerSecurityContext(CamelModel):
    """Container-level security settings for the runtime container (and defaults for sidecars)."""

    run_as_user: Annotated[int, Field(ge=0)] | None = None
    """UID of this container's process; the pod's when unset."""
    run_as_group: Annotated[int, Field(ge=0)] | None = None
    """Primary GID of this container's process; the pod's when unset."""
    run_as_non_root: bool | None = None
    """Refuse to start this container as root; the pod's setting when unset."""
    read_only_root_filesystem: bool | None = None
    """Mount the image's filesystem read-only (state and config are volumes, so the runtime copes)."""
    allow_privilege_escalation: bool | None = None
    """Whether a process may gain more privileges than its parent (default false)."""
    privileged: bool | None = None
    """Run privileged (never needed by kappaflow; PodSecurity `baseline` already refuses it)."""
    capabilities: Capabilities | None = None
    """Capabilities to add or drop (default: drop ALL)."""
    seccomp_profile: SeccompProfile | None = None
    """Seccomp profile of this container; the pod's when unset."""


def _passthrough_list_schema(what: str) -> Any:
    def schema(node: dict[str, Any]) -> None:
        description = node.get("description", "")
        node.clear()
        node.update(
            {
                "type": "array",
                "description": description or what,
                "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            }
        )

    return schema


class PodTemplateOverrides(CamelModel):
    """What a StreamApp may change about its pods."""

    labels: dict[str, str] = Field(default_factory=dict)
    """Extra pod labels (the operator's own labels win on conflict)."""
    annotations: dict[str, str] = Field(default_factory=dict)
    """Extra pod annotations."""
    node_selector: dict[str, str] = Field(default_factory=dict)
    """Node labels the pods (and the operator's Jobs) must run on."""
    tolerations: list[Toleration] = Field(default_factory=list)
    """Taints the pods (and the operator's Jobs) tolerate."""
    affinity: dict[str, Any] | None = Field(default=None, json_schema_extra=_affinity_schema)
    service_account_name: Annotated[str, Field(max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)] | None = None
    """Service account of the application pods (and the reset Job); the namespace default when unset."""
    priority_class_name: str | None = None
    """PriorityClass of the application pods."""
    image_pull_secrets: list[Annotated[str, Field(pattern=DNS_SUBDOMAIN_PATTERN)]] = Field(
        default_factory=list
    )
    """Names of Secrets of type kubernetes.io/dockerconfigjson."""
    env: list[EnvVar] = Field(default_factory=list)
    """Extra environment variables; names that map to operator-owned runtime keys are refused."""
    extra_volumes: list[ExtraVolume] = Field(default_factory=list)
    """Extra volumes mounted into the runtime container."""
    termination_grace_period_seconds: Annotated[int, Field(ge=10, le=3600)] = 60
    """Time a pod gets on SIGTERM to commit and close; the runtime needs about one commit interval."""
    security_context: PodSecurityContext | None = None
    """Pod security settings, merged over the operator's defaults, which pass PodSecurity `restricted`
    (runAsNonRoot, uid/gid/fsGroup 1000, seccomp RuntimeDefault)."""
    container_security_context: ContainerSecurityContext | None = None
    """Security settings of the runtime container (and defaults for sidecars), merged over the
    operator's defaults (no privilege escalation, all capabilities dropped)."""
    topology_spread_constraints: list[dict[str, Any]] | None = Field(
        default=None,
        json_schema_extra=_passthrough_list_schema("Kubernetes topologySpreadConstraints, passed through."),
    )
    """Kubernetes topologySpreadConstraints for the pods (the API server validates them). Unset: replicas
    spread over zones and nodes when possible (ScheduleAnyway); an empty list turns spreading off. A
    constraint without labelSelector gets the app's pod selector."""
    sidecars: list[dict[str, Any]] = Field(
        default_factory=list,
        json_schema_extra=_passthrough_list_schema("Extra containers run beside the runtime container."),
    )
    """Extra containers (Kubernetes Container objects) run beside the runtime container in every pod, e.g.
    a log shipper or a proxy. Each needs a name and an image; their securityContext is merged over the
    operator's container defaults, so they pass PodSecurity `restricted` unless they ask for more."""

    @model_validator(mode="after")
    def _unique_names(self) -> PodTemplateOverrides:
        for kind, names in (
            ("env", [e.name for e in self.env]),
            ("volume", [v.name for v in self.extra_volumes]),
        ):
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"duplicate {kind} names: {', '.join(dupes)}")
        for i, sidecar in enumerate(self.sidecars):
            _check_sidecar(i, sidecar)
        names = [str(c.get("name")) for c in self.sidecars]
        if len(set(names)) != len(names):
            raise ValueError(f"podTemplate.sidecars: duplicate container names {sorted(names)}")
        for i, constraint in enumerate(self.topology_spread_constraints or []):
            for key in ("maxSkew", "topologyKey", "whenUnsatisfiable"):
                if key not in constraint:
                    raise ValueError(f"podTemplate.topologySpreadConstraints[{i}]: {key} is required")
        return self


#: The runtime container's name; a sidecar may not take it.
RUNTIME_CONTAINER = "kappaflow"


def _check_sidecar(index: int, sidecar: dict[str, Any]) -> None:
    """A sidecar is a Container the API server validates in full; catch what would otherwise only fail
    later, when the StatefulSet is applied: a missing or colliding name, a missing image."""
    where = f"podTemplate.sidecars[{index}]"
    name = sidecar.get("name")
    if not isinstance(name, str) or not re.match(DNS_LABEL_PATTERN, name) or len(name) > 63:
        raise ValueError(f"{where}: name must be a DNS label (lower case, digits, '-'), got {name!r}")
    if name == RUNTIME_CONTAINER:
        raise ValueError(f"{where}: the name {RUNTIME_CONTAINER!r} is the runtime container's")
    if not isinstance(sidecar.get("image"), str) or not sidecar["image"]:
        raise ValueError(f"{where} ({name}): image is required")
