"""One-shot Jobs the operator runs with the application's own image: `describe` and `reset`.

`describe` is how the operator learns the topology without importing user code: the Job prints
`kappaflow describe <entry> --json` into the container's termination message, which the operator reads
from the Pod's status (`state.terminated.message`). The termination message, rather than pod logs,
because it is part of the Pod object (no log access, no kubelet proxy needed, works with a stand-in
kubelet in tests); it is capped at 4 KiB, so the describe output is written compact.
"""

from __future__ import annotations

from typing import Any

from ..models import StreamAppSpec
from .common import CONFIG_DIR, CONFIG_FILE, CONTAINER_NAME, AppRef, configmap_name, object_meta, stable_hash
from .security import container_security_context, pod_security_context
from .statefulset import TLS_MOUNT, sasl_env, tls_volume

DESCRIBE_JOB_LABEL = "kappaflow.io/job"
TERMINATION_LOG = "/dev/termination-log"
_MAX_NAME = 63  # Job names become a pod label value


def _job_name(app: str, kind: str, digest: str) -> str:
    suffix = f"-{kind}-{digest}"
    return app[: _MAX_NAME - len(suffix)].rstrip("-.") + suffix


def describe_key(spec: StreamAppSpec) -> str:
    """What a topology description depends on: the image and the entry point (not config, not replicas)."""
    return stable_hash({"image": spec.image, "entryPoint": spec.entry_point}, 8)


def describe_job_name(spec: StreamAppSpec, ref: AppRef) -> str:
    return _job_name(ref.name, "describe", describe_key(spec))


def _job(
    spec: StreamAppSpec, ref: AppRef, name: str, kind: str, script: str, *, mount_config: bool
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": spec.image,
        "command": ["/bin/sh", "-c", script],
        "env": [{"name": "KAPPAFLOW_ENTRY_POINT", "value": spec.entry_point}],
        "terminationMessagePolicy": "File",
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
    """The Job printing the topology JSON for this spec's image and entry point."""
    # Written to the termination log (read back by the operator) and echoed to stdout (for humans).
    script = (
        f'kappaflow describe "$KAPPAFLOW_ENTRY_POINT" --json > {TERMINATION_LOG} && cat {TERMINATION_LOG}'
    )
    return _job(spec, ref, describe_job_name(spec, ref), "describe", script, mount_config=False)


def build_reset_job(spec: StreamAppSpec, ref: AppRef, generation: int) -> dict[str, Any]:
    """The `upgrade: reset` Job: `kappaflow reset` rewinds the group and deletes internal topics.

    Run while the StatefulSet is scaled to 0 (a reset with live members is refused by the broker);
    named per generation so a later reset is a new Job.
    """
    script = f'exec kappaflow reset "$KAPPAFLOW_ENTRY_POINT" --config {CONFIG_DIR}/{CONFIG_FILE}'
    name = _job_name(ref.name, "reset", f"g{generation}")
    return _job(spec, ref, name, "reset", script, mount_config=True)
