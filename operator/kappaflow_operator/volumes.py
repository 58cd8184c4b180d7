"""State volume expansion, pure: which claims grow to `spec.state.size`, and why the others cannot.

A StatefulSet's volumeClaimTemplates are immutable, and a changed template never reaches the claims it
already made. So a larger `state.size` is carried out in two parts, the pattern Kubernetes documents
for StatefulSets (and that operators such as Strimzi and the Elastic operator follow):

1. every existing claim's `spec.resources.requests.storage` is raised to the new size (this module
   decides which ones; the reconcile layer patches them). Kubernetes' `PersistentVolumeClaimResize`
   admission allows that only when the claim's StorageClass has `allowVolumeExpansion: true`, and only
   for a bound claim; the class's driver then grows the volume (online, or when the pod next starts);
2. the StatefulSet is deleted with orphan propagation and created again with the new template
   (`diff.SpecDiff.recreate_statefulset`): pods and claims stay, and replicas added later get claims of
   the new size.

The template always follows the spec, even when step 1 is impossible: a replica added later then starts
at the size the user asked for, and the `VolumesMatchSpec` condition (False, `VolumeExpansionNotAllowed`,
naming the class) and a Warning event say which claims stayed smaller and what to do. That is not
Degraded: the app runs as before, and since the CRD's CEL rule refuses a smaller `state.size` on update,
a Degraded state would be one the user could not leave. A claim that is larger than the spec anyway (a
rollback to an older spec, a StreamApp recreated over retained claims) is left as it is and reported the
same way (`VolumeShrinkRefused`): Kubernetes cannot shrink a volume.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from .status import Problem

NOT_ALLOWED = "VolumeExpansionNotAllowed"
SHRINK_REFUSED = "VolumeShrinkRefused"

_SUFFIX = {
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_QUANTITY = re.compile(
    r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)


def quantity(value: str | int) -> Decimal:
    """A Kubernetes resource quantity as a number ("1Gi" -> 1073741824, "1.5G" -> 1500000000).

    Raises ValueError naming the value when it is not a quantity.
    """
    match = _QUANTITY.match(str(value).strip())
    if match is None:
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        if suffix[:1] in ("e", "E"):
            return Decimal(number) * Decimal(10) ** int(suffix[1:])
        return Decimal(number) * _SUFFIX[suffix]
    except InvalidOperation as err:
        raise ValueError(f"{value!r} is not a Kubernetes quantity") from err


@dataclass(frozen=True)
class Claim:
    """The facts about one state-volume claim that decide whether and how it can grow."""

    name: str
    requested: str
    """spec.resources.requests.storage"""
    storage_class: str | None
    """spec.storageClassName as the API server stored it (admission fills in the cluster default)."""
    bound: bool

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Claim:
        spec = obj.get("spec") or {}
        return cls(
            name=str(obj["metadata"]["name"]),
            requested=str(((spec.get("resources") or {}).get("requests") or {}).get("storage") or "0"),
            storage_class=spec.get("storageClassName") or None,
            bound=(obj.get("status") or {}).get("phase") == "Bound",
        )


@dataclass(frozen=True)
class ExpansionPlan:
    """What this pass does about the claims' sizes."""

    size: str
    """The size the spec asks for."""
    expand: tuple[str, ...] = ()
    """Claims to patch to `size` now."""
    unbound: tuple[str, ...] = ()
    """Claims that must grow but are not bound yet (the API server refuses to resize them): a later
    pass judges them once bound."""
    problems: tuple[Problem, ...] = ()


def _growing(size: str, claims: Iterable[Claim]) -> list[Claim]:
    target = quantity(size)
    return [c for c in claims if quantity(c.requested) < target]


def classes_to_read(size: str, claims: Sequence[Claim]) -> set[str]:
    """The StorageClasses whose `allowVolumeExpansion` decides for the bound claims that must grow."""
    return {c.storage_class for c in _growing(size, claims) if c.storage_class and c.bound}


def _names(claims: Sequence[Claim]) -> str:
    return ", ".join(sorted(c.name for c in claims))


