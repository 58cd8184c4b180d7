"""volumes.py, pure: which state claims grow to state.size, and the reasons the others cannot."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from kappaflow_operator.volumes import (
    NOT_ALLOWED,
    SHRINK_REFUSED,
    Claim,
    classes_to_read,
    plan_expansion,
    quantity,
)


def _pvc(name: str, size: str, sc: str | None = "fast", phase: str = "Bound") -> dict[str, Any]:
    spec: dict[str, Any] = {"resources": {"requests": {"storage": size}}}
    if sc is not None:
        spec["storageClassName"] = sc
    return {"metadata": {"name": name}, "spec": spec, "status": {"phase": phase}}


def _claims(*objs: dict[str, Any]) -> list[Claim]:
    return [Claim.from_object(o) for o in objs]


EXPANDABLE = {"fast": {"metadata": {"name": "fast"}, "allowVolumeExpansion": True}}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1Gi", Decimal(2**30)),
        ("1.5Gi", Decimal(3 * 2**29)),
        ("2000Mi", Decimal(2000 * 2**20)),
        ("1G", Decimal(10**9)),
        ("500m", Decimal("0.5")),
        ("1e3", Decimal(1000)),
        ("1073741824", Decimal(2**30)),
        (".5Ki", Decimal(512)),
    ],
)
def test_quantity(text: str, value: Decimal) -> None:
    assert quantity(text) == value


def test_quantity_refuses_what_is_not_one() -> None:
    with pytest.raises(ValueError, match="'lots' is not a Kubernetes quantity"):
        quantity("lots")


def test_bound_claims_of_an_expandable_class_grow() -> None:
    claims = _claims(_pvc("state-wc-0", "1Gi"), _pvc("state-wc-1", "1024Mi"), _pvc("state-wc-2", "2Gi"))
    assert classes_to_read("2Gi", claims) == {"fast"}
    plan = plan_expansion("2Gi", claims, EXPANDABLE)
    assert plan.expand == ("state-wc-0", "state-wc-1")
    assert plan.unbound == () and plan.problems == ()


def test_nothing_to_do_when_every_claim_has_the_size() -> None:
    claims = _claims(_pvc("state-wc-0", "2Gi"), _pvc("state-wc-1", "2048Mi"))
    assert classes_to_read("2Gi", claims) == set()
    assert plan_expansion("2Gi", claims, {}).expand == ()
    assert plan_expansion("2Gi", claims, {}).problems == ()


def test_an_unbound_claim_waits_for_its_volume_whatever_its_class() -> None:
    claims = _claims(
        _pvc("state-wc-0", "1Gi"),
        _pvc("state-wc-1", "1Gi", phase="Pending"),
        _pvc("state-wc-2", "1Gi", sc=None, phase="Pending"),
        _pvc("state-wc-3", "1Gi", sc="slow", phase="Pending"),
    )
    assert classes_to_read("2Gi", claims) == {"fast"}
    plan = plan_expansion("2Gi", claims, EXPANDABLE)
    assert plan.expand == ("state-wc-0",) and plan.problems == ()
    assert plan.unbound == ("state-wc-1", "state-wc-2", "state-wc-3")


def test_a_class_without_allow_volume_expansion_is_named() -> None:
    claims = _claims(_pvc("state-wc-0", "1Gi", sc="standard"), _pvc("state-wc-1", "1Gi", sc="standard"))
    classes: dict[str, dict[str, Any] | None] = {"standard": {"metadata": {"name": "standard"}}}
    plan = plan_expansion("2Gi", claims, classes)
    assert plan.expand == ()
    (problem,) = plan.problems
    assert problem.reason == NOT_ALLOWED
    assert "StorageClass 'standard' does not allow volume expansion" in problem.message
    assert "claims state-wc-0, state-wc-1 keep 1Gi" in problem.message
    assert "state.size is 2Gi" in problem.message


def test_a_missing_class_and_a_claim_without_class_are_refused_but_others_grow() -> None:
    claims = _claims(
        _pvc("state-wc-0", "1Gi", sc="gone"), _pvc("state-wc-1", "1Gi", sc=None), _pvc("state-wc-2", "1Gi")
    )
    assert classes_to_read("2Gi", claims) == {"gone", "fast"}
    plan = plan_expansion("2Gi", claims, {**EXPANDABLE, "gone": None})
    assert plan.expand == ("state-wc-2",)
    (problem,) = plan.problems
    assert "StorageClass 'gone' does not exist" in problem.message
    assert "claims state-wc-1 keep 1Gi: they have no StorageClass" in problem.message


def test_a_claim_larger_than_the_spec_is_reported_not_shrunk() -> None:
    claims = _claims(_pvc("state-wc-0", "4Gi"), _pvc("state-wc-1", "1Gi"))
    plan = plan_expansion("2Gi", claims, EXPANDABLE)
    assert plan.expand == ("state-wc-1",)
    (problem,) = plan.problems
    assert problem.reason == SHRINK_REFUSED
    assert "state.size 2Gi is smaller than claims state-wc-0 (up to 4Gi)" in problem.message
    assert "set state.size to at least 4Gi" in problem.message
