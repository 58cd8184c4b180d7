"""Services and the PodDisruptionBudget around the StatefulSet."""

from __future__ import annotations

from typing import Any

from ..models import StreamAppSpec
from .common import AppRef, headless_service_name, object_meta, query_service_name, selector_labels


def _ports(spec: StreamAppSpec) -> list[dict[str, Any]]:
    ports = [{"name": "metrics", "port": spec.metrics.port, "targetPort": "metrics", "protocol": "TCP"}]
    if spec.interactive_queries.enabled:
        ports.append(
            {"name": "query", "port": spec.interactive_queries.port, "targetPort": "query", "protocol": "TCP"}
        )
    return ports


def build_headless_service(spec: StreamAppSpec, ref: AppRef) -> dict[str, Any]:
    """Stable per-pod DNS (`<pod>.<name>-headless.<ns>.svc`), the host part of application.server.

    `publishNotReadyAddresses`: a pod that is still restoring must stay resolvable, because peers route
    interactive queries by the group's assignment, not by readiness, and answer "not yet available".
    """
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(ref, headless_service_name(ref.name)),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": selector_labels(ref.name),
            "ports": _ports(spec),
        },
    }


def build_query_service(spec: StreamAppSpec, ref: AppRef) -> dict[str, Any] | None:
    """A load-balanced entry point for interactive queries (any ready pod forwards to the key's owner).

    None when interactive queries are off: the reconciler deletes an existing one.
    """
    if not spec.interactive_queries.enabled:
        return None
    port = spec.interactive_queries.port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(ref, query_service_name(ref.name)),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(ref.name),
            "ports": [{"name": "query", "port": port, "targetPort": "query", "protocol": "TCP"}],
        },
    }


def build_pdb(spec: StreamAppSpec, ref: AppRef) -> dict[str, Any]:
    """At most one pod voluntarily down at a time: each eviction moves that pod's tasks to others."""
    del spec  # the budget does not depend on the spec today; kept for a uniform builder signature
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": object_meta(ref, ref.name),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(ref.name)}},
    }