def plan_expansion(
    size: str, claims: Sequence[Claim], classes: Mapping[str, Mapping[str, Any] | None]
) -> ExpansionPlan:
    """Decide from the claims and their StorageClasses (`classes_to_read` names; None: not found)."""
    target = quantity(size)
    larger = [c for c in claims if quantity(c.requested) > target]
    problems: list[Problem] = []
    if larger:
        biggest = max((c.requested for c in larger), key=quantity)
        problems.append(
            Problem(
                SHRINK_REFUSED,
                f"state.size {size} is smaller than claims {_names(larger)} (up to {biggest}): Kubernetes "
                f"cannot shrink a volume, so they keep their size; set state.size to at least {biggest}",
            )
        )
    growing = _growing(size, claims)
    # An unbound claim cannot be resized yet, whatever its class: it is judged once bound.
    unbound = [c.name for c in growing if not c.bound]
    by_class: dict[str | None, list[Claim]] = {}
    for claim in growing:
        if claim.bound:
            by_class.setdefault(claim.storage_class, []).append(claim)
    expand: list[str] = []
    refusals: list[str] = []
    for name, members in sorted(by_class.items(), key=lambda item: item[0] or ""):
        keep = f"claims {_names(members)} keep {', '.join(sorted({c.requested for c in members}))}"
        sc = classes.get(name) if name else None
        if not name:
            refusals.append(f"{keep}: they have no StorageClass, and only a class can allow expansion")
        elif sc is None:
            refusals.append(f"{keep}: their StorageClass '{name}' does not exist")
        elif sc.get("allowVolumeExpansion") is not True:
            refusals.append(
                f"{keep}: StorageClass '{name}' does not allow volume expansion (allowVolumeExpansion is "
                "not true); enable it if the class's provisioner supports resizing"
            )
        else:
            expand += [c.name for c in members]
    if refusals:
        problems.append(Problem(NOT_ALLOWED, f"state.size is {size}, but " + "; ".join(refusals)))
    return ExpansionPlan(size, tuple(sorted(expand)), tuple(sorted(unbound)), tuple(problems))


def unbound_claims_to_replace(
    spec_class: str | None, claims: Sequence[Claim], classes: Mapping[str, Mapping[str, Any] | None]
) -> list[str]:
    """Claims that never bound and that the spec no longer asks for: deleted, with the pod waiting for
    them, so the StatefulSet makes them again from its current template.

    A claim's class is immutable and a StatefulSet never replaces a claim it made, so after a user fixes
    `state.storageClassName` (a class that does not exist, one whose provisioner fails) the pod would wait
    for the old claim forever. A claim that never bound holds no data: replacing it loses nothing. With
    no class in the spec (the cluster default), only claims whose class does not exist are replaced.
    """
    stale = []
    for claim in claims:
        if claim.bound:
            continue
        if spec_class is not None:
            unwanted = claim.storage_class != spec_class
        else:
            unwanted = bool(claim.storage_class) and classes.get(claim.storage_class or "") is None
        if unwanted:
            stale.append(claim.name)
    return sorted(stale)


def provisioning_problem(claims: Sequence[Claim], failures: Sequence[Mapping[str, Any]]) -> Problem | None:
    """The newest ProvisioningFailed event of each claim still unbound (the provisioner's or the volume
    controller's own words, e.g. a StorageClass that does not exist), as one problem."""
    unbound = {c.name for c in claims if not c.bound}
    newest: dict[str, Mapping[str, Any]] = {}
    for event in failures:
        name = str((event.get("involvedObject") or {}).get("name") or "")
        when = str(event.get("lastTimestamp") or event.get("eventTime") or "")
        seen = newest.get(name)
        if name in unbound and (
            seen is None or when >= str(seen.get("lastTimestamp") or seen.get("eventTime") or "")
        ):
            newest[name] = event
    if not newest:
        return None
    detail = "; ".join(f"claim {name}: {e.get('message', '')}" for name, e in sorted(newest.items()))
    return Problem("VolumeProvisioningFailed", f"state volumes cannot be provisioned: {detail}"[:2048])
