"""Names, labels, owner references and hashes shared by every desired-state builder.

All builders are pure: `(spec, AppRef, facts) -> manifest dict`, no API calls, no clock, so the same
inputs always yield byte-identical manifests (the reconciler relies on that to apply idempotently).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from ..models import API_VERSION, KIND, StreamAppSpec

MANAGED_BY = "kappaflow-operator"
APP_LABEL = "kappaflow.io/streamapp"
CONFIG_HASH_ANNOTATION = "kappaflow.io/config-hash"
SPEC_HASH_ANNOTATION = "kappaflow.io/spec-hash"
STATE_DIR = "/var/lib/kappaflow/state"
CONFIG_DIR = "/etc/kappaflow"
CONFIG_FILE = "streams.properties"
TLS_DIR = "/etc/kappaflow/tls"
CONTAINER_NAME = "kappaflow"
#: Keys of the topology ConfigMap: the describe JSON, and which image + entry point it describes.
TOPOLOGY_KEY = "topology.json"
DESCRIBE_KEY_FIELD = "describe-key"
#: Annotation on the topology ConfigMap: the describe key whose description the operator accepted.
ACCEPTED_DESCRIBE_KEY = "kappaflow.io/describe-key"


@dataclass(frozen=True)
class AppRef:
    """Identity of the StreamApp object a manifest belongs to (for names and owner references)."""

    name: str
    namespace: str
    uid: str


def headless_service_name(name: str) -> str:
    return f"{name}-headless"


def query_service_name(name: str) -> str:
    return f"{name}-query"


def configmap_name(name: str) -> str:
    return f"{name}-config"


def topology_configmap_name(name: str) -> str:
    """The ConfigMap the describe Job publishes the topology into (and the operator caches it in)."""
    return f"{name}-topology"


def describe_service_account_name(name: str) -> str:
    """The describe Job's own service account: it may patch the topology ConfigMap and nothing else."""
    return f"{name}-describe"


def selector_labels(name: str) -> dict[str, str]:
    """The immutable StatefulSet/PDB/Service selector: one label, so it never has to change."""
    return {APP_LABEL: name}


def selector_string(name: str) -> str:
    """`status.selector` for the scale subresource (kubectl scale / HPA read it)."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector_labels(name).items()))


def common_labels(name: str) -> dict[str, str]:
    return {
        **selector_labels(name),
        "app.kubernetes.io/name": "kappaflow-app",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/part-of": "kappaflow",
    }


def owner_reference(ref: AppRef) -> dict[str, Any]:
    """Controller owner reference: deleting the StreamApp garbage-collects everything it made."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": ref.name,
        "uid": ref.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def object_meta(ref: AppRef, name: str, extra_labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": ref.namespace,
        "labels": {**(extra_labels or {}), **common_labels(ref.name)},
        "ownerReferences": [owner_reference(ref)],
    }


def stable_hash(value: Any, length: int = 16) -> str:
    """A content hash independent of dict ordering (json with sorted keys)."""
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:length]


def spec_hash(spec: StreamAppSpec) -> str:
    """Hash of the whole spec in its wire form: what `lastStableSpec.hash` records."""
    return stable_hash(spec.to_wire())
