"""The chart's Argo CD health check (Lua), run by a real Lua interpreter on the statuses the operator
computes (`status.compute_status` from the observations a pass makes), in their wire form."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import lupa

from kappaflow_operator.models import StableSpec
from kappaflow_operator.status import STABLE_AFTER_S, Observation, Problem, compute_status

SCRIPT = Path(__file__).resolve().parents[2] / "charts" / "kappaflow" / "files" / "argocd-health.lua"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _sts(replicas: int, ready: int, update: str = "r1") -> dict[str, Any]:
    status = {"replicas": replicas, "readyReplicas": ready, "currentRevision": "r1", "updateRevision": update}
    return {"metadata": {"generation": 1}, "status": {**status, "observedGeneration": 1}}


def health(obj: dict[str, Any]) -> tuple[str, str]:
    """Run the script as Argo CD does: `obj` is the resource, the script's return value its health."""
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)

    def convert(value: Any) -> Any:
        if isinstance(value, dict):
            return lua.table_from({k: convert(v) for k, v in value.items()})
        if isinstance(value, list):
            return lua.table_from([convert(v) for v in value])
        return value

    run = lua.eval(f"function(obj) {SCRIPT.read_text()} end")
    result = run(convert(obj))
    return str(result["status"]), str(result["message"])


def app(obs: Observation | None, *, generation: int = 1, previous: Any = None, **spec: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": "wc", "generation": generation},
        "spec": {"replicas": 1, **spec},
    }
    if obs is not None:
        status = compute_status(previous, obs, name="wc", now=T0)
        obj["status"] = status.to_wire()
    return obj


def test_each_state_the_operator_writes_maps_to_an_argo_health() -> None:
    applied = StableSpec(hash="h", image="img:1", application_id="wc")
    running = app(Observation(1, 1, _sts(1, 1), applied=applied))
    assert health(running) == ("Healthy", "AllReplicasReady: 1/1 pods ready")

    assert health(app(None))[0] == "Progressing"
    describing = app(Observation(1, 1, topology_known=False))
    assert health(describing) == (
        "Progressing",
        "DescribingTopology: waiting for the describe Job to report the topology",
    )
    assert health(app(Observation(1, 2, _sts(2, 1, update="r2")))) == (
        "Progressing",
        "RollingUpdate: 0/2 pods updated",
    )

    broken = app(Observation(1, 1, _sts(1, 0), problems=[Problem("CrashLoopBackOff", "pod wc-0 restarted")]))
    assert health(broken) == ("Degraded", "CrashLoopBackOff: pod wc-0 restarted")

    assert health(app(Observation(1, 0, _sts(0, 0)), replicas=0)) == ("Suspended", "Paused: replicas is 0")
    suspended = app(Observation(1, 1, _sts(1, 1), suspended=True), suspend=True)
    assert health(suspended)[0] == "Suspended"


def test_a_status_older_than_the_spec_is_not_healthy_yet() -> None:
    stale = app(Observation(1, 1, _sts(1, 1)), generation=2)
    assert health(stale) == ("Progressing", "Waiting for the operator to observe generation 2")


def test_a_rolled_back_upgrade_is_degraded_even_with_every_pod_ready() -> None:
    problem = Problem("UpgradeRolledBack", "rolled back to the last stable spec (image img:1)")
    first = compute_status(
        None, Observation(2, 1, _sts(1, 1)), name="wc", now=T0 - timedelta(seconds=STABLE_AFTER_S)
    )
    rolled = app(Observation(2, 1, _sts(1, 1), problems=[problem]), generation=2, previous=first)
    status, message = health(rolled)
    assert status == "Degraded" and message.startswith("UpgradeRolledBack: rolled back")
