"""State volumes on the cluster: replace a StatefulSet whose claim template changed, and grow the claims
it already made. The decisions are `volumes.py`'s (pure); this module only reads and writes.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from . import status, volumes
from .desired.common import AppRef, selector_string
from .desired.statefulset import STATE_VOLUME
from .k8s import KubeError

if TYPE_CHECKING:
    from .context import Context

#: How long to wait for an orphan-deleted StatefulSet to disappear before creating it again.
REPLACE_TIMEOUT_S = 30.0


def replace_statefulset(ctx: Context, body: Mapping[str, Any], ref: AppRef, changed: Sequence[str]) -> None:
    """Delete the StatefulSet with orphan propagation (pods and claims stay) so the caller can create it
    again with a new volumeClaimTemplate, which the API server refuses to change in place. The new
    StatefulSet adopts the pods; their template is unchanged, so none restarts."""
    ctx.kube.delete("apps/v1", "StatefulSet", ref.namespace, ref.name, propagation="Orphan")
    deadline = time.monotonic() + REPLACE_TIMEOUT_S
    while ctx.kube.get("apps/v1", "StatefulSet", ref.namespace, ref.name) and time.monotonic() < deadline:
        time.sleep(0.2)
    ctx.event(body, "Normal", "RecreatingStatefulSet", "state volume settings changed: " + ", ".join(changed))


def expand_claims(ctx: Context, body: Mapping[str, Any], ref: AppRef, size: str) -> list[status.Problem]:
    """Raise the storage request of every state claim smaller than `size` whose StorageClass allows it.

    Returns the problems (a class that does not allow expansion, a claim larger than `size`, a resize
    the API server refused) for the pass's status; none of them stops the pass. Runs on every pass, so a
    claim that was not bound yet, or a class that was fixed since, is taken up later.
    """
    prefix = f"{STATE_VOLUME}-{ref.name}-"
    objects = ctx.kube.list("v1", "PersistentVolumeClaim", ref.namespace, selector_string(ref.name))
    claims = [volumes.Claim.from_object(o) for o in objects if o["metadata"]["name"].startswith(prefix)]
    classes = {
        name: ctx.kube.get_cluster_scoped("storage.k8s.io/v1", "StorageClass", name)
        for name in sorted(volumes.classes_to_read(size, claims))
    }
    plan = volumes.plan_expansion(size, claims, classes)
    problems = list(plan.problems)
    grown: list[str] = []
    for name in plan.expand:
        patch = {"spec": {"resources": {"requests": {"storage": plan.size}}}}
        try:
            ctx.kube.patch("v1", "PersistentVolumeClaim", ref.namespace, name, patch)
        except KubeError as err:  # e.g. the class changed since it was read; admission says why
            problems.append(status.Problem("VolumeExpansionFailed", f"claim {name}: {str(err)[:512]}"))
            continue
        grown.append(name)
    if grown:
        ctx.event(
            body,
            "Normal",
            "VolumeExpansionRequested",
            f"requested {plan.size} for claims {', '.join(grown)}; the storage driver grows the volumes",
        )
    return problems
