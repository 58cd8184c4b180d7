"""The static members of pods a scale-in removed: found (departed.py), decided (`decide`), removed (`act`).

The pods are static members that stay in the group after SIGTERM (Kafka Streams' default), so without
the operator a scale-in's tasks wait out `session.timeout.ms`. These tests pin which members go and when:
only pods at or past the replica count, only once they no longer exist, never a pod that is coming back.
The broker's side (describe and LeaveGroup against a real group) is tests/kafka/test_operator_group.py.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kappaflow_operator.act import act
from kappaflow_operator.context import Context
from kappaflow_operator.decide import decide
from kappaflow_operator.departed import STOPPING_RETRY_S, departures, member_pod
from kappaflow_operator.effects import RemoveGroupMembers
from kappaflow_operator.kafka import KafkaAdmin, KafkaError
from tests.operator.specs import spec_dict
from tests.operator.test_act import BODY, _Kube
from tests.operator.test_decide import _running, _snap

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_member_is_matched_to_its_pod_and_workers_to_theirs() -> None:
    assert member_pod("wc-3", "wc") == ("wc-3", 3)
    assert member_pod("wc-3-2", "wc") == ("wc-3", 3), "worker 2 of pod wc-3 (streamThreads > 1)"
    for other in ("wc", "wc-", "wc-03", "wc-3-0", "wc-x", "wcx-3", "other-3", "wc-3-2-1", "3"):
        assert member_pod(other, "wc") is None, other
    assert member_pod("my.app-1", "my.app") == ("my.app-1", 1), "the name is matched literally"


def test_members_of_removed_pods_go_once_the_pods_are_gone() -> None:
    members = ["wc-0", "wc-1", "wc-2-1", "wc-2-2", "wc-3", "someone-else"]
    found = departures("wc", 2, {"wc-0", "wc-1", "wc-3"}, members)
    assert found.removable == ("wc-2-1", "wc-2-2"), "pod wc-2 is gone: both its workers"
    assert found.stopping == ("wc-3",), "wc-3 still stops: it commits its last work as a member"
    assert found.effects("app") == [RemoveGroupMembers("app", ("wc-2-1", "wc-2-2"))]
    wait = found.wait("app")
    assert wait is not None and wait.delay == STOPPING_RETRY_S and "wc-3" in wait.reason


def test_pods_below_the_replica_count_are_never_removed_even_while_absent() -> None:
    """A pod the StatefulSet is recreating (deleted, evicted, its node lost) comes back under its name and
    takes its tasks back as the same static member: removing it would cost the rebalance static
    membership exists to avoid."""
    found = departures("wc", 3, {"wc-0"}, ["wc-0", "wc-1", "wc-2"])
    assert found.removable == () and found.stopping == ()
    assert found.effects("app") == [] and found.wait("app") is None


def _pods(*names: str) -> list[dict[str, Any]]:
    return [{"metadata": {"name": n}} for n in names]


def test_a_scale_in_waits_for_its_pods_to_stop_then_removes_their_members() -> None:
    sts = _running(decide(_snap(), now=T0))  # 3 replicas, running
    members = ["wordcount-0", "wordcount-1", "wordcount-2"]
    pods = _pods("wordcount-0", "wordcount-1", "wordcount-2")
    scaling = decide(_snap(spec_dict(replicas=1), statefulset=sts, pods=pods, static_members=members), now=T0)
    assert not any(isinstance(e, RemoveGroupMembers) for e in scaling.effects), "the pods still run"
    assert scaling.wait is not None and "wordcount-1, wordcount-2" in scaling.wait.reason
    sts_1 = _running(scaling)
    assert sts_1["spec"]["replicas"] == 1
    stopped = decide(
        _snap(spec_dict(replicas=1), statefulset=sts_1, pods=_pods("wordcount-0"), static_members=members),
        now=T0,
    )
    assert [e for e in stopped.effects if isinstance(e, RemoveGroupMembers)] == [
        RemoveGroupMembers("wordcount", ("wordcount-1", "wordcount-2"))
    ]
    assert stopped.wait is None
    settled = decide(
        _snap(
            spec_dict(replicas=1), statefulset=sts_1, pods=_pods("wordcount-0"), static_members=members[:1]
        ),
        now=T0,
    )
    assert not any(isinstance(e, RemoveGroupMembers) for e in settled.effects) and settled.wait is None


def test_an_unreadable_group_is_an_event_and_nothing_is_removed() -> None:
    sts = _running(decide(_snap(spec_dict(replicas=1)), now=T0))
    d = decide(
        _snap(spec_dict(replicas=1), statefulset=sts, static_members_error="cannot describe group wordcount"),
        now=T0,
    )
    assert [e.reason for e in d.events] == ["GroupUnavailable"]
    assert not any(isinstance(e, RemoveGroupMembers) for e in d.effects) and d.wait is None


class _GroupAdmin(KafkaAdmin):
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.removed: list[tuple[str, list[str]]] = []

    def remove_static_members(self, group: str, instance_ids: list[str]) -> None:
        if self.fail:
            raise KafkaError(f"cannot remove {', '.join(instance_ids)} from group {group}: LeaveGroup: boom")
        self.removed.append((group, instance_ids))


def test_act_removes_the_members_and_says_so_and_a_refusal_stops_nothing() -> None:
    kube = _Kube()
    ctx = Context(kube, kafka_factory=lambda *_: _GroupAdmin())
    admin = _GroupAdmin()
    act(ctx, BODY, [RemoveGroupMembers("app", ("wc-2",))], admin)
    assert admin.removed == [("app", ["wc-2"])]
    assert [c[1] for c in kube.calls] == ["MembersRemoved"] and "wc-2" in kube.calls[0][2]
    kube.calls.clear()
    act(
        ctx,
        BODY,
        [RemoveGroupMembers("app", ("wc-2",)), RemoveGroupMembers("app", ("wc-3",))],
        _GroupAdmin(True),
    )
    assert [c[1] for c in kube.calls] == ["MemberRemovalFailed", "MemberRemovalFailed"], "the pass goes on"
