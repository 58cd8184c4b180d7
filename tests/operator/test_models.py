"""StreamApp spec validation: valid specs parse with defaults, invalid ones fail naming the field."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kappaflow_operator.models import RESERVED_CONFIG_KEYS, StreamAppSpec, StreamAppStatus

from .specs import SECURE_KAFKA, spec, spec_dict


def _error(data: dict) -> str:
    with pytest.raises(ValidationError) as info:
        StreamAppSpec.model_validate(data)
    return str(info.value)


def test_minimal_spec_gets_defaults():
    s = spec()
    assert s.replicas == 3
    assert s.processing_guarantee == "at_least_once"
    assert s.state.size == "1Gi"
    assert s.metrics.port == 9464
    assert s.upgrade.mode == "rolling"
    assert s.topic_cleanup_policy == "Retain"
    wire = s.to_wire()
    assert wire["entryPoint"] == "examples.wordcount:build_topology"
    assert wire["kafka"]["securityProtocol"] == "PLAINTEXT"


def test_wire_form_round_trips():
    s = spec(kafka=SECURE_KAFKA, autoscaling={"enabled": True, "minReplicas": 2, "maxReplicas": 6})
    assert StreamAppSpec.model_validate(s.to_wire()) == s


def test_quantities_accept_numbers_like_kubernetes():
    s = spec(resources={"requests": {"cpu": 1, "memory": "512Mi"}, "limits": {"cpu": "1500m"}})
    assert s.resources.requests == {"cpu": "1", "memory": "512Mi"}
    assert "resources.requests.memory" in _error(spec_dict(resources={"requests": {"memory": "lots"}}))
    assert "state.size" in _error(spec_dict(state={"size": "10 GB"}))


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"entryPoint": "examples.wordcount"}, "entryPoint"),
        ({"entryPoint": "examples/wordcount:build"}, "entryPoint"),
        ({"applicationId": "word count"}, "applicationId"),
        ({"replicas": -1}, "replicas"),
        ({"standbyReplicas": 11}, "standbyReplicas"),
        ({"processingGuarantee": "exactly_once"}, "processingGuarantee"),
        ({"kafka": {"bootstrapServers": "kafka"}}, "kafka.bootstrapServers"),
        ({"interactiveQueries": {"enabled": True, "port": 70000}}, "interactiveQueries.port"),
        ({"upgrade": {"mode": "blue-green"}}, "upgrade.mode"),
        ({"topicCleanupPolicy": "Orphan"}, "topicCleanupPolicy"),
        ({"upgrade": {"spark": {"driver": {"memory": "1Gi"}}}}, "upgrade.spark.driver.memory"),
        ({"imag": "typo"}, "imag"),
    ],
)
def test_invalid_field_is_named(overrides, field):
    assert field in _error(spec_dict(**overrides))


def test_autoscaling_min_must_not_exceed_max():
    message = _error(spec_dict(autoscaling={"enabled": True, "minReplicas": 5, "maxReplicas": 2}))
    assert "minReplicas (5) must be <= maxReplicas (2)" in message


@pytest.mark.parametrize("key", ["application.id", "bootstrap.servers", "group.instance.id", "state.dir"])
def test_operator_owned_config_keys_are_refused(key):
    message = _error(spec_dict(config={key: "x"}))
    assert f"config key '{key}' is managed by the operator" in message
    assert RESERVED_CONFIG_KEYS[key] in message


def test_credentials_in_config_are_refused():
    assert "looks like a credential" in _error(spec_dict(config={"ssl.truststore.password": "hunter2"}))
    assert spec(config={"commit.interval.ms": "100"}).config == {"commit.interval.ms": "100"}


def test_sasl_requires_matching_protocol():
    assert "kafka.sasl is required" in _error(
        spec_dict(kafka={"bootstrapServers": "k:9092", "securityProtocol": "SASL_SSL"})
    )
    no_sasl = dict(SECURE_KAFKA, securityProtocol="SSL")
    assert "kafka.sasl needs securityProtocol" in _error(spec_dict(kafka=no_sasl))
    plain_tls = {"bootstrapServers": "k:9092", "tls": {"caSecretRef": {"name": "ca", "key": "ca.crt"}}}
    assert "kafka.tls needs securityProtocol" in _error(spec_dict(kafka=plain_tls))


def test_mutual_tls_needs_both_halves():
    kafka = {
        "bootstrapServers": "k:9093",
        "securityProtocol": "SSL",
        "tls": {"certificateSecretRef": {"name": "c", "key": "tls.crt"}},
    }
    assert "must be set together" in _error(spec_dict(kafka=kafka))


def test_secrets_are_references_only():
    kafka = dict(SECURE_KAFKA)
    kafka["sasl"] = dict(kafka["sasl"], password="inline")
    assert "kafka.sasl.password" in _error(spec_dict(kafka=kafka))


def test_pod_template_guards_operator_owned_env_and_volumes():
    env = [{"name": "KAPPAFLOW_APPLICATION_ID", "value": "other"}]
    assert "KAPPAFLOW_APPLICATION_ID is set by the operator" in _error(spec_dict(podTemplate={"env": env}))
    clash = [{"name": "state", "mountPath": "/data", "emptyDir": {}}]
    assert "used by the operator" in _error(spec_dict(podTemplate={"extraVolumes": clash}))
    overlap = [{"name": "x", "mountPath": "/var/lib/kappaflow/state/x", "emptyDir": {}}]
    assert "overlaps /var/lib/kappaflow" in _error(spec_dict(podTemplate={"extraVolumes": overlap}))
    two = [{"name": "x", "mountPath": "/x", "emptyDir": {}, "secret": {"secretName": "s"}}]
    assert "exactly one of secret" in _error(spec_dict(podTemplate={"extraVolumes": two}))
    dup = [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]
    assert "duplicate env names: A" in _error(spec_dict(podTemplate={"env": dup}))


def test_ports_must_differ():
    message = _error(spec_dict(interactiveQueries={"enabled": True, "port": 9464}))
    assert "interactiveQueries.port and metrics.port are both 9464" in message


def test_status_round_trips_with_camel_case():
    raw = {
        "observedGeneration": 3,
        "phase": "Running",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "AllReplicasReady",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
        "replicas": 2,
        "readyReplicas": 2,
        "selector": "kappaflow.io/streamapp=wc",
        "autoscaler": {"desiredReplicas": 2},
        "kopf": {"progress": {}},
    }
    status = StreamAppStatus.model_validate(raw)
    assert status.ready_replicas == 2
    assert status.to_wire()["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
