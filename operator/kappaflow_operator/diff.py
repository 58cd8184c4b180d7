"""Classify a spec change: what kind of change it is and what the reconciler must do about it.

    no-op      only operator-side settings changed (autoscaling, cleanup policy, upgrade settings)
    scale      only replicas changed: patch the StatefulSet's replicas
    rolling    pod-affecting change (config, resources, image with the same topology, ...): the
               StatefulSet's template changes and Kubernetes rolls one pod at a time, keeping state
    topology   the application itself changed (entry point, application id, or an image whose
               `describe` output differs): handled per `spec.upgrade.mode`:
               rolling -> roll, reprocess -> SparkApplication first, reset -> reset, then roll

In `reprocess` and `reset` mode an image change is a topology-level change even when the topology's
shape is unchanged: new code means new results, and the Kappa answer to new code is to reprocess the
log (issue 7). In `rolling` mode an image change is classified only once the new image was described,
so the reconciler gets `needs_describe` first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .models import StreamAppSpec


class ChangeKind(StrEnum):
    NOOP = "noop"
    SCALE = "scale"
    ROLLING = "rolling"
    TOPOLOGY = "topology"


class Action(StrEnum):
    NONE = "none"
    SCALE = "scale"
    ROLL = "roll"
    REPROCESS = "reprocess"
    RESET = "reset"


#: Top-level spec fields (camelCase) that never touch the pods.
OPERATOR_ONLY = frozenset({"autoscaling", "topicCleanupPolicy", "upgrade", "suspend"})
#: Fields that change what the application *is*.
IDENTITY = frozenset({"entryPoint", "applicationId"})
#: Fields the StatefulSet cannot change in place (volumeClaimTemplates are immutable).
IMMUTABLE_PREFIXES = ("state.",)


@dataclass(frozen=True)
class SpecDiff:
    kind: ChangeKind
    action: Action
    changed: list[str] = field(default_factory=list)
    """Dotted camelCase paths of changed fields, e.g. `resources.limits.cpu`."""
    needs_describe: bool = False
    """The new image/entry point must be described before the change can be classified or applied."""
    recreate_statefulset: bool = False
    """A field of the StatefulSet's volumeClaimTemplates changed: delete it with orphan propagation
    (pods and PVCs stay) and create it again; existing claims are grown apart (see volumes.py)."""


def changed_paths(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Leaf paths whose values differ between two JSON-like values."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new)):
            out += changed_paths(old.get(key), new.get(key), f"{prefix}{key}.")
        return out
    return [] if old == new else [prefix.rstrip(".")]


def classify(
    old: StreamAppSpec | None,
    new: StreamAppSpec,
    *,
    old_topology: str | None = None,
    new_topology: str | None = None,
) -> SpecDiff:
    """Classify the change from `old` (the last spec applied; None on creation) to `new`.

    `old_topology`/`new_topology` are topology fingerprints (`TopologyDescription.fingerprint()`) of the
    old and new image when known; pass `new_topology=None` while the new image is not described yet.
    """
    if old is None:
        return SpecDiff(ChangeKind.TOPOLOGY, Action.ROLL, ["*"], needs_describe=new_topology is None)
    paths = changed_paths(old.to_wire(), new.to_wire())
    if not paths:
        return SpecDiff(ChangeKind.NOOP, Action.NONE)
    tops = {p.split(".", 1)[0] for p in paths}
    recreate = any(p.startswith(IMMUTABLE_PREFIXES) for p in paths)
    pod_tops = tops - OPERATOR_ONLY
    if not pod_tops:
        return SpecDiff(ChangeKind.NOOP, Action.NONE, paths)
    if pod_tops == {"replicas"}:
        return SpecDiff(ChangeKind.SCALE, Action.SCALE, paths)
    mode = new.upgrade.mode
    image_changed = "image" in pod_tops
    topology_changed = bool(pod_tops & IDENTITY)
    needs_describe = False
    if image_changed or topology_changed:
        if new_topology is None:
            needs_describe = True
        elif old_topology is not None and old_topology != new_topology:
            topology_changed = True
        if mode != "rolling" and image_changed:
            topology_changed = True
    if topology_changed:
        action = {"rolling": Action.ROLL, "reprocess": Action.REPROCESS, "reset": Action.RESET}[mode]
        return SpecDiff(ChangeKind.TOPOLOGY, action, paths, needs_describe, recreate)
    return SpecDiff(ChangeKind.ROLLING, Action.ROLL, paths, needs_describe, recreate)
