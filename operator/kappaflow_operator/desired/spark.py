"""The SparkApplication for `upgrade: reprocess` (Spark operator, `sparkoperator.k8s.io/v1beta2`).

It runs `kappaflow reprocess <entry> --application-id <new id>` through spark-submit in cluster mode:
the image's launcher `/opt/kappaflow/reprocess.py` (runtime/kappaflow/spark_driver.py, copied there by
runtime/Dockerfile) calls the kappaflow CLI, so the Spark job executes exactly the topology the pods
will run. Its config file is rendered from the NEW spec under the new id, in a ConfigMap of its own
(`reprocess_configmap`): the app's ConfigMap still carries the running version's config. Outputs and
state are written for a *new* application id; the reconciler rolls the pods onto that id once the run
is COMPLETED, and a FAILED (or timed-out) run leaves the old version untouched.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from kappaflow_contract import config as keys
from kappaflow_contract.topics import is_internal_topic_name

from ..models import StreamAppSpec
from .common import APP_LABEL, CONFIG_DIR, CONFIG_FILE, AppRef, object_meta, stable_hash
from .config import render_properties, runtime_config
from .security import container_security_context, pod_security_context

SPARK_API_VERSION = "sparkoperator.k8s.io/v1beta2"
#: The label naming a SparkApplication's StreamApp (observe lists the app's runs by it). Not the app's
#: selector label (`APP_LABEL`): the Spark operator copies a SparkApplication's labels onto its driver
#: and executor pods, and the app's Service and PodDisruptionBudget select pods by APP_LABEL.
REPROCESS_OF_LABEL = "kappaflow.io/reprocess-of"
LAUNCHER = "local:///opt/kappaflow/reprocess.py"
SECRETS_DIR = "/etc/kappaflow/secrets"


def reprocess_application_id(spec: StreamAppSpec, spec_digest: str) -> str:
    """The application id a reprocess run writes: the declared id plus a short hash of the new spec.

    Deterministic, so a reconcile retried after a crash finds the run it already started.
    """
    return f"{spec.application_id}-r{spec_digest[:8]}"


def spark_application_name(ref: AppRef, spec_digest: str) -> str:
    suffix = f"-reprocess-{spec_digest[:8]}"
    return ref.name[: 63 - len(suffix)].rstrip("-.") + suffix


def reprocess_configmap_name(ref: AppRef, spec_digest: str) -> str:
    return f"{spark_application_name(ref, spec_digest)}-config"


def reprocess_configmap(
    spec: StreamAppSpec, ref: AppRef, *, spec_digest: str, new_application_id: str
) -> dict[str, Any]:
    """streams.properties for the Spark run: the new spec's config under the new application id."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(ref, reprocess_configmap_name(ref, spec_digest)),
        "data": {CONFIG_FILE: render_properties(runtime_config(spec, new_application_id))},
    }


def _credentials(spec: StreamAppSpec) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, str]]:
    """SASL env from Secrets, TLS Secrets mounted whole, and env overrides pointing ssl.* at them.

    spark-submit mounts a Secret as a directory of its keys (no per-key projection), so the file paths
    differ from the pods'; KAPPAFLOW_SSL_* env vars (in the pod templates) override the config file.
    """
    env_refs: dict[str, Any] = {}
    if spec.kafka.sasl is not None:
        env_refs[keys.env_key(keys.SASL_USERNAME)] = spec.kafka.sasl.username_secret_ref.to_wire()
        env_refs[keys.env_key(keys.SASL_PASSWORD)] = spec.kafka.sasl.password_secret_ref.to_wire()
    secrets: list[dict[str, Any]] = []
    env: dict[str, str] = {}
    tls = spec.kafka.tls
    if tls is not None:
        for key, ref in (
            (keys.SSL_CA_LOCATION, tls.ca_secret_ref),
            (keys.SSL_CERTIFICATE_LOCATION, tls.certificate_secret_ref),
            (keys.SSL_KEY_LOCATION, tls.key_secret_ref),
        ):
            if ref is None:
                continue
            path = f"{SECRETS_DIR}/{ref.name}"
            if all(s["name"] != ref.name for s in secrets):
                secrets.append({"name": ref.name, "path": path, "secretType": "Generic"})
            env[keys.env_key(key)] = f"{path}/{ref.key}"
    return env_refs, secrets, env


#: The container names Spark's Kubernetes backend looks for in a pod template (the Spark operator passes
#: them as spark.kubernetes.{driver,executor}.podTemplateContainerName).
DRIVER_CONTAINER = "spark-kubernetes-driver"
EXECUTOR_CONTAINER = "spark-kubernetes-executor"
CONFIG_VOLUME = "kappaflow-config"


