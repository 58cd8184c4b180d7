"""The GitOps example manifests are valid against the models the CRD is generated from."""

from __future__ import annotations

from pathlib import Path

import yaml

from kappaflow_operator.desired import AppRef, Facts, desired_resources
from kappaflow_operator.models import API_VERSION, KIND, StreamAppSpec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "k8s"


def test_kustomization_lists_existing_files():
    kustomization = yaml.safe_load((EXAMPLES / "kustomization.yaml").read_text())
    for resource in kustomization["resources"]:
        assert (EXAMPLES / resource).is_file(), resource


def test_wordcount_streamapp_is_valid():
    doc = yaml.safe_load((EXAMPLES / "wordcount-streamapp.yaml").read_text())
    assert (doc["apiVersion"], doc["kind"]) == (API_VERSION, KIND)
    spec = StreamAppSpec.model_validate(doc["spec"])
    assert spec.entry_point == "examples.wordcount:build_topology"
    ref = AppRef(doc["metadata"]["name"], "kappaflow-examples", "uid")
    sts = desired_resources(spec, ref, Facts(replicas=spec.replicas))[-1]
    assert sts["spec"]["template"]["spec"]["containers"][0]["image"] == "kappaflow-examples:0.1.0"


def test_kustomize_images_reach_the_streamapp_image(tmp_path):
    """An overlay's `images:` rewrites StreamApp.spec.image, through the base's kustomizeconfig.yaml."""
    import os
    import subprocess

    import pytest

    from tests.harness.kustomize import kustomize_binary

    binary = kustomize_binary(build=True)
    if binary is None:
        pytest.fail("kustomize is not cached and could not be built (needs Go and the Go module proxy)")
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": [os.path.relpath(EXAMPLES, tmp_path)],  # kustomize wants a relative base
                "images": [
                    {"name": "kappaflow-examples", "newName": "registry.example/team/wc", "newTag": "9.9"}
                ],
            }
        )
    )
    out = subprocess.run(
        [str(binary), "build", str(tmp_path)], capture_output=True, text=True, check=True
    ).stdout
    app = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == KIND)
    assert app["spec"]["image"] == "registry.example/team/wc:9.9"
    assert app["metadata"]["namespace"] == "kappaflow-examples"
