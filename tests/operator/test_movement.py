"""Tasks on the move: the pods' answers, warm-ups, the scale-in hold (pure), and the pods' HTTP client
against the runtime's own health server."""

from __future__ import annotations

import json
import socket
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kappaflow.api.metrics import Metrics
from kappaflow.runner.http import HealthServer
from kappaflow_operator.models import StreamAppStatus, TaskMovement
from kappaflow_operator.movement import (
    Warmups,
    acceptable_recovery_lag,
    parse_pod_tasks,
    read_due,
    scale_in_step,
    uncovered_tasks,
    warmups,
)
from kappaflow_operator.pod_tasks import PodTasksReader
from kappaflow_operator.scaling import autoscale
from kappaflow_operator.snapshot import LocalTask, PodTasks

from .specs import spec

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def _pod(name: str, **tasks: tuple[str, int | None]) -> PodTasks:
    return PodTasks(name, {t.replace("t", "", 1): LocalTask(role, lag) for t, (role, lag) in tasks.items()})


# ---- parsing -------------------------------------------------------------------------------------------
def test_a_health_answer_becomes_the_pods_tasks_with_role_and_lag() -> None:
    body = json.dumps(
        {
            "status": "DOWN",
            "state": "REBALANCING",
            "tasks": {
                "0_1": {"role": "warmup", "lag": 1200},
                "0_2": {"role": "standby", "lag": None},
                "0_3": {"role": "future-role", "lag": 1},
                "0_4": "garbage",
            },
        }
    )
    pod = parse_pod_tasks("wc-3", body)
    assert pod.error is None
    assert pod.tasks == {"0_1": LocalTask("warmup", 1200), "0_2": LocalTask("standby", None)}


@pytest.mark.parametrize(
    ("body", "why"), [("not json", "no JSON"), ('{"status": "UP"}', "no tasks"), ("[1]", "no tasks")]
)
def test_an_answer_without_tasks_is_an_error_not_an_empty_pod(body: str, why: str) -> None:
    pod = parse_pod_tasks("wc-0", body)
    assert pod.tasks == {} and pod.error is not None and why in pod.error


# ---- warm-ups ------------------------------------------------------------------------------------------
def test_warmups_are_counted_across_pods_with_the_largest_lag() -> None:
    pods = [
        _pod("wc-0", t0_0=("active", 0), t0_1=("standby", 30)),
        _pod("wc-1", t0_2=("restoring", 400)),
        _pod("wc-2", t0_1=("warmup", 1200), t0_3=("warmup", 80), t0_4=("warmup", None)),
        PodTasks("wc-3", error="connection refused"),
    ]
    found = warmups(pods)
    assert (found.count, found.max_lag, found.pods, found.restoring) == (3, 1200, ("wc-2",), 1)
    assert found.unreachable == ("wc-3: connection refused",)
    message = found.message(scaling_out=True)
    assert message.startswith("scaling out: 3 tasks warming up on pod wc-2 (largest lag 1200 records)")
    assert warmups([_pod("wc-0", t0_0=("active", 0))]).message(True) == ""


# ---- the scale-in rule ---------------------------------------------------------------------------------
STAYING_CAUGHT_UP = _pod("wc-0", t0_0=("active", 0), t0_2=("standby", 50), t0_3=("standby", 9000))
REMOVED = _pod("wc-2", t0_2=("active", 0), t0_3=("active", 0), t0_4=("standby", 0))


def test_a_removed_pods_task_is_covered_only_by_a_caught_up_standby_on_a_staying_pod() -> None:
    pods = [STAYING_CAUGHT_UP, _pod("wc-1", t0_3=("standby", None)), REMOVED]
    # 0_2: standby 50 behind <= 100 on wc-0; 0_3: 9000 behind on wc-0, lag unknown on wc-1
    assert uncovered_tasks(pods, "wc", 2, acceptable_lag=100) == ("0_3@wc-2",)
    assert uncovered_tasks(pods, "wc", 2, acceptable_lag=10_000) == ()
    # a caught-up standby on a pod that is removed too does not count
    on_wc1 = [STAYING_CAUGHT_UP, _pod("wc-1", t0_3=("standby", 0)), REMOVED]
    assert uncovered_tasks(on_wc1, "wc", 2, acceptable_lag=100) == ()
    assert uncovered_tasks(on_wc1, "wc", 1, acceptable_lag=100) == ("0_3@wc-2",)
    # a staying pod that did not answer covers nothing; a removed one that did not answer hands nothing
    silent = [PodTasks("wc-0", error="timed out"), REMOVED, PodTasks("wc-3", error="refused")]
    assert uncovered_tasks(silent, "wc", 2, acceptable_lag=10_000) == ("0_2@wc-2", "0_3@wc-2")


