"""Pure desired-state builders: `(spec, AppRef, facts) -> manifests`. No I/O, no clock.

`desired_resources` is what the reconciler applies on every pass (in order: config first, so a pod never
starts without it); `obsolete_resources` names what it must delete when a feature is switched off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..models import StreamAppSpec
from .common import AppRef, query_service_name, selector_string, spec_hash
from .config import build_configmap, config_hash, render_properties, runtime_config
from .describe import describe_access, published_topology
from .jobs import build_describe_job, build_reset_job, describe_job_name, describe_key, job_outdated
from .services import build_headless_service, build_pdb, build_query_service
from .spark import (
    build_spark_application,
    previous_id_topics,
    reprocess_application_id,
    reprocess_resources,
    reprocess_timed_out,
    spark_application_name,
    spark_state,
)
from .statefulset import build_statefulset


@dataclass(frozen=True)
class Facts:
    """What the reconciler decided or observed, beyond the spec, that shapes the manifests."""

    replicas: int
    """Effective replica count (after the parallelism cap, pause and the autoscaler)."""
    application_id: str | None = None
    """Application id the pods run under; None means spec.applicationId (differs after a reprocess)."""


def desired_resources(spec: StreamAppSpec, ref: AppRef, facts: Facts) -> list[dict[str, Any]]:
    """ConfigMap, headless Service, query Service (if enabled), PDB, StatefulSet, in apply order."""
    configmap = build_configmap(spec, ref, facts.application_id)
    resources = [configmap, build_headless_service(spec, ref)]
    query = build_query_service(spec, ref)
    if query is not None:
        resources.append(query)
    resources.append(build_pdb(spec, ref))
    resources.append(
        build_statefulset(spec, ref, replicas=facts.replicas, config_hash=config_hash(configmap))
    )
    return resources


def obsolete_resources(spec: StreamAppSpec, ref: AppRef) -> list[tuple[str, str, str]]:
    """(apiVersion, kind, name) of resources this spec no longer wants (delete if they exist)."""
    if spec.interactive_queries.enabled:
        return []
    return [("v1", "Service", query_service_name(ref.name))]


__all__ = [
    "AppRef",
    "Facts",
    "build_configmap",
    "build_describe_job",
    "build_headless_service",
    "build_pdb",
    "build_query_service",
    "build_reset_job",
    "build_spark_application",
    "build_statefulset",
    "config_hash",
    "describe_access",
    "describe_job_name",
    "describe_key",
    "desired_resources",
    "job_outdated",
    "obsolete_resources",
    "previous_id_topics",
    "published_topology",
    "render_properties",
    "reprocess_application_id",
    "reprocess_resources",
    "reprocess_timed_out",
    "runtime_config",
    "selector_string",
    "spark_application_name",
    "spark_state",
    "spec_hash",
]
