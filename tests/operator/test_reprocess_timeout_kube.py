"""`upgrade.spark.timeoutSeconds` enforced on the real control plane: a reprocess that no Spark operator
ever runs is stopped at the deadline, and the old version keeps running with the reason in status.

The SparkApplication CRD is the real one (generated from Kubeflow's published API models, see
tests/spark/spark_operator.py), but nothing runs SparkApplications here: the run stays without a state,
as it would on a cluster whose Spark operator is down or has no room. 60 s is the smallest timeout the
CRD accepts. The deadline counts from the start recorded in status, not from when this operator process
first saw the run (an operator restarted mid-run must not give it a fresh timeout), so the test moves
the recorded start back instead of waiting out the minute.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.e2e.operator_env import wait_for
from tests.operator.test_reconcile_kube import GROUP, PLURAL, VERSION, Env, operator_env

pytestmark = [pytest.mark.kube, pytest.mark.kafka, pytest.mark.timeout(300)]

SPARK = ("sparkoperator.k8s.io", "v1beta2", "sparkapplications")
TIMEOUT_S = 60
HEADSTART_S = TIMEOUT_S - 8


@pytest.fixture(scope="module")
def crd_installed(kube_cluster: Any) -> Any:
    from tests.e2e.operator_env import install_crd
    from tests.spark.spark_operator import install_spark_crd

    install_crd(kube_cluster)
    install_spark_crd(kube_cluster)
    return kube_cluster


@pytest.fixture
def env(crd_installed: Any, kafka_bootstrap: str, kafka_topics: Any) -> Iterator[Env]:
    yield from operator_env(crd_installed, kafka_bootstrap, kafka_topics)


def _spark_applications(env: Env) -> list[str]:
    found = env.custom.list_namespaced_custom_object(*SPARK[:2], env.namespace, SPARK[2])
    return [a["metadata"]["name"] for a in found["items"]]


def _running_id(env: Env) -> str:
    sts = env.apps.read_namespaced_stateful_set("wc", env.namespace)
    return str(sts.metadata.annotations["kappaflow.io/application-id"])


def test_reprocess_past_its_timeout_is_stopped_and_the_old_version_keeps_running(env: Env) -> None:
    old_id = f"wc-{uuid.uuid4().hex[:8]}"
    upgrade = {"mode": "reprocess", "spark": {"timeoutSeconds": TIMEOUT_S}}
    env.create("wc", env.spec(old_id, upgrade=upgrade))
    env.wait_running("wc", 1)

    env.patch_spec("wc", {"image": "registry.example/wordcount:2.0.0"})
    (submitted,) = wait_for("the SparkApplication submitted", lambda: _spark_applications(env))
    wait_for("phase Reprocessing", lambda: env.status("wc").get("phase") == "Reprocessing")
    _backdate_start(env, "wc", HEADSTART_S)

    cond = wait_for(
        "Degraded with ReprocessTimedOut",
        lambda: (c := env.condition("wc", "Degraded")).get("reason") == "ReprocessTimedOut" and c,
        timeout=TIMEOUT_S + 60,
    )
    assert (
        f"SparkApplication {submitted} ran longer than upgrade.spark.timeoutSeconds ({TIMEOUT_S}s)"
        in (cond["message"])
    )
    assert f"application id '{old_id}' keeps running" in cond["message"]
    run = env.status("wc")["reprocessing"]
    assert run["state"] == "Failed" and run["sparkApplication"] == submitted
    assert "ReprocessTimedOut" in env.event_reasons("wc")
    assert _spark_applications(env) == [], "the timed-out run was stopped"
    assert _running_id(env) == old_id
    sts = env.apps.read_namespaced_stateful_set("wc", env.namespace)
    assert sts.spec.template.spec.containers[0].image == "registry.example/wordcount:1.0.0"

    # Later passes keep the old version and do not submit the same run again.
    stamp = env.status("wc")["lastReconciled"]
    wait_for("a later pass", lambda: env.status("wc")["lastReconciled"] > stamp, timeout=30)
    assert _spark_applications(env) == [] and _running_id(env) == old_id
    assert env.condition("wc", "Degraded")["reason"] == "ReprocessTimedOut"


def _backdate_start(env: Env, name: str, seconds: float) -> None:
    """Move status.reprocessing.startedAt back, as a run started that long ago by an earlier operator
    process would have it, until a pass has kept it: a pass that read the status just before the patch
    writes the old start back."""
    first = _started_at(env.status(name)["reprocessing"])
    earlier = first - timedelta(seconds=seconds)
    stamp = earlier.astimezone(UTC).isoformat().replace("+00:00", "Z")
    patch = {"status": {"reprocessing": {"startedAt": stamp}}}

    def kept() -> bool:
        run = env.status(name)["reprocessing"]
        if run["state"] == "Failed" or _started_at(run) <= earlier:
            return True
        env.custom.patch_namespaced_custom_object_status(GROUP, VERSION, env.namespace, PLURAL, name, patch)
        return False

    env.custom.patch_namespaced_custom_object_status(GROUP, VERSION, env.namespace, PLURAL, name, patch)
    wait_for("the earlier start kept", kept, timeout=30, interval=1.0)


def _started_at(run: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(str(run["startedAt"]).replace("Z", "+00:00"))