def _step(**kw: Any):
    args: dict[str, Any] = {
        "name": "wc",
        "current": 3,
        "target": 2,
        "pods": [STAYING_CAUGHT_UP, REMOVED],
        "acceptable_lag": 100,
        "standby_replicas": 1,
        "wait_s": 300,
        "held_to": None,
        "held_since": None,
        "now": NOW,
        "retry_s": 10.0,
    }
    args.update(kw)
    return scale_in_step(**args)


def test_a_scale_in_is_held_until_the_standbys_are_caught_up() -> None:
    held = _step()
    assert held.held and held.replicas == 3 and held.target == 2 and held.since == NOW
    assert held.waiting_for == ("0_3@wc-2",) and held.retry_s == 10.0
    assert "scale-in 3 -> 2 held" in held.message and "wc-2" in held.message and "300s left" in held.message
    # a later pass keeps the hold's start; once the standby caught up, the scale-in goes ahead
    later = _step(held_to=2, held_since=NOW, now=NOW + timedelta(seconds=100))
    assert later.held and later.since == NOW and "200s left" in later.message
    caught_up = [_pod("wc-0", t0_2=("standby", 0), t0_3=("standby", 99)), REMOVED]
    released = _step(pods=caught_up, held_to=2, held_since=NOW, now=NOW + timedelta(seconds=100))
    assert not released.held and released.replicas == 2 and released.message == ""


def test_a_held_scale_in_proceeds_once_the_wait_is_over_and_says_what_restores() -> None:
    over = _step(held_to=2, held_since=NOW, now=NOW + timedelta(seconds=300))
    assert not over.held and over.replicas == 2 and over.waiting_for == ("0_3@wc-2",)
    assert "proceeds after waiting 300s" in over.message and "0_3@wc-2" in over.message
    # a hold on another target starts its own wait
    other = _step(target=1, held_to=2, held_since=NOW - timedelta(seconds=1000))
    assert other.held and other.since == NOW


@pytest.mark.parametrize(
    ("kw", "replicas"),
    [
        ({"target": 4}, 4),  # a scale-up
        ({"target": 3}, 3),  # no change
        ({"target": 0}, 0),  # a pause: nothing stays to hand over to
        ({"standby_replicas": 0}, 2),  # no standbys to wait for
        ({"wait_s": 0}, 2),  # waiting switched off
    ],
)
def test_what_is_never_held(kw: dict[str, Any], replicas: int) -> None:
    step = _step(**kw)
    assert not step.held and step.replicas == replicas and step.message == ""


def test_a_scale_in_by_several_pods_goes_as_far_as_the_standbys_cover_first() -> None:
    # 4 -> 2: wc-3's task has its caught-up standby on wc-2 (where the group sends it when wc-3 alone
    # leaves), which goes too; so remove wc-3 first, and hold the rest for the next placement
    pods = [
        _pod("wc-0", t0_0=("active", 0)),
        _pod("wc-1", t0_1=("active", 0)),
        _pod("wc-2", t0_2=("active", 0), t0_3=("standby", 0)),
        _pod("wc-3", t0_3=("active", 0), t0_2=("standby", 0)),
    ]
    step = _step(current=4, target=2, pods=pods)
    assert step.held and step.replicas == 3 and step.target == 2
    assert "going to 3 first" in step.message and step.waiting_for == ("0_2@wc-2", "0_3@wc-3")
    # nothing covered at all: all four stay
    # stateful tasks (a standby of each is kept, far behind, on a pod that goes too) with no caught-up copy
    bare = [_pod("wc-0"), _pod("wc-1"), _pod("wc-2", t0_2=("active", 0), t0_3=("standby", 50_000)),
            _pod("wc-3", t0_3=("active", 0), t0_2=("standby", 50_000))]  # fmt: skip
    assert _step(current=4, target=2, pods=bare).replicas == 4


def test_pods_not_read_count_as_nothing_verified() -> None:
    step = _step(pods=None)
    assert step.held and "not read" in step.message


