"""Spec fixtures as plain dicts (what `kubectl apply` sends), shared by the operator unit tests."""

from __future__ import annotations

import copy
from typing import Any

from kappaflow_operator.desired import AppRef
from kappaflow_operator.models import StreamAppSpec

REF = AppRef(name="wordcount", namespace="apps", uid="0b7c6c1e-1111-2222-3333-444455556666")

BASE: dict[str, Any] = {
    "image": "registry.example/wordcount:1.0.0",
    "entryPoint": "examples.wordcount:build_topology",
    "applicationId": "wordcount",
    "replicas": 3,
    "kafka": {"bootstrapServers": "kafka-0.kafka:9092,kafka-1.kafka:9092"},
}


def spec_dict(**overrides: Any) -> dict[str, Any]:
    """BASE with top-level keys replaced (deep-copied, so tests never share state)."""
    data = copy.deepcopy(BASE)
    data.update(copy.deepcopy(overrides))
    return data


def spec(**overrides: Any) -> StreamAppSpec:
    return StreamAppSpec.model_validate(spec_dict(**overrides))


SECURE_KAFKA: dict[str, Any] = {
    "bootstrapServers": "kafka:9093",
    "securityProtocol": "SASL_SSL",
    "sasl": {
        "mechanism": "SCRAM-SHA-512",
        "usernameSecretRef": {"name": "kafka-user", "key": "username"},
        "passwordSecretRef": {"name": "kafka-user", "key": "password"},
    },
    "tls": {
        "caSecretRef": {"name": "kafka-ca", "key": "ca.crt"},
        "certificateSecretRef": {"name": "kafka-client", "key": "tls.crt"},
        "keySecretRef": {"name": "kafka-client", "key": "tls.key"},
    },
}
