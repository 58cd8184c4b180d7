"""The committed CRD matches the models, and the generated schema is structural."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kappaflow_operator import crdgen

ROOT = Path(__file__).resolve().parents[2]


def test_committed_crds_match_the_models():
    stale = crdgen.drifted(ROOT)
    assert not stale, f"run `make crds`: {', '.join(map(str, stale))} drifted from kappaflow_operator.models"


def test_check_flag_exits_nonzero_on_drift(tmp_path):
    for rel in crdgen.CRD_PATHS:
        (tmp_path / rel).parent.mkdir(parents=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    cmd = [sys.executable, "-m", "kappaflow_operator.crdgen", "--root", str(tmp_path), "--check"]
    assert subprocess.run(cmd, capture_output=True, check=False).returncode == 0
    chart_copy = tmp_path / crdgen.CRD_PATHS[1]
    chart_copy.write_text(chart_copy.read_text().replace("minimum: 0", "minimum: 1", 1))
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert result.returncode == 1
    assert "out of date" in result.stderr and str(chart_copy) in result.stderr


def _walk(node, path="$"):
    yield path, node
    for key in ("properties",):
        for name, sub in node.get(key, {}).items():
            yield from _walk(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}{{}}")


@pytest.fixture(scope="module")
def crd():
    return yaml.safe_load(crdgen.render_crd())


def test_schema_is_structural(crd):
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        assert ("$ref" not in node and "anyOf" not in node) or node.get("x-kubernetes-int-or-string"), path
        assert "type" in node or node.get("x-kubernetes-int-or-string"), f"{path} has no type"
        assert not ({"title", "$defs", "const", "propertyNames"} & set(node)), path
        assert node.get("additionalProperties") is not False, path
        assert not ("properties" in node and "additionalProperties" in node), path
    preserved = [p for p, n in _walk(schema) if n.get("x-kubernetes-preserve-unknown-fields")]
    # Kubernetes objects passed through whole (the API server validates them in the StatefulSet).
    assert preserved == [
        "$.spec.podTemplate.affinity",
        "$.spec.podTemplate.topologySpreadConstraints[]",
        "$.spec.podTemplate.sidecars[]",
        "$.status.lastStableSpec.spec",
        "$.status.kopf",
    ]


def test_schema_carries_validation(crd):
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert set(spec["required"]) == {"image", "entryPoint", "applicationId", "kafka"}
    props = spec["properties"]
    assert props["replicas"]["minimum"] == 0
    assert props["entryPoint"]["pattern"].startswith("^[A-Za-z_]")
    assert props["upgrade"]["properties"]["mode"]["enum"] == ["rolling", "reprocess", "reset"]
    assert props["state"]["properties"]["size"]["x-kubernetes-int-or-string"] is True
    rules = props["autoscaling"]["x-kubernetes-validations"]
    assert rules[0]["rule"] == "self.minReplicas <= self.maxReplicas"
    assert "'application.id'" in props["config"]["x-kubernetes-validations"][0]["rule"]


def test_subresources_and_columns(crd):
    version = crd["spec"]["versions"][0]
    assert crd["metadata"]["name"] == "streamapps.kappaflow.io"
    assert crd["spec"]["names"]["shortNames"] == ["sapp"]
    assert version["subresources"]["status"] == {}
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == ["Replicas", "Ready", "Phase", "Lag", "Image", "Age"]


def test_unsupported_constructs_are_refused():
    with pytest.raises(crdgen.SchemaError, match="union of 2 types"):
        crdgen.structural({"anyOf": [{"type": "string"}, {"type": "integer"}]}, {})
    with pytest.raises(crdgen.SchemaError, match="exclusiveMinimum"):
        crdgen.structural({"type": "integer", "exclusiveMinimum": 0}, {})
    assert crdgen.structural({"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}, {}) == {
        "type": "string",
        "nullable": True,
    }


def test_every_spec_field_has_kubectl_explain_text(crd):
    """`kubectl explain streamapp.spec.<field>` shows the schema's description: none may be missing."""
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    fields = [(p, n) for p, n in _walk(spec, "spec") if not p.endswith(("[]", "{}"))]  # not items/values
    missing = [path for path, node in fields if not node.get("description", "").strip()]
    assert len(fields) > 100
    assert not missing, f"add a docstring to these model fields: {missing}"