def test_the_acceptable_lag_comes_from_the_config_or_kafka_streams_default() -> None:
    assert acceptable_recovery_lag(spec()) == 10_000
    assert acceptable_recovery_lag(spec(config={"acceptable.recovery.lag": "250"})) == 250


def test_pods_are_read_on_timer_passes_and_whenever_a_scale_in_is_pending_or_held() -> None:
    two = spec(replicas=2)
    assert read_due(two, None, 2, tick=True)
    assert not read_due(two, None, 2, tick=False)
    assert read_due(two, None, 3, tick=False)  # the StatefulSet runs more than is requested
    held = StreamAppStatus(task_movement=TaskMovement(scale_in_to=2, scale_in_held_since=NOW))
    assert read_due(spec(replicas=3), held, 3, tick=False)
    assert not read_due(spec(replicas=0), None, 3, tick=True)  # a pause reads nothing


# ---- the autoscaler during warm-ups --------------------------------------------------------------------
@pytest.mark.parametrize(("lag", "direction"), [(55_000, "up"), (0, "down")])
def test_the_autoscaler_takes_no_step_in_either_direction_while_tasks_warm_up(
    lag: int, direction: str
) -> None:
    args: dict[str, Any] = {
        "current": 3,
        "total_lag": lag,
        "lag_per_replica": 10_000,
        "min_replicas": 1,
        "max_replicas": 10,
        "scale_up_cooldown_s": 0,
        "scale_down_cooldown_s": 0,
        "last_scale_time": None,
        "now": NOW,
    }
    held = autoscale(**args, warming_up=4, warming_on="wc-3")
    assert not held.changed and held.replicas == 3
    assert held.reason.startswith(f"scale {direction} to") and "4 tasks warming up on wc-3" in held.reason
    assert autoscale(**args).changed  # the same lag without warm-ups scales
    # out of bounds is corrected at once all the same (the spec changed, not the load)
    corrected = autoscale(**{**args, "max_replicas": 2}, warming_up=4)
    assert corrected.changed and corrected.replicas <= 2


# ---- the pods' HTTP client, against the runtime's own health server ------------------------------------
def _health_server(ready: bool, roles: dict[str, dict[str, Any]]) -> HealthServer:
    server = HealthServer(
        "127.0.0.1", 0, Metrics(), lambda: True, lambda: ready, lambda: {"state": "X", "tasks": roles}
    )
    server.start()
    return server


def _pod_object(name: str, port_ip: str = "127.0.0.1", phase: str = "Running", **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, **meta}, "status": {"phase": phase, "podIP": port_ip}}


def test_the_reader_reads_ready_and_unready_pods_and_reports_the_unreachable() -> None:
    warming = _health_server(False, {"0_3": {"role": "warmup", "lag": 700}})  # answers 503
    try:
        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            dead_port = s.getsockname()[1]
        reader = PodTasksReader(timeout_s=2.0)
        found = reader([_pod_object("wc-3")], warming.port)
        assert found == [PodTasks("wc-3", {"0_3": LocalTask("warmup", 700)})]
        assert reader.read_one("wc-0", "127.0.0.1", dead_port).error is not None
        skipped = [
            _pod_object("wc-1", phase="Pending"),
            _pod_object("wc-2", deletionTimestamp="2026-01-01T00:00:00Z"),
            {"metadata": {"name": "wc-4"}, "status": {"phase": "Running"}},  # no IP yet
        ]
        assert reader(skipped, warming.port) == []
    finally:
        warming.stop()


def test_warmups_summary_is_empty_without_pods() -> None:
    assert warmups([]) == Warmups()


def test_a_stateless_task_needs_no_standby_to_scale_in() -> None:
    """The word count's splitting sub-topology (tasks 0_x) has no store, so no standby anywhere: found
    on the real node, where every scale-in of the example waited out the whole timeout for one."""
    pods = [
        _pod("wc-0", t0_0=("active", 0), t1_0=("active", 0), t1_1=("standby", 3)),
        _pod("wc-1", t0_1=("active", 0), t1_1=("active", 0), t1_0=("standby", 2)),
    ]
    assert uncovered_tasks(pods, "wc", 1, acceptable_lag=100) == ()
    behind = [pods[0], _pod("wc-1", t0_1=("active", 0), t1_1=("active", 0))]
    behind[0] = _pod("wc-0", t0_0=("active", 0), t1_0=("active", 0), t1_1=("standby", 5000))
    assert uncovered_tasks(behind, "wc", 1, acceptable_lag=100) == ("1_1@wc-1",)
