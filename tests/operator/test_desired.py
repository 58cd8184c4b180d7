"""Desired-state builders: plain dicts in, manifests out."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from kappaflow_operator.desired import (
    Facts,
    build_configmap,
    build_describe_job,
    build_pdb,
    build_query_service,
    build_reset_job,
    build_spark_application,
    build_statefulset,
    config_hash,
    desired_resources,
    job_outdated,
    obsolete_resources,
    render_properties,
    runtime_config,
    spec_hash,
)
from kappaflow_operator.desired.spark import spark_state
from kappaflow_operator.models import StreamAppSpec

from .specs import REF, SECURE_KAFKA, spec


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def _env(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container["env"]}


def test_every_resource_is_owned_and_labelled():
    resources = desired_resources(spec(interactiveQueries={"enabled": True}), REF, Facts(replicas=3))
    kinds = [r["kind"] for r in resources]
    assert kinds == ["ConfigMap", "Service", "Service", "PodDisruptionBudget", "StatefulSet"]
    for r in resources:
        meta = r["metadata"]
        assert meta["namespace"] == "apps"
        owner = meta["ownerReferences"][0]
        assert owner == {
            "apiVersion": "kappaflow.io/v1alpha1",
            "kind": "StreamApp",
            "name": "wordcount",
            "uid": REF.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
        assert meta["labels"]["kappaflow.io/streamapp"] == "wordcount"


def test_builders_are_deterministic():
    s = spec(config={"commit.interval.ms": "100", "a.b": "c"})
    assert desired_resources(s, REF, Facts(replicas=2)) == desired_resources(s, REF, Facts(replicas=2))


def test_configmap_holds_operator_and_user_config():
    s = spec(config={"commit.interval.ms": "250"}, processingGuarantee="exactly_once_v2", standbyReplicas=1)
    props = _props(build_configmap(s, REF)["data"]["streams.properties"])
    assert props["application.id"] == "wordcount"
    assert props["bootstrap.servers"] == "kafka-0.kafka:9092,kafka-1.kafka:9092"
    assert props["kappaflow.internal.topics.create"] == "false"
    assert props["state.dir"] == "/var/lib/kappaflow/state"
    assert props["processing.guarantee"] == "exactly_once_v2"
    assert props["num.standby.replicas"] == "1"
    assert props["commit.interval.ms"] == "250"
    assert "group.instance.id" not in props  # per pod, from the downward API
    assert _props(build_configmap(s, REF, "wordcount-r1234")["data"]["streams.properties"])[
        "application.id"
    ] == ("wordcount-r1234")


def test_properties_escaping():
    text = render_properties({"a key": "x=y", "k": " lead\nnext\\"})
    assert "a\\ key=x=y" in text
    assert "k=\\ lead\\nnext\\\\" in text


def test_secure_kafka_never_puts_secrets_in_config():
    s = spec(kafka=SECURE_KAFKA)
    config = runtime_config(s)
    assert config["security.protocol"] == "SASL_SSL"
    assert config["ssl.ca.location"] == "/etc/kappaflow/tls/ca.crt"
    assert not any("password" in k or "username" in k for k in config)
    sts = build_statefulset(s, REF, replicas=1, config_hash="h")
    pod = sts["spec"]["template"]["spec"]
    env = _env(pod["containers"][0])
    assert env["KAPPAFLOW_SASL_PASSWORD"]["valueFrom"] == {
        "secretKeyRef": {"name": "kafka-user", "key": "password"}
    }
    tls = next(v for v in pod["volumes"] if v["name"] == "kafka-tls")
    paths = [s["secret"]["items"][0]["path"] for s in tls["projected"]["sources"]]
    assert paths == ["ca.crt", "tls.crt", "tls.key"]
    assert {"name": "kafka-tls", "mountPath": "/etc/kappaflow/tls", "readOnly": True} in pod["containers"][0][
        "volumeMounts"
    ]


def test_statefulset_shape():
    s = spec(
        interactiveQueries={"enabled": True, "port": 8080},
        state={"storageClassName": "fast", "size": "5Gi"},
        resources={"requests": {"cpu": "500m"}},
        podTemplate={
            "labels": {"team": "data"},
            "annotations": {"a": "b"},
            "nodeSelector": {"pool": "streams"},
            "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
            "serviceAccountName": "wc",
            "env": [{"name": "LOG_LEVEL", "value": "debug"}],
            "extraVolumes": [
                {"name": "lookup", "mountPath": "/data/lookup", "configMap": {"name": "lookup"}}
            ],
            "terminationGracePeriodSeconds": 90,
        },
    )
    sts = build_statefulset(s, REF, replicas=4, config_hash="abc123")
    body = sts["spec"]
    assert body["replicas"] == 4
    assert body["serviceName"] == "wordcount-headless"
    assert body["podManagementPolicy"] == "Parallel"
    assert body["updateStrategy"]["type"] == "RollingUpdate"
    assert body["selector"] == {"matchLabels": {"kappaflow.io/streamapp": "wordcount"}}
    claim = body["volumeClaimTemplates"][0]
    assert claim["metadata"]["name"] == "state"
    assert claim["spec"]["storageClassName"] == "fast"
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"
    template = body["template"]
    assert template["metadata"]["annotations"]["kappaflow.io/config-hash"] == "abc123"
    assert template["metadata"]["labels"]["team"] == "data"
    pod = template["spec"]
    assert pod["terminationGracePeriodSeconds"] == 90
    assert pod["serviceAccountName"] == "wc"
    assert pod["nodeSelector"] == {"pool": "streams"}
    container = pod["containers"][0]
    assert container["args"] == [
        "run",
        "examples.wordcount:build_topology",
        "--config",
        "/etc/kappaflow/streams.properties",
    ]
    env = _env(container)
    assert env["KAPPAFLOW_GROUP_INSTANCE_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    names = [e["name"] for e in container["env"]]
    assert names.index("POD_NAME") < names.index("KAPPAFLOW_APPLICATION_SERVER")  # $(POD_NAME) expands
    assert env["KAPPAFLOW_APPLICATION_SERVER"]["value"] == "$(POD_NAME).wordcount-headless.apps.svc:8080"
    assert env["LOG_LEVEL"]["value"] == "debug"
    assert container["readinessProbe"]["httpGet"] == {"path": "/health/ready", "port": "metrics"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/health/live", "port": "metrics"}
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"metrics": 9464, "query": 8080}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts == {
        "state": "/var/lib/kappaflow/state",
        "config": "/etc/kappaflow",
        "lookup": "/data/lookup",
    }
    assert container["resources"] == {"requests": {"cpu": "500m"}}


def test_config_change_changes_pod_template_hash():
    a, b = spec(), spec(config={"commit.interval.ms": "100"})
    ha, hb = config_hash(build_configmap(a, REF)), config_hash(build_configmap(b, REF))
    assert ha != hb
    assert (
        desired_resources(a, REF, Facts(1))[-1]["spec"]["template"]["metadata"]["annotations"][
            "kappaflow.io/config-hash"
        ]
        == ha
    )


def test_services_and_pdb():
    s = spec(interactiveQueries={"enabled": True, "port": 8081})
    headless, query = desired_resources(s, REF, Facts(1))[1:3]
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert {p["name"] for p in headless["spec"]["ports"]} == {"metrics", "query"}
    assert query["metadata"]["name"] == "wordcount-query"
    assert query["spec"]["ports"] == [
        {"name": "query", "port": 8081, "targetPort": "query", "protocol": "TCP"}
    ]
    assert build_pdb(s, REF)["spec"]["maxUnavailable"] == 1
    off = spec()
    assert build_query_service(off, REF) is None
    assert obsolete_resources(off, REF) == [("v1", "Service", "wordcount-query")]
    assert obsolete_resources(s, REF) == []


def test_describe_job_is_named_by_image_and_entry_point():
    job = build_describe_job(spec(), REF)
    assert job["metadata"]["name"].startswith("wordcount-describe-")
    assert len(job["metadata"]["name"]) <= 63
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example/wordcount:1.0.0"
    assert "kappaflow describe" in container["command"][2] and "--json" in container["command"][2]
    assert "kappaflow_operator.topology_publish" in container["command"][2]  # not the 4 KiB message
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"  # failures still reported
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == "wordcount-describe"
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    same = build_describe_job(spec(replicas=9, config={"x.y": "z"}), REF)
    other = build_describe_job(spec(image="registry.example/wordcount:2.0.0"), REF)
    assert same["metadata"]["name"] == job["metadata"]["name"]
    assert other["metadata"]["name"] != job["metadata"]["name"]


def test_reset_job_gets_kafka_credentials():
    job = build_reset_job(spec(kafka=SECURE_KAFKA), REF, generation=7)
    assert job["metadata"]["name"] == "wordcount-reset-g7"
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert "kappaflow reset" in container["command"][2]
    assert "KAPPAFLOW_SASL_PASSWORD" in _env(container)
    assert {v["name"] for v in pod["volumes"]} == {"config", "kafka-tls"}


def test_spark_application_for_reprocess():
    s = spec(
        kafka=SECURE_KAFKA,
        upgrade={"mode": "reprocess", "spark": {"executor": {"instances": 4, "memory": "4g"}}},
    )
    digest = spec_hash(s)
    app = build_spark_application(s, REF, spec_digest=digest)
    assert app["apiVersion"] == "sparkoperator.k8s.io/v1beta2"
    body = app["spec"]
    assert body["type"] == "Python"
    assert body["restartPolicy"] == {"type": "Never"}
    assert body["image"] == s.image
    new_id = f"wordcount-r{digest[:8]}"
    assert body["arguments"][:3] == ["examples.wordcount:build_topology", "--application-id", new_id]
    assert body["executor"]["instances"] == 4 and body["executor"]["memory"] == "4g"
    assert body["driver"]["envSecretKeyRefs"]["KAPPAFLOW_SASL_PASSWORD"] == {
        "name": "kafka-user",
        "key": "password",
    }
    for role in ("driver", "executor"):
        (container,) = body[role]["template"]["spec"]["containers"]
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["KAPPAFLOW_SSL_CA_LOCATION"] == "/etc/kappaflow/secrets/kafka-ca/ca.crt"
        mounted = {"name": "kafka-ca", "path": "/etc/kappaflow/secrets/kafka-ca", "secretType": "Generic"}
        assert mounted in body[role]["secrets"]
    assert app["metadata"]["ownerReferences"][0]["uid"] == REF.uid
    assert spark_state(app) is None
    assert spark_state({"status": {"applicationState": {"state": "COMPLETED"}}}) == "COMPLETED"


def _container(s: StreamAppSpec) -> dict[str, Any]:
    sts = build_statefulset(s, REF, replicas=1, config_hash="h")
    container: dict[str, Any] = sts["spec"]["template"]["spec"]["containers"][0]
    return container


def test_stream_threads_render_config_and_resources():
    # default: one worker, the runtime's default (not rendered: an operator upgrade restarts no pod), and
    # nothing added to the resources the user gave (none here)
    assert "num.stream.threads" not in _props(build_configmap(spec(), REF)["data"]["streams.properties"])
    assert "resources" not in _container(spec())
    # N workers: num.stream.threads=N and one cpu requested per worker when no cpu is given
    four = spec(streamThreads=4, resources={"requests": {"memory": "1Gi"}, "limits": {"memory": "2Gi"}})
    assert _props(build_configmap(four, REF)["data"]["streams.properties"])["num.stream.threads"] == "4"
    assert _container(four)["resources"] == {
        "requests": {"memory": "1Gi", "cpu": "4"},
        "limits": {"memory": "2Gi"},
    }
    # resources are per pod: a cpu the user gave (request or limit alone) is kept as given
    given = spec(streamThreads=4, resources={"requests": {"cpu": "1500m"}})
    assert _container(given)["resources"] == {"requests": {"cpu": "1500m"}}
    limited = spec(streamThreads=2, resources={"limits": {"cpu": "3"}})
    assert _container(limited)["resources"] == {"limits": {"cpu": "3"}}


def test_stream_threads_validated_and_reserved():
    with pytest.raises(ValidationError, match="stream_threads|streamThreads"):
        spec(streamThreads=0)
    with pytest.raises(ValidationError, match="spec.streamThreads"):
        spec(config={"num.stream.threads": "2"})


def test_a_describe_job_from_another_pod_template_is_replaced_unless_it_succeeded():
    live = build_describe_job(spec(), REF)
    assert not job_outdated(live, build_describe_job(spec(replicas=9), REF)), "same template: keep"
    want = build_describe_job(spec(podTemplate={"nodeSelector": {"disk": "ssd"}}), REF)
    assert want["metadata"]["name"] == live["metadata"]["name"], "same name: the old Job must go first"
    assert job_outdated(live, want)
    assert job_outdated({"metadata": {"name": "old"}}, want), "a Job of an older operator (no hash)"
    done = {**live, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    assert not job_outdated(done, want), "a Job that succeeded published what counts"


def test_describe_job_sees_the_pods_env_and_is_renamed_when_it_changes():
    """A topology may read its topic names from the env (examples/wordcount.py does): the description
    must be of the topology the pods build, so the Job gets their env and a new env is a new Job."""
    plain = build_describe_job(spec(), REF)
    with_env = build_describe_job(spec(podTemplate={"env": [{"name": "WORDCOUNT_INPUT", "value": "x"}]}), REF)
    other_env = build_describe_job(
        spec(podTemplate={"env": [{"name": "WORDCOUNT_INPUT", "value": "y"}]}), REF
    )
    (container,) = with_env["spec"]["template"]["spec"]["containers"]
    assert {"name": "WORDCOUNT_INPUT", "value": "x"} in container["env"]
    names = {job["metadata"]["name"] for job in (plain, with_env, other_env)}
    assert len(names) == 3
    assert plain["metadata"]["name"] == build_describe_job(spec(replicas=5), REF)["metadata"]["name"]


def test_replication_factor_reaches_the_pods_config_only_when_set():
    """The spec's kafka.replicationFactor is the runtime's `replication.factor`; the default (-1, the
    broker's) adds no key, so existing apps keep their config hash and are not rolled."""
    assert (
        runtime_config(spec(kafka={"bootstrapServers": "kafka:9092", "replicationFactor": 3}))[
            "replication.factor"
        ]
        == "3"
    )
    assert "replication.factor" not in runtime_config(spec(kafka={"bootstrapServers": "kafka:9092"}))
