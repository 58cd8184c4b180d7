"""The Helm chart lints, renders, and grants exactly what the operator's manifests need.

helm is built from the Go module proxy once and cached (tests/harness/helm.py); without Go the tests
skip with the reason.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from kappaflow_operator.desired import (
    Facts,
    build_describe_job,
    build_reset_job,
    build_spark_application,
    describe_access,
    desired_resources,
)
from kappaflow_operator.main import PEERING_LIFETIME_ENV, peering_lifetime
from tests.harness.helm import helm_binary
from tests.harness.kopf_peering import peering_crds

from .specs import REF, spec

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "kappaflow"
#: kind -> (API group, resource) for everything the operator creates.
RESOURCES = {
    "ConfigMap": ("", "configmaps"),
    "Service": ("", "services"),
    "PodDisruptionBudget": ("policy", "poddisruptionbudgets"),
    "StatefulSet": ("apps", "statefulsets"),
    "Job": ("batch", "jobs"),
    "SparkApplication": ("sparkoperator.k8s.io", "sparkapplications"),
    "ServiceAccount": ("", "serviceaccounts"),
    "Role": ("rbac.authorization.k8s.io", "roles"),
    "RoleBinding": ("rbac.authorization.k8s.io", "rolebindings"),
}


@pytest.fixture(scope="module")
def helm() -> Path:
    binary = helm_binary(build=True)
    if binary is None:
        pytest.fail("helm is not cached and could not be built (needs Go and the Go module proxy)")
    return binary


def _run(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, check=False, timeout=120)


def _render(helm: Path, *args: str) -> list[dict]:
    result = _run(helm, "template", "kf", str(CHART), "--namespace", "kappaflow-system", *args)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def _allowed(rules: list[dict], group: str, resource: str, verb: str) -> bool:
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rules)


def test_lint_strict(helm):
    result = _run(helm, "lint", "--strict", str(CHART))
    assert result.returncode == 0, result.stdout + result.stderr


def test_default_render_watches_all_namespaces(helm):
    docs = _render(helm)
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    assert set(by_kind) == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment"}
    (deployment,) = by_kind["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"] == ["kopf"]
    assert container["args"][:3] == ["run", "-m", "kappaflow_operator.main"]
    assert "--all-namespaces" in container["args"] and "--standalone" in container["args"]
    assert container["image"] == "ghcr.io/kappaflow/kappaflow-operator:0.1.0"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    sa = by_kind["ServiceAccount"][0]["metadata"]["name"]
    assert pod["serviceAccountName"] == sa
    for binding in by_kind["ClusterRoleBinding"]:
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": sa, "namespace": "kappaflow-system"}
        ]
    assert {b["roleRef"]["name"] for b in by_kind["ClusterRoleBinding"]} == {
        r["metadata"]["name"] for r in by_kind["ClusterRole"]
    }


def test_rbac_covers_every_manifest_the_operator_builds(helm):
    rules = [r for d in _render(helm) if d["kind"] == "ClusterRole" for r in d["rules"]]
    s = spec(interactiveQueries={"enabled": True}, upgrade={"mode": "reprocess"})
    built = [
        *desired_resources(s, REF, Facts(replicas=1)),
        build_describe_job(s, REF),
        build_reset_job(s, REF, 1),
        build_spark_application(s, REF, spec_digest="0" * 16),
    ]
    for manifest in built:
        group, resource = RESOURCES[manifest["kind"]]
        for verb in ("create", "patch", "get", "list", "watch", "delete"):
            assert _allowed(rules, group, resource, verb), f"{verb} {resource}"
    for manifest in describe_access(s, REF):
        group, resource = RESOURCES[manifest["kind"]]
        for verb in ("create", "patch", "get", "delete"):
            assert _allowed(rules, group, resource, verb), f"{verb} {resource}"
        # RBAC refuses to create a Role granting more than its creator holds (no escalate verb needed).
        for rule in manifest.get("rules", []):
            for verb in rule["verbs"]:
                assert _allowed(rules, rule["apiGroups"][0], rule["resources"][0], verb), f"{verb} in Role"
    for group, resource, verb in [
        ("kappaflow.io", "streamapps", "watch"),
        ("kappaflow.io", "streamapps", "patch"),
        ("kappaflow.io", "streamapps/status", "patch"),
        ("kappaflow.io", "streamapps/finalizers", "update"),
        ("", "pods", "get"),
        ("", "pods", "delete"),  # a pod waiting for a state claim that never bound (volumes.py)
        ("", "events", "create"),
        ("", "persistentvolumeclaims", "delete"),
        ("", "persistentvolumeclaims", "patch"),
        ("storage.k8s.io", "storageclasses", "get"),
        ("", "secrets", "get"),
    ]:
        assert _allowed(rules, group, resource, verb), f"{verb} {group}/{resource}"


def test_rbac_is_least_privilege(helm):
    rules = [r for d in _render(helm) if d["kind"] in ("ClusterRole", "Role") for r in d["rules"]]
    for rule in rules:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]
        if "secrets" in rule["resources"]:
            assert rule["verbs"] == ["get"], "Secrets are read by name only, never listed or written"
    assert not _allowed(rules, "", "pods", "create")
    assert not _allowed(rules, "", "pods", "patch")
    assert not _allowed(rules, "", "pods/exec", "create")


def test_watched_namespaces_get_role_bindings_only(helm):
    docs = _render(helm, "--set", "watchNamespaces={team-a,team-b}", "--set", "sparkOperator.enabled=false")
    bindings = [d for d in docs if d["kind"] == "RoleBinding"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    assert all(
        b["roleRef"]
        == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kf-kappaflow-apps"}
        for b in bindings
    )
    cluster_bindings = [d["roleRef"]["name"] for d in docs if d["kind"] == "ClusterRoleBinding"]
    assert cluster_bindings == ["kf-kappaflow-cluster"]
    args = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0][
        "args"
    ]
    assert "--namespace=team-a" in args and "--namespace=team-b" in args and "--all-namespaces" not in args
    rules = [r for d in docs if d["kind"] == "ClusterRole" for r in d["rules"]]
    assert not _allowed(rules, "sparkoperator.k8s.io", "sparkapplications", "create")


def test_peering_creates_the_object_the_replicas_elect_a_leader_in(helm):
    docs = _render(helm, "--set", "peering.enabled=true", "--set", "replicaCount=2")
    (cluster,) = [d for d in docs if d["kind"] == "ClusterKopfPeering"]
    assert cluster["metadata"]["name"] == "kappaflow"
    args = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "--peering=kappaflow" in args["args"] and "--standalone" not in args["args"]
    env = {e["name"]: e.get("value") for e in args["env"]}
    assert env[PEERING_LIFETIME_ENV] == "60", "kopf's default peer lifetime unless set"
    docs = _render(helm, "--set", "peering.enabled=true", "--set", "peering.lifetimeSeconds=15")
    container = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][
        0
    ]
    assert {"name": PEERING_LIFETIME_ENV, "value": "15"} in container["env"]
    assert peering_lifetime("15") == 15, "the operator reads what the chart sets"
    docs = _render(helm, "--set", "peering.enabled=true", "--set", "watchNamespaces={team-a,team-b}")
    peerings = [d for d in docs if d["kind"] == "KopfPeering"]
    assert sorted((d["metadata"]["namespace"], d["metadata"]["name"]) for d in peerings) == [
        ("team-a", "kappaflow"),
        ("team-b", "kappaflow"),
    ]
    assert not [d for d in _render(helm) if d["kind"].endswith("KopfPeering")]


def test_crd_is_shipped_with_the_chart(helm):
    docs = _render(helm, "--include-crds")
    crds = {d["metadata"]["name"]: d for d in docs if d["kind"] == "CustomResourceDefinition"}
    ours = yaml.safe_load((ROOT / "crds" / "streamapps.kappaflow.io.yaml").read_text())
    assert crds.pop(ours["metadata"]["name"]) == ours
    # kopf's peering CRDs, exactly as kopf's pinned release publishes them (sha256-checked sdist).
    assert list(crds.values()) == peering_crds()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "image.pullPolicy=Sometimes"], "/image/pullPolicy"),
        (["--set", "replicaCount=3"], "/peering/enabled"),
        (["--set", "watchNamespaces={Bad_NS}"], "/watchNamespaces/0"),
        (["--set", "unknownKey=1"], "unknownKey"),
        (["--set", "peering.lifetimeSeconds=2"], "/peering/lifetimeSeconds"),
    ],
)
def test_values_schema_rejects_bad_values(helm, args, message):
    result = _run(helm, "template", "kf", str(CHART), *args)
    assert result.returncode != 0
    assert message in result.stderr


@pytest.mark.parametrize(
    ("value", "expected"), [(None, 60), ("", 60), ("10", 10), ("ten", "whole seconds"), ("4", "at least 5")]
)
def test_peering_lifetime_from_the_environment(value, expected):
    if isinstance(expected, int):
        assert peering_lifetime(value) == expected
    else:
        with pytest.raises(ValueError, match=f"{PEERING_LIFETIME_ENV}=.*{expected}"):
            peering_lifetime(value)
