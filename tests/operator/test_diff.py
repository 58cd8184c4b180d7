"""Spec change classification per upgrade mode."""

from __future__ import annotations

import pytest

from kappaflow_operator.diff import Action, ChangeKind, changed_paths, classify

from .specs import spec


def test_creation_needs_describe():
    d = classify(None, spec())
    assert d.kind is ChangeKind.TOPOLOGY and d.needs_describe


def test_no_change_and_operator_only_changes_are_noops():
    assert classify(spec(), spec()).kind is ChangeKind.NOOP
    d = classify(spec(), spec(autoscaling={"enabled": True}, topicCleanupPolicy="Delete"))
    assert d.kind is ChangeKind.NOOP and d.action is Action.NONE
    assert "autoscaling.enabled" in d.changed and "topicCleanupPolicy" in d.changed


def test_replicas_only_is_scale():
    d = classify(spec(replicas=3), spec(replicas=5))
    assert (d.kind, d.action, d.changed) == (ChangeKind.SCALE, Action.SCALE, ["replicas"])


@pytest.mark.parametrize(
    "change",
    [
        {"config": {"commit.interval.ms": "50"}},
        {"resources": {"limits": {"memory": "1Gi"}}},
        {"processingGuarantee": "exactly_once_v2"},
        {"podTemplate": {"labels": {"a": "b"}}},
    ],
)
@pytest.mark.parametrize("mode", ["rolling", "reprocess", "reset"])
def test_pod_changes_roll_in_every_mode(change, mode):
    d = classify(spec(upgrade={"mode": mode}), spec(upgrade={"mode": mode}, **change))
    assert (d.kind, d.action) == (ChangeKind.ROLLING, Action.ROLL)
    assert not d.needs_describe


def test_scale_with_config_rolls():
    d = classify(spec(replicas=1), spec(replicas=2, config={"a.b": "c"}))
    assert d.kind is ChangeKind.ROLLING


def test_image_change_in_rolling_mode_depends_on_topology():
    old, new = spec(), spec(image="registry.example/wordcount:2.0.0")
    assert classify(old, new).needs_describe
    same = classify(old, new, old_topology="t1", new_topology="t1")
    assert (same.kind, same.action, same.needs_describe) == (ChangeKind.ROLLING, Action.ROLL, False)
    changed = classify(old, new, old_topology="t1", new_topology="t2")
    assert (changed.kind, changed.action) == (ChangeKind.TOPOLOGY, Action.ROLL)


@pytest.mark.parametrize(("mode", "action"), [("reprocess", Action.REPROCESS), ("reset", Action.RESET)])
def test_image_or_identity_change_rebuilds_in_reprocess_and_reset_modes(mode, action):
    up = {"mode": mode}
    d = classify(
        spec(upgrade=up),
        spec(upgrade=up, image="registry.example/wordcount:2.0.0"),
        old_topology="t",
        new_topology="t",
    )
    assert (d.kind, d.action) == (ChangeKind.TOPOLOGY, action)
    d = classify(spec(upgrade=up), spec(upgrade=up, entryPoint="examples.wordcount:v2"))
    assert (d.kind, d.action, d.needs_describe) == (ChangeKind.TOPOLOGY, action, True)


def test_state_volume_change_needs_statefulset_recreation():
    d = classify(spec(), spec(state={"size": "10Gi"}))
    assert d.kind is ChangeKind.ROLLING and d.recreate_statefulset
    assert d.changed == ["state.size"]


def test_changed_paths():
    assert changed_paths({"a": {"b": 1, "c": 2}}, {"a": {"b": 1, "c": 3}, "d": 4}) == ["a.c", "d"]
