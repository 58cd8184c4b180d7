"""`act()` carries out a decision's effects in order; the failures it absorbs and the ones it raises.

The clients are recorders (no cluster, no broker): what matters here is the order of calls and which
failure stops the pass (reconcile.py's catch ladder then reports it) and which one only ends in status.
"""

from __future__ import annotations

from typing import Any

import pytest

from kappaflow_operator.act import act
from kappaflow_operator.context import Context
from kappaflow_operator.effects import Apply, CreateTopics, Delete, DeleteTopics, Event, ExpandClaim, Patch
from kappaflow_operator.k8s import Kube, KubeError
from kappaflow_operator.kafka import KafkaAdmin, KafkaError
from kappaflow_operator.topics import TopicSpec

BODY = {"metadata": {"name": "wc", "namespace": "ns", "uid": "u1"}}
TOPIC = TopicSpec("wc-c-changelog", "changelog", 4, {})


class _Kube(Kube):
    def __init__(self, refuse_patch: bool = False) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.refuse_patch = refuse_patch

    def apply(self, obj: Any) -> dict[str, Any]:
        self.calls.append(("apply", obj["kind"]))
        return dict(obj)

    def delete(
        self, api_version: str, kind: str, namespace: str, name: str, *, propagation: str = ""
    ) -> bool:
        self.calls.append(("delete", kind, name, propagation))
        return name != "gone"

    def patch(self, api_version: str, kind: str, namespace: str, name: str, body: Any) -> None:
        if self.refuse_patch:
            raise KubeError(403, "expansion forbidden")
        self.calls.append(("patch", kind, name))

    def event(self, involved: Any, type_: str, reason: str, message: str) -> None:
        self.calls.append(("event", reason, message))


class _Admin(KafkaAdmin):
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.created: list[str] = []

    def create_topics(self, specs: Any, replication_factor: int = -1) -> list[str]:
        if self.fail:
            raise KafkaError("TOPIC_DELETION_IN_PROGRESS")
        self.created += [s.name for s in specs]
        return [s.name for s in specs]

    def delete_topics(self, names: Any) -> list[str]:
        return list(names)


def _ctx(kube: _Kube) -> Context:
    return Context(kube, kafka_factory=lambda *_: _Admin())


def test_effects_run_in_order_and_announce_what_happened() -> None:
    kube = _Kube()
    admin = _Admin()
    effects = [
        CreateTopics([TOPIC], 1),
        Apply({"kind": "ConfigMap"}),
        Patch("v1", "ConfigMap", "wc-topology", {}),
        Delete("v1", "Service", "wc-query", announce=True),
        Delete("v1", "Service", "gone", announce=True),
        DeleteTopics(["old"], announce=True),
        Event("Normal", "Created", "applied"),
    ]
    assert act(_ctx(kube), BODY, effects, admin) == []
    assert admin.created == ["wc-c-changelog"]
    assert kube.calls == [
        ("event", "TopicsCreated", "created wc-c-changelog"),
        ("apply", "ConfigMap"),
        ("patch", "ConfigMap", "wc-topology"),
        ("delete", "Service", "wc-query", "Background"),
        ("event", "Deleted", "deleted Service wc-query"),
        ("delete", "Service", "gone", "Background"),
        ("event", "TopicsDeleted", "deleted old"),
        ("event", "Created", "applied"),
    ]


def test_a_refused_claim_resize_is_a_problem_not_a_failure() -> None:
    kube = _Kube(refuse_patch=True)
    problems = act(_ctx(kube), BODY, [ExpandClaim("state-wc-0", "2Gi"), Apply({"kind": "StatefulSet"})], None)
    assert [p.reason for p in problems] == ["VolumeExpansionFailed"]
    assert ("apply", "StatefulSet") in kube.calls, "the pass goes on"


def test_a_kafka_failure_stops_the_pass_unless_it_is_expected() -> None:
    kube = _Kube()
    with pytest.raises(KafkaError):
        act(_ctx(kube), BODY, [CreateTopics([TOPIC], 1), Apply({"kind": "StatefulSet"})], _Admin(fail=True))
    assert kube.calls == [], "nothing after the failed effect"
    act(_ctx(kube), BODY, [CreateTopics([TOPIC], 1, tolerate_errors=True)], _Admin(fail=True))
    assert kube.calls == []
