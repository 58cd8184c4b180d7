"""Every config key and `KAPPAFLOW_*` variable the operator hands to a pod is one the runtime honours.

The runtime refuses unknown keys at start-up (a typo must not pass), so a key the operator writes that
the runtime does not know would crash every pod: checked here for every spec of the operator tests and
the example manifests, through the real file and environment of the pods, jobs and Spark runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kappaflow.api.config import StreamsConfig, check_key
from kappaflow_contract import config as keys
from kappaflow_contract.properties import loads
from kappaflow_operator.desired import (
    Facts,
    build_describe_job,
    build_reset_job,
    build_spark_application,
    desired_resources,
    runtime_config,
)
from kappaflow_operator.desired.common import CONFIG_FILE
from kappaflow_operator.desired.spark import reprocess_configmap
from kappaflow_operator.models import RESERVED_CONFIG_KEYS, StreamAppSpec
from tests.operator.specs import REF, SECURE_KAFKA, spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "k8s"


def _example_specs() -> list[tuple[str, StreamAppSpec]]:
    out = []
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "StreamApp":
                out.append((path.name, StreamAppSpec.model_validate(doc["spec"])))
    return out


TLS_CA_ONLY = {
    "bootstrapServers": "k:9093",
    "securityProtocol": "SSL",
    "tls": {"caSecretRef": {"name": "c", "key": "k"}},
}
SPECS: list[tuple[str, StreamAppSpec]] = [
    ("base", spec()),
    ("secure", spec(kafka=SECURE_KAFKA)),
    ("tls-ca-only", spec(kafka=TLS_CA_ONLY)),
    ("eos-standby-threads", spec(processingGuarantee="exactly_once_v2", standbyReplicas=2, streamThreads=4)),
    ("queries", spec(interactiveQueries={"enabled": True, "port": 8080})),
    ("user-config", spec(config={"commit.interval.ms": "250", "consumer.fetch.min.bytes": "1"})),
    *_example_specs(),
]
IDS = [name for name, _ in SPECS]
PLACEHOLDERS = {"fieldRef": "wordcount-0", "secretKeyRef": "secret"}


def _env(entries: list[dict[str, Any]]) -> dict[str, str]:
    """A container's env as the pod sees it: literal values, and stand-ins for valueFrom."""
    out: dict[str, str] = {}
    for entry in entries:
        if "value" in entry:
            out[entry["name"]] = entry["value"].replace("$(POD_NAME)", "wordcount-0")
        else:
            out[entry["name"]] = PLACEHOLDERS[next(iter(entry["valueFrom"]))]
    return out


def _kappaflow_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(keys.ENV_PREFIX)}


def test_spec_cases_include_the_examples() -> None:
    assert "wordcount-streamapp.yaml" in IDS


@pytest.mark.parametrize("app", [s for _, s in SPECS], ids=IDS)
def test_every_key_the_operator_writes_is_accepted_by_the_runtime(app: StreamAppSpec) -> None:
    config = runtime_config(app)
    for key, value in config.items():
        check_key(key, value)
    # the whole file, as the pods read it: keys known, values of the right type
    configmap = desired_resources(app, REF, Facts(1))[0]
    StreamsConfig.load(environ={}, values=loads(configmap["data"][CONFIG_FILE]))


@pytest.mark.parametrize("app", [s for _, s in SPECS], ids=IDS)
def test_pods_start_from_the_operators_file_and_environment(app: StreamAppSpec, tmp_path: Path) -> None:
    resources = desired_resources(app, REF, Facts(replicas=2))
    configmap = next(r for r in resources if r["kind"] == "ConfigMap")
    sts = next(r for r in resources if r["kind"] == "StatefulSet")
    path = tmp_path / CONFIG_FILE
    path.write_text(configmap["data"][CONFIG_FILE], encoding="utf-8")
    env = _env(sts["spec"]["template"]["spec"]["containers"][0]["env"])
    config = StreamsConfig.load(file=path, environ=env)
    assert config.application_id == app.application_id
    assert config.get_str(keys.GROUP_INSTANCE_ID) == "wordcount-0"
    if app.interactive_queries.enabled:
        assert config.get_str(keys.APPLICATION_SERVER).startswith("wordcount-0.")


@pytest.mark.parametrize("app", [s for _, s in SPECS], ids=IDS)
def test_jobs_and_spark_runs_get_only_variables_the_runtime_accepts(
    app: StreamAppSpec, tmp_path: Path
) -> None:
    """Every `KAPPAFLOW_*` variable is configuration the runtime accepts or a tooling variable it skips."""
    digest = "0" * 16
    containers = [
        build_describe_job(app, REF)["spec"]["template"]["spec"]["containers"][0],
        build_reset_job(app, REF, 1)["spec"]["template"]["spec"]["containers"][0],
    ]
    spark = build_spark_application(app, REF, spec_digest=digest)["spec"]
    properties = reprocess_configmap(app, REF, spec_digest=digest, new_application_id="wc-r1")["data"][
        CONFIG_FILE
    ]
    path = tmp_path / CONFIG_FILE
    path.write_text(properties, encoding="utf-8")
    envs = [_kappaflow_env(_env(c["env"])) for c in containers]
    for role in (spark["driver"], spark["executor"]):
        env = {e["name"]: e["value"] for e in role.get("env", [])}
        env.update({name: "secret" for name in role.get("envSecretKeyRefs", {})})
        envs.append(env)
    for env in envs:
        for name in env:
            assert name.startswith(keys.ENV_PREFIX), name
        StreamsConfig.load(file=path, environ=env)  # raises ConfigError naming an unknown key


def test_every_key_the_operator_reserves_is_a_runtime_key() -> None:
    """spec.config refuses these because the operator sets them: each must mean something to the runtime."""
    for key in RESERVED_CONFIG_KEYS:
        check_key(key, None)


def test_env_key_is_the_runtimes_mapping() -> None:
    values = runtime_config(spec(kafka=SECURE_KAFKA, streamThreads=2))  # a valid value of each type
    for key in RESERVED_CONFIG_KEYS:
        value = values.get(key, "x")
        config = StreamsConfig.load({"application.id": "a"}, environ={keys.env_key(key): value})
        assert config.as_dict()[key] == value
    assert keys.env_key("bootstrap.servers") == "KAPPAFLOW_BOOTSTRAP_SERVERS"
    assert keys.env_key("consumer.fetch-min.bytes") == "KAPPAFLOW_CONSUMER_FETCH_MIN_BYTES"