def _pod_template(
    spec: StreamAppSpec, container: str, configmap: str, labels: dict[str, str], env: dict[str, str]
) -> dict[str, Any]:
    """The driver's or executors' pod template: security contexts, the run's config volume and env.

    Why a template and not the SparkApplication's `configMaps`/`securityContext`/`env` fields: those
    are applied by the Spark operator's mutating webhook, which many installs (and ours: controller
    only) do not run. A pod template (Spark >= 3, operator >= 2.1) is handed to spark-submit, and Spark
    itself builds the pods from it, so the pods pass PodSecurity `restricted` with or without a webhook.
    """
    body: dict[str, Any] = {
        "name": container,
        # PodSecurity `restricted`, as for the app's own pods (the Spark image runs as uid 1000 too).
        "securityContext": container_security_context(spec),
        "volumeMounts": [{"name": CONFIG_VOLUME, "mountPath": CONFIG_DIR, "readOnly": True}],
    }
    # The pods' own env (`podTemplate.env`) first: a topology may read it (topic names, flags), and
    # the Spark job must build the topology the pods will run. The credentials' paths follow.
    wire = [e.to_wire() for e in spec.pod_template.env]
    wire += [{"name": k, "value": v} for k, v in sorted(env.items())]
    if wire:
        body["env"] = wire
    pod: dict[str, Any] = {
        "securityContext": pod_security_context(spec),
        "volumes": [{"name": CONFIG_VOLUME, "configMap": {"name": configmap}}],
        "containers": [body],
    }
    return {"metadata": {"labels": dict(labels)}, "spec": pod}


def build_spark_application(
    spec: StreamAppSpec, ref: AppRef, *, spec_digest: str, new_application_id: str | None = None
) -> dict[str, Any]:
    """The SparkApplication manifest; `spec_digest` is `desired.common.spec_hash(spec)` of the new spec."""
    spark = spec.upgrade.spark
    app_id = new_application_id or reprocess_application_id(spec, spec_digest)
    env_refs, secrets, env = _credentials(spec)
    name = spark_application_name(ref, spec_digest)
    labels = {"kappaflow.io/reprocess": stable_hash(app_id, 8)}
    configmap = reprocess_configmap_name(ref, spec_digest)

    def role(container: str, cores: int, memory: str, core_request: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "cores": cores,
            "memory": memory,
            "labels": dict(labels),
            "template": _pod_template(spec, container, configmap, labels, env),
        }
        if core_request:
            body["coreRequest"] = core_request
        # Secret env and Secret volumes are spark-submit options (no webhook needed).
        if env_refs:
            body["envSecretKeyRefs"] = dict(env_refs)
        if secrets:
            body["secrets"] = [dict(s) for s in secrets]
        return body

    driver = role(DRIVER_CONTAINER, spark.driver.cores, spark.driver.memory, spark.driver.core_request)
    if spark.service_account_name:
        driver["serviceAccount"] = spark.service_account_name
    executor = role(
        EXECUTOR_CONTAINER, spark.executor.cores, spark.executor.memory, spark.executor.core_request
    )
    executor["instances"] = spark.executor.instances
    body: dict[str, Any] = {
        "type": "Python",
        "pythonVersion": "3",
        "mode": "cluster",
        "image": spark.image or spec.image,
        "mainApplicationFile": LAUNCHER,
        "arguments": [
            spec.entry_point,
            "--application-id",
            app_id,
            "--config",
            f"{CONFIG_DIR}/{CONFIG_FILE}",
        ],
        "sparkVersion": spark.spark_version,
        "restartPolicy": {"type": "Never"},
        "driver": driver,
        "executor": executor,
    }
    if spec.image_pull_policy is not None:
        body["imagePullPolicy"] = spec.image_pull_policy
    if spec.pod_template.image_pull_secrets:
        body["imagePullSecrets"] = list(spec.pod_template.image_pull_secrets)
    meta = object_meta(ref, name, labels)
    meta["labels"] = {k: v for k, v in meta["labels"].items() if k != APP_LABEL}
    meta["labels"][REPROCESS_OF_LABEL] = ref.name
    return {"apiVersion": SPARK_API_VERSION, "kind": "SparkApplication", "metadata": meta, "spec": body}


def spark_state(spark_application: dict[str, Any]) -> str | None:
    """`status.applicationState.state` (e.g. SUBMITTED, RUNNING, COMPLETED, FAILED), if reported yet."""
    state = (spark_application.get("status") or {}).get("applicationState", {}).get("state")
    return str(state) if state else None


def reprocess_resources(
    spec: StreamAppSpec, ref: AppRef, *, spec_digest: str, new_application_id: str
) -> list[dict[str, Any]]:
    """What a reprocess run needs, in apply order: its config (from the new spec), then the application."""
    return [
        reprocess_configmap(spec, ref, spec_digest=spec_digest, new_application_id=new_application_id),
        build_spark_application(spec, ref, spec_digest=spec_digest, new_application_id=new_application_id),
    ]


def reprocess_timed_out(spec: StreamAppSpec, started_at: datetime, now: datetime) -> bool:
    """Whether a run still Pending/Running at `now` exceeded `upgrade.spark.timeoutSeconds`.

    The reconcile core calls this on every pass of an unfinished run; True means: stop the
    SparkApplication, record the run Failed (reason ReprocessTimedOut) and keep the old application id,
    exactly as after a failed run.
    """
    return now - started_at >= timedelta(seconds=spec.upgrade.spark.timeout_seconds)


def previous_id_topics(
    previous_application_id: str, current_application_id: str, topics: list[str]
) -> list[str]:
    """The internal topics of the id a completed reprocess replaced, among `topics` (existing names).

    Only `<previous id>-...-changelog` / `-repartition` names, and never one that also starts with the
    current id (one id may be a prefix of the other: `wc` and `wc-r1234`).
    """
    prefix, current = f"{previous_application_id}-", f"{current_application_id}-"
    return sorted(
        t for t in topics if t.startswith(prefix) and not t.startswith(current) and is_internal_topic_name(t)
    )
