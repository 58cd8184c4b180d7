"""Replica decisions, pure: the parallelism cap and the lag-based autoscaler.

The kopf timer measures the group's total lag, calls `autoscale(...)` with the time it read and the
status' autoscaler memory, and writes the decision to status (and an event when it changes replicas).
`effective_replicas` is what the StatefulSet gets; `kubectl scale` writes spec.replicas through the
scale subresource and is honoured whenever the autoscaler is off.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from .models import AutoscalerDecision, AutoscalerStatus, StreamAppSpec, StreamAppStatus


@dataclass(frozen=True)
class CapResult:
    replicas: int
    reason: str | None
    """Why the request was reduced (None when it was not)."""


def cap_replicas(requested: int, max_parallelism: int | None) -> CapResult:
    """Cap `requested` at the topology's parallelism; pods past it would get no partitions."""
    if max_parallelism is None or requested <= max_parallelism:
        return CapResult(requested, None)
    return CapResult(
        max_parallelism,
        f"{requested} replicas requested but the widest input topic has {max_parallelism} partitions; "
        f"running {max_parallelism} (extra pods would get no tasks)",
    )


@dataclass(frozen=True)
class ScaleDecision:
    replicas: int
    reason: str
    changed: bool


def autoscale(
    *,
    current: int,
    total_lag: int,
    lag_per_replica: int,
    min_replicas: int,
    max_replicas: int,
    scale_up_cooldown_s: int,
    scale_down_cooldown_s: int,
    last_scale_time: datetime | None,
    now: datetime,
    max_parallelism: int | None = None,
    tolerance: float = 0.1,
    warming_up: int = 0,
    warming_on: str = "",
) -> ScaleDecision:
    """The replica count the lag calls for, like the HPA's: ceil(lag / target), bounded and damped.

    Damping: within `tolerance` of the target no change is made (no flapping around a boundary), and a
    change in either direction waits out its cooldown since the last scale (scaling up should be quick,
    scaling down slow, because each change is a rebalance that itself causes lag).

    Warm-ups (`warming_up` tasks on the pods `warming_on`, movement.py): no step in either direction
    while the last one's tasks are still moving. The lag of a scale-out stays high until the new pod
    joins, so a second scale-up would only add pods whose warm-ups move tasks again; a scale-in would
    remove pods whose state the move is building.
    """
    upper = max_replicas if max_parallelism is None else max(min(max_replicas, max_parallelism), min_replicas)
    wanted = math.ceil(total_lag / lag_per_replica) if total_lag > 0 else 0
    target = min(max(wanted, min_replicas), upper)
    if current < min_replicas or current > upper:
        # Out of bounds (spec or topology changed): correct immediately, cooldowns do not apply.
        return ScaleDecision(target, f"replicas {current} outside [{min_replicas}, {upper}]", True)
    if target == current:
        return ScaleDecision(current, f"lag {total_lag} fits {current} replicas", False)
    if current > 0 and abs(total_lag / (current * lag_per_replica) - 1.0) <= tolerance:
        return ScaleDecision(current, f"lag {total_lag} within {tolerance:.0%} of target", False)
    if warming_up > 0:
        direction = "up" if target > current else "down"
        return ScaleDecision(
            current,
            f"scale {direction} to {target} held: {warming_up} tasks warming up on {warming_on or 'a pod'}",
            False,
        )
    cooldown = scale_up_cooldown_s if target > current else scale_down_cooldown_s
    if last_scale_time is not None:
        waited = (now - last_scale_time).total_seconds()
        if waited < cooldown:
            direction = "up" if target > current else "down"
            return ScaleDecision(
                current,
                f"scale {direction} to {target} held by cooldown ({math.ceil(cooldown - waited)}s left)",
                False,
            )
    return ScaleDecision(
        target,
        f"lag {total_lag} over target {lag_per_replica}/replica: {current} -> {target} replicas",
        True,
    )


