"""The reconcile decision with tasks on the move: warm-ups in status and the autoscaler's hold, a scale-in
held for caught-up standbys and then released (decide() on plain snapshots, no cluster)."""

from __future__ import annotations

from datetime import timedelta

from kappaflow_operator.decide import decide
from kappaflow_operator.snapshot import LocalTask, PodTasks
from tests.operator.specs import REF, spec_dict
from tests.operator.test_decide import AUTO, T0, _applied, _cond, _reasons, _running, _snap

NAME = REF.name


def _pods(*roles: dict[str, tuple[str, int | None]]) -> list[PodTasks]:
    return [
        PodTasks(f"{NAME}-{i}", {t: LocalTask(role, lag) for t, (role, lag) in tasks.items()})
        for i, tasks in enumerate(roles)
    ]


def test_warmups_show_in_status_and_hold_the_autoscaler() -> None:
    spec = spec_dict(replicas=1, autoscaling=AUTO)
    sts = _running(decide(_snap(spec_dict(replicas=2)), now=T0), ready=1)  # wc-1 has not joined yet
    pods = _pods(
        {"0_0": ("active", 0), "0_1": ("active", 0), "0_2": ("active", 0), "0_3": ("active", 0)},
        {"0_2": ("warmup", 1200), "0_3": ("warmup", 40)},
    )
    status = {"autoscaler": {"desiredReplicas": 2}}
    d = decide(_snap(spec, status, statefulset=sts, pod_tasks=pods, lag=35), now=T0, tick=True)
    auto = d.status.autoscaler
    assert auto is not None and auto.desired_replicas == 2 and "Autoscaled" not in _reasons(d)
    assert auto.last_decision is not None and "2 tasks warming up on wordcount-1" in auto.last_decision.reason
    assert (auto.warmup_tasks, auto.warmup_max_lag) == (2, 1200)
    moving = d.status.task_movement
    assert moving is not None and (moving.warmup_tasks, moving.warmup_max_lag) == (2, 1200)
    assert moving.warmup_pods == [f"{NAME}-1"]
    status_, reason, message = _cond(d, "Progressing")
    assert (status_, reason, d.status.phase) == ("True", "WarmingUp", "Scaling")
    assert message.startswith(f"scaling out: 2 tasks warming up on pod {NAME}-1 (largest lag 1200 records)")
    assert _applied(d)["spec"]["replicas"] == 2 and d.wait is None
    # caught up and joined: the block goes, and the autoscaler decides again (here: up to 4)
    sts = _running(decide(_snap(spec_dict(replicas=2)), now=T0))
    joined = _pods({"0_0": ("active", 0), "0_1": ("active", 0)}, {"0_2": ("active", 0), "0_3": ("active", 0)})
    later = T0 + timedelta(minutes=5)
    d = decide(_snap(spec, d.wire(), statefulset=sts, pod_tasks=joined, lag=35), now=later, tick=True)
    assert d.wire()["taskMovement"] is None and "Autoscaled" in _reasons(d)
    assert d.status.autoscaler is not None and d.status.autoscaler.warmup_tasks == 0


def test_a_scale_in_is_held_for_caught_up_standbys_then_released() -> None:
    three = spec_dict(replicas=3, standbyReplicas=1, config={"acceptable.recovery.lag": "100"})
    sts = _running(decide(_snap(three), now=T0))
    two = {**three, "replicas": 2}
    behind = _pods(
        {"0_0": ("active", 0), "0_3": ("standby", 5000)},
        {"0_1": ("active", 0), "0_2": ("standby", 0)},
        {"0_2": ("active", 0), "0_3": ("active", 0), "0_0": ("standby", 0)},
    )
    held = decide(_snap(two, statefulset=sts, pod_tasks=behind), now=T0)
    assert _applied(held)["spec"]["replicas"] == 3 and "ScaleInHeld" in _reasons(held)
    assert held.wait is not None and held.wait.delay <= 300
    moving = held.status.task_movement
    assert moving is not None and moving.scale_in_to == 2 and moving.scale_in_held_since == T0
    assert moving.waiting_for == [f"0_3@{NAME}-2"]
    status_, reason, message = _cond(held, "Progressing")
    assert (status_, reason) == ("True", "ScaleInHeld") and "scale-in 3 -> 2 held" in message
    assert held.status.phase == "Scaling"

    # still behind a minute later: held, the wait counted from the first pass
    later = decide(_snap(two, held.wire(), statefulset=sts, pod_tasks=behind), now=T0 + timedelta(seconds=60))
    assert _applied(later)["spec"]["replicas"] == 3
    assert later.status.task_movement is not None and later.status.task_movement.scale_in_held_since == T0

    # the standby caught up: the StatefulSet loses its pod
    caught_up = [
        PodTasks(behind[0].pod, {**behind[0].tasks, "0_3": LocalTask("standby", 20)}),
        *behind[1:],
    ]
    released = decide(
        _snap(two, later.wire(), statefulset=sts, pod_tasks=caught_up), now=T0 + timedelta(seconds=90)
    )
    assert _applied(released)["spec"]["replicas"] == 2 and released.wait is None
    assert released.wire()["taskMovement"] is None


def test_a_held_scale_in_proceeds_after_standby_wait_seconds() -> None:
    three = spec_dict(replicas=3, standbyReplicas=1, scaleIn={"standbyWaitSeconds": 60})
    sts = _running(decide(_snap(three), now=T0))
    two = {**three, "replicas": 2}
    unprotected = _pods({"0_3": ("standby", 50_000)}, {}, {"0_3": ("active", 0)})  # far behind
    held = decide(_snap(two, statefulset=sts, pod_tasks=unprotected), now=T0)
    assert _applied(held)["spec"]["replicas"] == 3
    over = decide(
        _snap(two, held.wire(), statefulset=sts, pod_tasks=unprotected), now=T0 + timedelta(seconds=61)
    )
    assert _applied(over)["spec"]["replicas"] == 2 and over.wait is None
    assert "ScaleInProceeds" in _reasons(over)


def test_without_standbys_a_scale_in_is_not_held() -> None:
    sts = _running(decide(_snap(spec_dict(replicas=3)), now=T0))
    d = decide(
        _snap(spec_dict(replicas=2), statefulset=sts, pod_tasks=_pods({}, {}, {"0_3": ("active", 0)})), now=T0
    )
    assert _applied(d)["spec"]["replicas"] == 2 and d.wait is None and "ScaleInHeld" not in _reasons(d)
