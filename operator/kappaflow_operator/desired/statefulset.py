"""The StatefulSet that runs the application's pods.

Design choices, and why:
- `podManagementPolicy: Parallel`: pods of a streams app do not depend on each other's start order, and
  scaling 1 -> 6 should start six pods at once. Rolling updates are unaffected (still one pod at a time,
  `RollingUpdate` waits for each to be Ready, and Ready means its tasks are restored).
- `group.instance.id` = pod name through the downward API: static membership, so a restarted pod gets
  its partitions back without a rebalance; the state volume of the same ordinal holds their state.
- The config hash annotation on the pod template: ConfigMap edits do not restart pods by themselves.
- PVC retention: kept on scale-down (scaling back up finds warm state), deleted with the StreamApp.
"""

from __future__ import annotations

from typing import Any

from kappaflow_contract import config as keys

from ..models import StreamAppSpec
from ..models.pod import ExtraVolume
from .common import (
    CONFIG_DIR,
    CONFIG_FILE,
    CONFIG_HASH_ANNOTATION,
    CONTAINER_NAME,
    SPEC_HASH_ANNOTATION,
    STATE_DIR,
    TLS_DIR,
    AppRef,
    common_labels,
    configmap_name,
    headless_service_name,
    object_meta,
    selector_labels,
    spec_hash,
)
from .config import TLS_FILES
from .security import container_security_context, pod_security_context, sidecar_containers, topology_spread

STATE_VOLUME = "state"
CONFIG_VOLUME = "config"
TLS_VOLUME = "kafka-tls"
TLS_MOUNT = {"name": TLS_VOLUME, "mountPath": TLS_DIR, "readOnly": True}


def _env(spec: StreamAppSpec, ref: AppRef) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {
            "name": keys.env_key(keys.GROUP_INSTANCE_ID),
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
        },
    ]
    if spec.interactive_queries.enabled:
        host = f"$(POD_NAME).{headless_service_name(ref.name)}.{ref.namespace}.svc"
        env.append(
            {
                "name": keys.env_key(keys.APPLICATION_SERVER),
                "value": f"{host}:{spec.interactive_queries.port}",
            }
        )
    env.extend(sasl_env(spec))
    env.extend(e.to_wire() for e in spec.pod_template.env)
    return env


def _extra_volume(volume: ExtraVolume) -> dict[str, Any]:
    source: dict[str, Any]
    if volume.secret is not None:
        source = {"secret": volume.secret.to_wire()}
    elif volume.config_map is not None:
        source = {"configMap": volume.config_map.to_wire()}
    else:
        assert volume.empty_dir is not None  # guaranteed by the model's validator
        source = {"emptyDir": volume.empty_dir.to_wire()}
    return {"name": volume.name, **source}


def sasl_env(spec: StreamAppSpec) -> list[dict[str, Any]]:
    """SASL credentials as env vars straight from their Secrets (the runtime reads KAPPAFLOW_SASL_*)."""
    sasl = spec.kafka.sasl
    if sasl is None:
        return []
    return [
        {"name": var, "valueFrom": {"secretKeyRef": {"name": secret.name, "key": secret.key}}}
        for var, secret in (
            (keys.env_key(keys.SASL_USERNAME), sasl.username_secret_ref),
            (keys.env_key(keys.SASL_PASSWORD), sasl.password_secret_ref),
        )
    ]


def tls_volume(spec: StreamAppSpec) -> dict[str, Any] | None:
    """TLS files projected to /etc/kappaflow/tls, where streams.properties points ssl.*.location."""
    tls = spec.kafka.tls
    if tls is None:
        return None
    refs = (
        ("ca", tls.ca_secret_ref),
        ("certificate", tls.certificate_secret_ref),
        ("key", tls.key_secret_ref),
    )
    # A projected volume, because CA, certificate and key may live in different Secrets.
    sources = [
        {"secret": {"name": ref.name, "items": [{"key": ref.key, "path": TLS_FILES[role]}]}}
        for role, ref in refs
        if ref is not None
    ]
    if not sources:
        return None
    return {"name": TLS_VOLUME, "projected": {"sources": sources, "defaultMode": 0o440}}


