"""The topology channel's pure half: which published description counts, and the publisher's checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kappaflow_operator.desired import describe_access, describe_key, published_topology
from kappaflow_operator.topology_publish import MAX_BYTES, PublishError, publish
from tests.operator.specs import REF, spec

TOPOLOGY = json.dumps({"sub_topologies": [{"id": 0, "source_topics": ["in"]}], "source_topics": ["in"]})


def _cm(data: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, object]:
    return {"metadata": {"annotations": annotations or {}}, "data": data}


def test_only_the_description_of_this_image_and_entry_point_counts():
    s = spec()
    key = describe_key(s)
    found = published_topology(s, _cm({"topology.json": TOPOLOGY, "describe-key": key}))
    assert found is not None and found.source_topics == ["in"]
    assert published_topology(s, _cm({"topology.json": TOPOLOGY, "describe-key": "older"})) is None
    assert published_topology(s, _cm({})) is None and published_topology(s, None) is None
    # Written by an operator that kept the description itself: its annotation names the key.
    legacy = _cm({"topology.json": TOPOLOGY}, {"kappaflow.io/describe-key": key})
    assert published_topology(s, legacy) is not None
    with pytest.raises(ValueError):
        published_topology(s, _cm({"topology.json": "{not json", "describe-key": key}))


def test_the_describe_job_may_only_get_and_patch_its_configmap():
    account, role, binding, configmap = describe_access(spec(), REF)
    assert (account["kind"], role["kind"], binding["kind"], configmap["kind"]) == (
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ConfigMap",
    )
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["wordcount-topology"],
            "verbs": ["get", "patch"],
        }
    ]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "wordcount-describe", "namespace": "apps"}
    ]
    assert "data" not in configmap  # the operator never overwrites what the Job published


def test_publisher_refuses_what_the_operator_could_not_read(tmp_path: Path):
    with pytest.raises(PublishError, match="no JSON"):
        publish("Traceback ...", "cm", "k", tmp_path, "https://127.0.0.1:1")
    with pytest.raises(PublishError, match="at most"):
        publish(json.dumps({"x": "y" * MAX_BYTES}), "cm", "k", tmp_path, "https://127.0.0.1:1")
    with pytest.raises(PublishError, match="no service account token"):
        publish(TOPOLOGY, "cm", "k", tmp_path, "https://127.0.0.1:1")
