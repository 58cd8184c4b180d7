"""The topology channel's objects and its reading, both pure.

The describe Job publishes `kappaflow describe --json` into the ConfigMap `<app>-topology` (see
`kappaflow_operator.topology_publish`). Least privilege: the Job runs as its own ServiceAccount
`<app>-describe`, bound to a Role that may `get` and `patch` exactly that ConfigMap (a resourceName rule
cannot grant `create`, so the operator creates the ConfigMap first). All four objects are owned by the
StreamApp and go with it.

The ConfigMap records which image and entry point it describes (`describe-key` next to the JSON), so a
description of an older image is never mistaken for the current one, and the operator applies only the
ConfigMap's metadata, never its data (server-side apply leaves the Job's fields alone).
"""

from __future__ import annotations

from typing import Any

from ..models import StreamAppSpec, TopologyDescription
from .common import (
    ACCEPTED_DESCRIBE_KEY,
    DESCRIBE_KEY_FIELD,
    TOPOLOGY_KEY,
    AppRef,
    describe_service_account_name,
    object_meta,
    topology_configmap_name,
)
from .jobs import describe_key


def describe_access(spec: StreamAppSpec, ref: AppRef) -> list[dict[str, Any]]:
    """ServiceAccount, Role, RoleBinding and the (empty) topology ConfigMap, in apply order."""
    del spec  # the same objects serve every image; kept for a uniform builder signature
    account = describe_service_account_name(ref.name)
    configmap = topology_configmap_name(ref.name)
    rbac = "rbac.authorization.k8s.io"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": object_meta(ref, account)},
        {
            "apiVersion": f"{rbac}/v1",
            "kind": "Role",
            "metadata": object_meta(ref, account),
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "resourceNames": [configmap],
                    "verbs": ["get", "patch"],
                }
            ],
        },
        {
            "apiVersion": f"{rbac}/v1",
            "kind": "RoleBinding",
            "metadata": object_meta(ref, account),
            "roleRef": {"apiGroup": rbac, "kind": "Role", "name": account},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ref.namespace}],
        },
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": object_meta(ref, configmap)},
    ]


def published_topology(spec: StreamAppSpec, configmap: dict[str, Any] | None) -> TopologyDescription | None:
    """The description published for this spec's image and entry point; None when not (yet) there.

    Raises ValueError (pydantic's ValidationError is one) when the published JSON is not a topology.
    """
    data = (configmap or {}).get("data") or {}
    key = describe_key(spec)
    accepted = ((configmap or {}).get("metadata", {}).get("annotations") or {}).get(ACCEPTED_DESCRIBE_KEY)
    # Written by an operator that still wrote the ConfigMap itself: the annotation alone names the key.
    legacy = DESCRIBE_KEY_FIELD not in data and accepted == key
    if TOPOLOGY_KEY not in data or (data.get(DESCRIBE_KEY_FIELD) != key and not legacy):
        return None
    return TopologyDescription.parse(data[TOPOLOGY_KEY])
