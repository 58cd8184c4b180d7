"""Internal topic planning from describe JSON and observed partition counts."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from kappaflow_operator.models import TopologyDescription
from kappaflow_operator.topics import internal_topic_names, plan_internal_topics

DESCRIBE = {
    "sub_topologies": [
        {"id": 0, "source_topics": ["words"], "sink_topics": ["wc-x-repartition"], "stores": []},
        {
            "id": 1,
            "source_topics": ["wc-x-repartition", "clicks"],
            "sink_topics": ["counts"],
            "stores": ["c"],
        },
    ],
    "source_topics": ["words", "clicks"],
    "sink_topics": ["counts"],
    "internal_topics": [
        {
            "name": "counts-changelog",
            "type": "changelog",
            "config": {"cleanup.policy": "compact"},
            "partitions_from": ["x-repartition"],
        },
        {
            "name": "x-repartition",
            "type": "repartition",
            "config": {"cleanup.policy": "delete"},
            "partitions_from": ["words", "clicks"],
        },
        {"name": "fixed-repartition", "type": "repartition", "config": {}, "partitions": 12},
    ],
}


def _describe() -> TopologyDescription:
    return TopologyDescription.parse("INFO starting\n" + json.dumps(DESCRIBE))


def test_fresh_plan_creates_everything_with_inherited_partitions():
    plan = plan_internal_topics(_describe(), "wc", {"words": 6, "clicks": 4})
    assert plan.ready and not plan.mismatches
    created = {t.name: (t.type, t.partitions, t.config) for t in plan.to_create}
    assert created == {
        "wc-x-repartition": ("repartition", 6, {"cleanup.policy": "delete"}),
        "wc-counts-changelog": ("changelog", 6, {"cleanup.policy": "compact"}),  # via the repartition topic
        "wc-fixed-repartition": ("repartition", 12, {}),
    }
    assert plan.max_parallelism == 6
    assert [s.state for s in plan.status()] == ["Missing", "Missing", "Missing"]
    assert {s.state for s in plan.status(frozenset({"wc-x-repartition"}))} == {"Created", "Missing"}


def test_existing_topics_are_kept_and_mismatches_reported_not_resized():
    existing = {"words": 6, "clicks": 4, "wc-x-repartition": 6, "wc-counts-changelog": 3}
    plan = plan_internal_topics(_describe(), "wc", existing)
    assert not plan.ready
    assert [t.name for t in plan.existing] == ["wc-x-repartition"]
    assert [t.name for t in plan.to_create] == ["wc-fixed-repartition"]
    (mismatch,) = plan.mismatches
    assert (mismatch.name, mismatch.expected_partitions, mismatch.actual_partitions) == (
        "wc-counts-changelog",
        6,
        3,
    )
    assert "never resizes" in plan.problems()[0]
    assert "upgrade mode reset" not in plan.problems()[0], "reset cannot run while topics mismatch"
    states = {s.name: (s.state, s.actual_partitions) for s in plan.status()}
    assert states["wc-counts-changelog"] == ("Mismatch", 3)
    assert states["wc-x-repartition"] == ("Ready", 6)


def test_missing_source_topic_blocks_dependent_topics():
    plan = plan_internal_topics(_describe(), "wc", {"words": 6})
    assert plan.missing_sources == ["clicks"]
    assert [t.name for t in plan.to_create] == ["wc-fixed-repartition"]
    assert "waiting for source topics to exist: clicks" in plan.problems()


def test_cleanup_names_and_fingerprint():
    d = _describe()
    assert internal_topic_names(d, "wc") == [
        "wc-counts-changelog",
        "wc-fixed-repartition",
        "wc-x-repartition",
    ]
    reordered = TopologyDescription.model_validate(json.loads(json.dumps(DESCRIBE, sort_keys=True)))
    assert reordered.fingerprint() == d.fingerprint()
    changed = json.loads(json.dumps(DESCRIBE))
    changed["internal_topics"][2]["partitions"] = 24
    assert TopologyDescription.model_validate(changed).fingerprint() != d.fingerprint()


def test_describe_output_is_validated():
    with pytest.raises(ValueError, match="no JSON object"):
        TopologyDescription.parse("Traceback: ImportError")
    bad = {"internal_topics": [{"name": "x-changelog", "type": "changelog"}]}
    with pytest.raises(ValidationError, match="neither partitions nor partitions_from"):
        TopologyDescription.model_validate(bad)
