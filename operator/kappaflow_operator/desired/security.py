"""Pod hardening shared by every pod the operator makes: StatefulSet pods, describe/reset Jobs, sidecars.

The defaults pass PodSecurity `restricted` (the profile a locked-down namespace enforces): run as a
non-root uid (1000, the runtime image's user, which also owns the state volume through fsGroup), the
runtime's default seccomp profile, no privilege escalation, every capability dropped. Why defaults
rather than requirements: a user who needs something else (another uid, a read-only root filesystem, a
Localhost seccomp profile) sets it in `podTemplate`, field by field, and keeps the rest.

Spreading: replicas of a streams app are interchangeable, and losing a node or zone should cost as few
tasks as possible, so by default pods spread over zones and nodes (`ScheduleAnyway`: a single-node
cluster still schedules them all).
"""

from __future__ import annotations

from typing import Any

from ..models import StreamAppSpec
from .common import selector_labels

RUNTIME_UID = 1000
ZONE_KEY = "topology.kubernetes.io/zone"
HOSTNAME_KEY = "kubernetes.io/hostname"

_POD_DEFAULTS: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": RUNTIME_UID,
    "runAsGroup": RUNTIME_UID,
    "fsGroup": RUNTIME_UID,
    "fsGroupChangePolicy": "OnRootMismatch",
    "seccompProfile": {"type": "RuntimeDefault"},
}
_CONTAINER_DEFAULTS: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}


def _merged(defaults: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Defaults with the user's fields on top, objects merged key by key (so `capabilities: {add: [X]}`
    keeps the default `drop: [ALL]`); an empty list or object in the override means "not set"."""
    out = dict(defaults)
    for key, value in override.items():
        if value in ([], {}):
            continue
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def pod_security_context(spec: StreamAppSpec) -> dict[str, Any]:
    """The pod's securityContext: restricted-ready defaults, then `podTemplate.securityContext`."""
    user = spec.pod_template.security_context
    return _merged(_POD_DEFAULTS, user.to_wire() if user is not None else {})


def container_security_context(spec: StreamAppSpec) -> dict[str, Any]:
    """The runtime container's (and a sidecar's default) securityContext."""
    user = spec.pod_template.container_security_context
    return _merged(_CONTAINER_DEFAULTS, user.to_wire() if user is not None else {})


def sidecar_containers(spec: StreamAppSpec) -> list[dict[str, Any]]:
    """`podTemplate.sidecars`, each with the container defaults under its own securityContext."""
    defaults = container_security_context(spec)
    out = []
    for sidecar in spec.pod_template.sidecars:
        container = dict(sidecar)
        container["securityContext"] = _merged(defaults, dict(sidecar.get("securityContext") or {}))
        out.append(container)
    return out


def topology_spread(spec: StreamAppSpec, app_name: str) -> list[dict[str, Any]]:
    """The pods' topologySpreadConstraints: the user's (selector filled in) or zone + node spreading."""
    selector = {"matchLabels": selector_labels(app_name)}
    user = spec.pod_template.topology_spread_constraints
    if user is not None:
        return [{"labelSelector": selector, **c} for c in user]
    return [
        {"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": selector}
        for key in (ZONE_KEY, HOSTNAME_KEY)
    ]
