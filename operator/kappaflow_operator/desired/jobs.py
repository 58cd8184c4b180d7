"""One-shot Jobs the operator runs with the application's own image: `describe` and `reset`.

`describe` is how the operator learns the topology without importing user code: the Job runs
`kappaflow describe <entry> --json` and publishes the JSON into the ConfigMap `<app>-topology`
(`kappaflow_operator.topology_publish`, through a service account that may patch only that ConfigMap;
see `desired.describe`). Not the container's termination message, which the kubelet caps at 4 KiB: real
topologies describe to tens of kilobytes. The termination message still carries failures: with
`FallbackToLogsOnError` a failed describe leaves the tail of its output there for the operator to report.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kappaflow_contract.config import DESCRIBE_KEY_ENV, ENTRY_POINT_ENV, TOPOLOGY_CONFIGMAP_ENV

from ..models import StreamAppSpec
from .common import (
    CONFIG_DIR,
    CONFIG_FILE,
    CONTAINER_NAME,
    AppRef,
    configmap_name,
    describe_service_account_name,
    object_meta,
    stable_hash,
    topology_configmap_name,
)
from .security import container_security_context, pod_security_context
from .statefulset import TLS_MOUNT, sasl_env, tls_volume

DESCRIBE_JOB_LABEL = "kappaflow.io/job"
SCRATCH_DIR = "/tmp"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # where the kubelet mounts the token
_MAX_NAME = 63  # Job names become a pod label value


def _job_name(app: str, kind: str, digest: str) -> str:
    suffix = f"-{kind}-{digest}"
    return app[: _MAX_NAME - len(suffix)].rstrip("-.") + suffix


def describe_key(spec: StreamAppSpec) -> str:
    """What a topology description depends on: the image, the entry point and the pods' extra env (a
    topology may read its topic names from it; not config, not replicas)."""
    key: dict[str, Any] = {"image": spec.image, "entryPoint": spec.entry_point}
    if spec.pod_template.env:  # absent when unset: the Jobs of specs without env keep their names
        key["env"] = [e.to_wire() for e in spec.pod_template.env]
    return stable_hash(key, 8)


#: The hash of the pod template a Job was built from (a Job's template is immutable).
JOB_TEMPLATE_ANNOTATION = "kappaflow.io/pod-template-hash"


def job_outdated(live: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    """True for a live Job that has not succeeded and was built from another pod template than `want`.

    A describe Job is named after the image and entry point only, so a fix elsewhere in the spec (a
    securityContext PodSecurity refused, pull secrets, node selector) would otherwise leave the failed
    Job in place forever; it has to be replaced. A Job that succeeded stays: its result is what counts.
    """
    conditions = (live.get("status") or {}).get("conditions") or []
    if any(c.get("type") == "Complete" and c.get("status") == "True" for c in conditions):
        return False
    live_hash = ((live.get("metadata") or {}).get("annotations") or {}).get(JOB_TEMPLATE_ANNOTATION)
    return bool(live_hash != want["metadata"]["annotations"][JOB_TEMPLATE_ANNOTATION])


def describe_job_name(spec: StreamAppSpec, ref: AppRef) -> str:
    return _job_name(ref.name, "describe", describe_key(spec))


def _job(
    spec: StreamAppSpec, ref: AppRef, name: str, kind: str, script: str, *, mount_config: bool
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": spec.image,
        "command": ["/bin/sh", "-c", script],
        "env": [{"name": ENTRY_POINT_ENV, "value": spec.entry_point}],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": container_security_context(spec),
    }
    if spec.image_pull_policy is not None:
        container["imagePullPolicy"] = spec.image_pull_policy
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [container],
        "securityContext": pod_security_context(spec),
    }
    if mount_config:
        # The job talks to Kafka: same config file and credentials as the pods.
        container["volumeMounts"] = [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}]
        pod["volumes"] = [{"name": "config", "configMap": {"name": configmap_name(ref.name)}}]
        container["env"] += sasl_env(spec)
        tls = tls_volume(spec)
        if tls is not None:
            container["volumeMounts"].append(dict(TLS_MOUNT))
            pod["volumes"].append(tls)
    tmpl = spec.pod_template
    # the pods' env: the topology the Job loads is built with it, as in the pods
    container["env"] += [e.to_wire() for e in tmpl.env]
    if tmpl.service_account_name:
        pod["serviceAccountName"] = tmpl.service_account_name
    if tmpl.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": n} for n in tmpl.image_pull_secrets]
    if tmpl.node_selector:
        pod["nodeSelector"] = dict(tmpl.node_selector)
    if tmpl.tolerations:
        pod["tolerations"] = [t.to_wire() for t in tmpl.tolerations]
    labels = {DESCRIBE_JOB_LABEL: kind}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": object_meta(ref, name, labels),
        "spec": {
            "backoffLimit": 1,
            "activeDeadlineSeconds": 600,
            "ttlSecondsAfterFinished": 3600,
            "template": {
                "metadata": {
                    "labels": {**tmpl.labels, **labels, **object_meta(ref, name)["labels"]},
                    "annotations": dict(tmpl.annotations),
                },
                "spec": pod,
            },
        },
    }


def build_describe_job(spec: StreamAppSpec, ref: AppRef) -> dict[str, Any]:
    """The Job describing this spec's image and entry point into the topology ConfigMap.

    The JSON goes through a scratch emptyDir (so a read-only root filesystem works) and is published by
    the Job's own service account, which the operator creates with `desired.describe.describe_access`.
    """
    out = f"{SCRATCH_DIR}/topology.json"
    script = (
        f'kappaflow describe "${ENTRY_POINT_ENV}" --json > {out} && '
        f"exec python -m kappaflow_operator.topology_publish {out} "
        f"--service-account-dir {SERVICE_ACCOUNT_DIR}"
    )
    job = _job(spec, ref, describe_job_name(spec, ref), "describe", script, mount_config=False)
    template = job["spec"]["template"]
    pod = template["spec"]
    container = pod["containers"][0]
    container["env"] += [
        {"name": TOPOLOGY_CONFIGMAP_ENV, "value": topology_configmap_name(ref.name)},
        {"name": DESCRIBE_KEY_ENV, "value": describe_key(spec)},
    ]
    container["volumeMounts"] = [{"name": "scratch", "mountPath": SCRATCH_DIR}]
    pod["volumes"] = [{"name": "scratch", "emptyDir": {"sizeLimit": "64Mi"}}]
    pod["serviceAccountName"] = describe_service_account_name(ref.name)
    pod["automountServiceAccountToken"] = True
    job["metadata"].setdefault("annotations", {})[JOB_TEMPLATE_ANNOTATION] = stable_hash(template, 10)
    return job


def build_reset_job(spec: StreamAppSpec, ref: AppRef, generation: int) -> dict[str, Any]:
    """The `upgrade: reset` Job: `kappaflow reset` rewinds the group and deletes internal topics.

    Run while the StatefulSet is scaled to 0 (a reset with live members is refused by the broker);
    named per generation so a later reset is a new Job.
    """
    script = f'exec kappaflow reset "${ENTRY_POINT_ENV}" --config {CONFIG_DIR}/{CONFIG_FILE}'
    name = _job_name(ref.name, "reset", f"g{generation}")
    return _job(spec, ref, name, "reset", script, mount_config=True)
