"""Restricted-ready pods: the operator's defaults, the podTemplate overrides, sidecars, spreading."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from kappaflow_operator.desired import Facts, build_describe_job, build_reset_job, desired_resources
from tests.operator.specs import REF, spec

RESTRICTED_POD = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


def _pod(**overrides: Any) -> dict[str, Any]:
    sts = desired_resources(spec(**overrides), REF, Facts(replicas=3))[-1]
    return sts["spec"]["template"]["spec"]


def _restricted_violations(pod: dict[str, Any]) -> list[str]:
    """The checks of PodSecurity `restricted` that a pod spec's security settings decide."""
    problems = []
    pod_ctx = pod.get("securityContext") or {}
    for c in [*pod.get("initContainers", []), *pod["containers"]]:
        ctx = c.get("securityContext") or {}
        if not (ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot"))):
            problems.append(f"{c['name']}: runAsNonRoot")
        if ctx.get("runAsUser", pod_ctx.get("runAsUser")) == 0:
            problems.append(f"{c['name']}: runAsUser 0")
        seccomp = (ctx.get("seccompProfile") or pod_ctx.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{c['name']}: seccompProfile")
        if ctx.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{c['name']}: allowPrivilegeEscalation")
        caps = ctx.get("capabilities") or {}
        if "ALL" not in caps.get("drop", []) or set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            problems.append(f"{c['name']}: capabilities")
    return problems


def test_default_pods_and_jobs_pass_restricted():
    s = spec()
    assert _restricted_violations(_pod()) == []
    for job in (build_describe_job(s, REF), build_reset_job(s, REF, 3)):
        assert _restricted_violations(job["spec"]["template"]["spec"]) == []
    pod = _pod()
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsUser"] == 1000


def test_user_security_context_merges_field_by_field():
    pod = _pod(
        podTemplate={
            "securityContext": {
                "runAsUser": 2000,
                "seccompProfile": {"type": "Localhost", "localhostProfile": "p"},
            },
            "containerSecurityContext": {
                "readOnlyRootFilesystem": True,
                "capabilities": {"add": ["NET_BIND_SERVICE"]},
            },
        }
    )
    assert pod["securityContext"]["runAsUser"] == 2000
    assert pod["securityContext"]["runAsNonRoot"] is True  # default kept
    assert pod["securityContext"]["seccompProfile"] == {"type": "Localhost", "localhostProfile": "p"}
    ctx = pod["containers"][0]["securityContext"]
    assert ctx["readOnlyRootFilesystem"] is True and ctx["allowPrivilegeEscalation"] is False
    assert ctx["capabilities"] == {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}
    assert _restricted_violations(pod) == []


def test_sidecars_get_restricted_defaults_under_their_own_settings():
    sidecar = {"name": "shipper", "image": "busybox:1", "securityContext": {"readOnlyRootFilesystem": True}}
    pod = _pod(podTemplate={"sidecars": [sidecar]})
    assert [c["name"] for c in pod["containers"]] == ["kappaflow", "shipper"]
    shipper = pod["containers"][1]
    assert shipper["securityContext"]["readOnlyRootFilesystem"] is True
    assert shipper["securityContext"]["allowPrivilegeEscalation"] is False
    assert _restricted_violations(pod) == []


@pytest.mark.parametrize(
    ("sidecar", "message"),
    [
        ({"image": "x"}, r"sidecars\[0\]: name must be a DNS label"),
        ({"name": "kappaflow", "image": "x"}, "runtime container's"),
        ({"name": "side"}, "image is required"),
    ],
)
def test_bad_sidecars_are_refused_naming_the_field(sidecar, message):
    with pytest.raises(ValidationError, match=message):
        spec(podTemplate={"sidecars": [sidecar]})


def test_replicas_spread_over_zones_and_nodes_unless_told_otherwise():
    spread = _pod()["topologySpreadConstraints"]
    assert [c["topologyKey"] for c in spread] == ["topology.kubernetes.io/zone", "kubernetes.io/hostname"]
    assert all(c["whenUnsatisfiable"] == "ScheduleAnyway" for c in spread)
    assert all(c["labelSelector"] == {"matchLabels": {"kappaflow.io/streamapp": "wordcount"}} for c in spread)
    assert "topologySpreadConstraints" not in _pod(podTemplate={"topologySpreadConstraints": []})
    own = {"maxSkew": 2, "topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule"}
    assert _pod(podTemplate={"topologySpreadConstraints": [own]})["topologySpreadConstraints"] == [
        {"labelSelector": {"matchLabels": {"kappaflow.io/streamapp": "wordcount"}}, **own}
    ]
    with pytest.raises(ValidationError, match=r"topologySpreadConstraints\[0\]: maxSkew is required"):
        spec(podTemplate={"topologySpreadConstraints": [{"topologyKey": "x", "whenUnsatisfiable": "X"}]})


def test_job_pods_carry_template_labels_and_scheduling():
    s = spec(podTemplate={"labels": {"team": "a"}, "nodeSelector": {"pool": "x"}, "annotations": {"n": "1"}})
    template = build_describe_job(s, REF)["spec"]["template"]
    assert template["metadata"]["labels"]["team"] == "a"
    assert template["metadata"]["annotations"] == {"n": "1"}
    assert template["spec"]["nodeSelector"] == {"pool": "x"}
