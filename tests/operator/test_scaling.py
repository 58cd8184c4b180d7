"""Replica caps and the lag-based autoscaler."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kappaflow_operator.models import StreamAppStatus
from kappaflow_operator.scaling import autoscale, cap_replicas, effective_replicas, requested_replicas

from .specs import spec

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def _auto(**kw):
    args = {
        "current": 2,
        "total_lag": 20_000,
        "lag_per_replica": 10_000,
        "min_replicas": 1,
        "max_replicas": 10,
        "scale_up_cooldown_s": 60,
        "scale_down_cooldown_s": 300,
        "last_scale_time": None,
        "now": NOW,
    }
    args.update(kw)
    return autoscale(**args)


def test_cap_at_partition_count_with_reason():
    assert cap_replicas(4, 6).reason is None
    capped = cap_replicas(8, 6)
    assert capped.replicas == 6
    assert "8 replicas requested" in capped.reason and "6 partitions" in capped.reason
    assert cap_replicas(8, None).replicas == 8


def test_autoscaler_scales_up_and_down_to_lag():
    up = _auto(total_lag=55_000)
    assert (up.replicas, up.changed) == (6, True)
    down = _auto(current=6, total_lag=5_000)
    assert (down.replicas, down.changed) == (1, True)
    assert _auto(current=2, total_lag=20_000).changed is False


def test_bounds_and_parallelism():
    assert _auto(total_lag=10**9).replicas == 10
    assert _auto(total_lag=10**9, max_parallelism=4).replicas == 4
    assert _auto(current=3, total_lag=0, min_replicas=2).replicas == 2
    out_of_bounds = _auto(current=12, total_lag=10**9, last_scale_time=NOW)
    assert (out_of_bounds.replicas, out_of_bounds.changed) == (10, True)  # cooldown does not apply


def test_cooldowns():
    recent = NOW - timedelta(seconds=30)
    held = _auto(total_lag=55_000, last_scale_time=recent)
    assert (held.replicas, held.changed) == (2, False)
    assert "held by cooldown (30s left)" in held.reason
    assert _auto(total_lag=55_000, last_scale_time=NOW - timedelta(seconds=61)).replicas == 6
    # scale down waits for the longer cooldown
    assert _auto(current=6, total_lag=0, last_scale_time=NOW - timedelta(seconds=120)).changed is False
    assert _auto(current=6, total_lag=0, last_scale_time=NOW - timedelta(seconds=301)).replicas == 1


def test_tolerance_prevents_flapping():
    assert _auto(current=2, total_lag=21_000).changed is False  # 5% over target
    assert _auto(current=2, total_lag=25_000).replicas == 3


def test_requested_replicas_pause_and_autoscaler():
    assert requested_replicas(spec(replicas=0, autoscaling={"enabled": True}), None) == 0
    auto = spec(replicas=2, autoscaling={"enabled": True, "minReplicas": 3, "maxReplicas": 5})
    assert requested_replicas(auto, None) == 3
    status = StreamAppStatus.model_validate({"autoscaler": {"desiredReplicas": 9}})
    assert requested_replicas(auto, status) == 5
    assert requested_replicas(spec(replicas=4), status) == 4
    capped = effective_replicas(spec(replicas=8), None, 6)
    assert capped.replicas == 6 and capped.reason
