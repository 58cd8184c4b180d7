"""Pod template overrides: a curated, typed subset of the PodSpec a StreamApp may adjust.

Why not the whole PodTemplateSpec: the operator owns the container command, the state volume, probes
and the runtime's environment, and a free-form pod template would let a user silently break static
membership or the state directory. These fields cover scheduling, identity and sidecar-free extension
(extra env and volumes); anything else is a feature request, not a loophole.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from .common import DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN, CamelModel, SecretKeySelector, SecretName

ENV_NAME_PATTERN = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"


class Toleration(CamelModel):
    """A Kubernetes toleration, field for field."""

    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class ConfigMapKeySelector(CamelModel):
    """One key of a ConfigMap in the StreamApp's namespace."""

    name: Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)]
    key: Annotated[str, Field(min_length=1, max_length=253)]


class FieldSelector(CamelModel):
    """A downward-API field of the pod, such as `metadata.namespace` or `status.podIP`."""

    field_path: Annotated[str, Field(min_length=1)]


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
    value: str | None = None
    value_from: EnvVarSource | None = None

    @model_validator(mode="after")
    def _one_value(self) -> EnvVar:
        if self.value is not None and self.value_from is not None:
            raise ValueError(f"env {self.name}: set value or valueFrom, not both")
        return self


class KeyToPath(CamelModel):
    """Project one key of a Secret or ConfigMap to a relative file path."""

    key: Annotated[str, Field(min_length=1)]
    path: Annotated[str, Field(min_length=1, pattern=r"^[^/].*$")]


class SecretVolume(CamelModel):
    """Mount a Secret's keys as files."""

    secret_name: SecretName
    items: list[KeyToPath] | None = None


class ConfigMapVolume(CamelModel):
    """Mount a ConfigMap's keys as files."""

    name: Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)]
    items: list[KeyToPath] | None = None


class EmptyDirVolume(CamelModel):
    """A scratch directory that lives as long as the pod."""

    medium: Literal["", "Memory"] | None = None
    size_limit: str | None = None


#: Volume names and mount paths the operator uses itself; extra volumes may not collide with them.
RESERVED_VOLUME_NAMES = frozenset({"state", "config", "kafka-tls"})
RESERVED_MOUNT_PREFIXES = ("/var/lib/kappaflow", "/etc/kappaflow")


class ExtraVolume(CamelModel):
    """A volume mounted into the runtime container: exactly one of secret, configMap, emptyDir."""

    name: Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN)]
    mount_path: Annotated[str, Field(min_length=2, pattern=r"^/.*$")]
    read_only: bool = True
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


class PodTemplateOverrides(CamelModel):
    """What a StreamApp may change about its pods."""

    labels: dict[str, str] = Field(default_factory=dict)
    """Extra pod labels (the operator's own labels win on conflict)."""
    annotations: dict[str, str] = Field(default_factory=dict)
    """Extra pod annotations."""
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)
    affinity: dict[str, Any] | None = Field(default=None, json_schema_extra=_affinity_schema)
    service_account_name: Annotated[str, Field(max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)] | None = None
    priority_class_name: str | None = None
    image_pull_secrets: list[Annotated[str, Field(pattern=DNS_SUBDOMAIN_PATTERN)]] = Field(
        default_factory=list
    )
    """Names of Secrets of type kubernetes.io/dockerconfigjson."""
    env: list[EnvVar] = Field(default_factory=list)
    """Extra environment variables; names that map to operator-owned runtime keys are refused."""
    extra_volumes: list[ExtraVolume] = Field(default_factory=list)
    termination_grace_period_seconds: Annotated[int, Field(ge=10, le=3600)] = 60
    """Time a pod gets on SIGTERM to commit and close; the runtime needs about one commit interval."""

    @model_validator(mode="after")
    def _unique_names(self) -> PodTemplateOverrides:
        for kind, names in (
            ("env", [e.name for e in self.env]),
            ("volume", [v.name for v in self.extra_volumes]),
        ):
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"duplicate {kind} names: {', '.join(dupes)}")
        return self