def _container(spec: StreamAppSpec, ref: AppRef, has_tls: bool) -> dict[str, Any]:
    ports = [{"name": "metrics", "containerPort": spec.metrics.port, "protocol": "TCP"}]
    if spec.interactive_queries.enabled:
        ports.append({"name": "query", "containerPort": spec.interactive_queries.port, "protocol": "TCP"})
    mounts: list[dict[str, Any]] = [
        {"name": STATE_VOLUME, "mountPath": STATE_DIR},
        {"name": CONFIG_VOLUME, "mountPath": CONFIG_DIR, "readOnly": True},
    ]
    if has_tls:
        mounts.append(TLS_MOUNT)
    mounts += [
        {"name": v.name, "mountPath": v.mount_path, "readOnly": v.read_only}
        for v in spec.pod_template.extra_volumes
    ]
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": spec.image,
        "command": ["kappaflow"],
        "args": ["run", spec.entry_point, "--config", f"{CONFIG_DIR}/{CONFIG_FILE}"],
        "env": _env(spec, ref),
        "ports": ports,
        "volumeMounts": mounts,
        # Ready only when every active task is RUNNING (restored): a rolling update waits for it.
        "readinessProbe": {
            "httpGet": {"path": "/health/ready", "port": "metrics"},
            "periodSeconds": 5,
            "timeoutSeconds": 3,
            "failureThreshold": 3,
        },
        # Liveness is generous: a long restore is not a hang, and restarting would only restart it.
        "livenessProbe": {
            "httpGet": {"path": "/health/live", "port": "metrics"},
            "initialDelaySeconds": 10,
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 6,
        },
        "securityContext": container_security_context(spec),
    }
    if spec.image_pull_policy is not None:
        container["imagePullPolicy"] = spec.image_pull_policy
    resources = container_resources(spec)
    if resources:
        container["resources"] = resources
    return container


def container_resources(spec: StreamAppSpec) -> dict[str, dict[str, str]]:
    """spec.resources as given (they are per pod, for all its workers); with spec.streamThreads > 1 and no
    cpu given at all, one cpu per worker is requested, so the scheduler places the pod where its workers
    can all run. A cpu limit alone is left to Kubernetes (the request defaults to it), and no limit is
    invented: a limit throttles the workers instead of letting them share an idle node."""
    wire = spec.resources.to_wire()
    resources = {kind: dict(values) for kind, values in wire.items() if values}
    cpu_given = any("cpu" in values for values in resources.values())
    if spec.stream_threads > 1 and not cpu_given:
        resources.setdefault("requests", {})["cpu"] = str(spec.stream_threads)
    return resources


def _pod_spec(spec: StreamAppSpec, ref: AppRef) -> dict[str, Any]:
    tmpl = spec.pod_template
    tls = tls_volume(spec)
    volumes: list[dict[str, Any]] = [{"name": CONFIG_VOLUME, "configMap": {"name": configmap_name(ref.name)}}]
    if tls is not None:
        volumes.append(tls)
    volumes += [_extra_volume(v) for v in tmpl.extra_volumes]
    pod: dict[str, Any] = {
        "containers": [_container(spec, ref, tls is not None), *sidecar_containers(spec)],
        "volumes": volumes,
        "terminationGracePeriodSeconds": tmpl.termination_grace_period_seconds,
        "securityContext": pod_security_context(spec),
    }
    spread = topology_spread(spec, ref.name)
    if spread:
        pod["topologySpreadConstraints"] = spread
    if tmpl.service_account_name:
        pod["serviceAccountName"] = tmpl.service_account_name
    if tmpl.node_selector:
        pod["nodeSelector"] = dict(tmpl.node_selector)
    if tmpl.tolerations:
        pod["tolerations"] = [t.to_wire() for t in tmpl.tolerations]
    if tmpl.affinity:
        pod["affinity"] = tmpl.affinity
    if tmpl.priority_class_name:
        pod["priorityClassName"] = tmpl.priority_class_name
    if tmpl.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": n} for n in tmpl.image_pull_secrets]
    return pod


def _volume_claim_template(spec: StreamAppSpec, ref: AppRef) -> dict[str, Any]:
    claim: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": spec.state.size}},
    }
    if spec.state.storage_class_name:
        claim["storageClassName"] = spec.state.storage_class_name
    return {"metadata": {"name": STATE_VOLUME, "labels": selector_labels(ref.name)}, "spec": claim}


def build_statefulset(
    spec: StreamAppSpec,
    ref: AppRef,
    *,
    replicas: int,
    config_hash: str,
) -> dict[str, Any]:
    """The StatefulSet manifest.

    `replicas` is the effective count the reconciler decided (spec.replicas, capped at the topology's
    parallelism, or the autoscaler's target); `config_hash` comes from `config.config_hash(configmap)`.
    """
    tmpl = spec.pod_template
    pod_labels = {**tmpl.labels, **common_labels(ref.name)}
    pod_annotations = {
        **tmpl.annotations,
        CONFIG_HASH_ANNOTATION: config_hash,
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(spec.metrics.port),
        "prometheus.io/path": "/metrics",
    }
    sts: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": object_meta(ref, ref.name),
        "spec": {
            "replicas": replicas,
            "serviceName": headless_service_name(ref.name),
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": selector_labels(ref.name)},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Retain"},
            "template": {
                "metadata": {"labels": pod_labels, "annotations": pod_annotations},
                "spec": _pod_spec(spec, ref),
            },
            "volumeClaimTemplates": [_volume_claim_template(spec, ref)],
        },
    }
    sts["metadata"]["annotations"] = {SPEC_HASH_ANNOTATION: spec_hash(spec)}
    return sts