def requested_replicas(spec: StreamAppSpec, status: StreamAppStatus | None) -> int:
    """The replica count before the parallelism cap.

    `replicas: 0` pauses the app whatever the autoscaler says. With autoscaling on, the autoscaler's
    last target wins over spec.replicas (which only seeds it), clamped to the current min/max.
    """
    if spec.replicas == 0:
        return 0
    auto = spec.autoscaling
    if not auto.enabled:
        return spec.replicas
    desired = None
    if status is not None and status.autoscaler is not None:
        desired = status.autoscaler.desired_replicas
    base = spec.replicas if desired is None else desired
    return min(max(base, auto.min_replicas), auto.max_replicas)


def effective_replicas(
    spec: StreamAppSpec, status: StreamAppStatus | None, max_parallelism: int | None
) -> CapResult:
    """What the StatefulSet runs: requested replicas capped at the topology's parallelism."""
    return cap_replicas(requested_replicas(spec, status), max_parallelism)


@dataclass(frozen=True)
class Tick:
    """One autoscaler tick's outcome: the new memory for status, and the reason when it scaled."""

    memory: AutoscalerStatus
    scaled: str | None


def tick(
    spec: StreamAppSpec,
    status: StreamAppStatus | None,
    *,
    lag: int,
    max_parallelism: int | None,
    now: datetime,
    warming_up: int = 0,
    warming_on: str = "",
    warmup_max_lag: int | None = None,
) -> Tick | None:
    """Decide once per `autoscaling.intervalSeconds` from the measured lag; None when it is not time.

    Pure: the caller measured `lag` in the same pass, from the same fresh status it passes here, and
    writes the returned memory with that pass's single status write (never a write of its own, which a
    pass holding an older copy would undo). `warming_up`, `warming_on` and `warmup_max_lag` are the
    pods' warm-ups (movement.warmups), shown in the memory and holding any step (`autoscale`).
    """
    auto = spec.autoscaling
    if not auto.enabled or spec.replicas == 0:
        return None
    memory = status.autoscaler if status is not None else None
    last = memory.last_decision if memory is not None else None
    if last is not None and now - last.time < timedelta(seconds=auto.interval_seconds):
        return None
    current = effective_replicas(spec, status, max_parallelism).replicas
    decision = autoscale(
        current=current,
        total_lag=lag,
        lag_per_replica=auto.lag_per_replica,
        min_replicas=auto.min_replicas,
        max_replicas=auto.max_replicas,
        scale_up_cooldown_s=auto.scale_up_cooldown_seconds,
        scale_down_cooldown_s=auto.scale_down_cooldown_seconds,
        last_scale_time=memory.last_scale_time if memory is not None else None,
        now=now,
        max_parallelism=max_parallelism,
        warming_up=warming_up,
        warming_on=warming_on,
    )
    record = AutoscalerDecision(
        time=now, from_replicas=current, to_replicas=decision.replicas, lag=lag, reason=decision.reason
    )
    last_scale = now if decision.changed else (memory.last_scale_time if memory is not None else None)
    new = AutoscalerStatus(
        desired_replicas=decision.replicas,
        last_scale_time=last_scale,
        last_decision=record,
        warmup_tasks=warming_up,
        warmup_max_lag=warmup_max_lag if warming_up else None,
    )
    return Tick(new, decision.reason if decision.changed else None)


def ignored_scale_request(spec: StreamAppSpec, running: int) -> str | None:
    """Why spec.replicas (e.g. from `kubectl scale`) is not what runs while the autoscaler is on."""
    if not spec.autoscaling.enabled or spec.replicas == 0 or spec.replicas == running:
        return None
    auto = spec.autoscaling
    return (
        f"spec.replicas is {spec.replicas} but autoscaling is enabled and runs {running} "
        f"(bounds {auto.min_replicas}..{auto.max_replicas}); to pin a count, set autoscaling.minReplicas "
        "and maxReplicas, or disable autoscaling (replicas: 0 still pauses)"
    )
