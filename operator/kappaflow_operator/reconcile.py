"""Orchestration: one reconcile pass = `observe` (every read), `decide` (pure), `act` (every write), and
one status write. main.py's handlers only delegate here.

One writer, fresh state: the update handler and the periodic timer both call `run_pass`, which takes the
per-app lock and only then reads the StreamApp (`observe`), so a pass never acts on a copy older than
what the previous pass wrote. The application id the pods run under is read from the StatefulSet. The
autoscaler's decision is part of the pass and lands in the same single status write.

Never waiting under the lock: what a pass must wait for (the describe Job, source topics, a Spark run, a
reset's steps, a StatefulSet being deleted) is the decision's `Wait`; the pass writes status, releases
the lock and raises kopf.TemporaryError(delay=...), so kopf calls again. One catch ladder: an API refusal
or an unreachable Kafka while acting ends in a status problem and a later retry.

Where the operator keeps its memory, and why: see decide.py's docstring.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import kopf

from . import metrics, status
from .act import act
from .admins import KafkaAdmins, SecretReferenceError
from .cleanup import decide_cleanup
from .context import RETRY_S, Context, KafkaFactory
from .decide import (
    APPLIED_SPEC_ANNOTATION,
    TOPOLOGY_ANNOTATION,
    UPGRADED_AT_ANNOTATION,
    app_ref,
    decide,
    failed,
)
from .desired.common import ACCEPTED_DESCRIBE_KEY, TOPOLOGY_KEY, topology_configmap_name
from .k8s import Kube, KubeError
from .kafka import KafkaError
from .observe import admin_for, observe, read_app
from .snapshot import Snapshot, spec_or_none

DESCRIBE_KEY = ACCEPTED_DESCRIBE_KEY
TOPOLOGY_FILE = TOPOLOGY_KEY

__all__ = [
    "APPLIED_SPEC_ANNOTATION",
    "DESCRIBE_KEY",
    "TOPOLOGY_ANNOTATION",
    "TOPOLOGY_FILE",
    "UPGRADED_AT_ANNOTATION",
    "cleanup",
    "default_kafka_factory",
    "on_change",
    "resync",
    "run_pass",
    "topology_configmap_name",
]


def default_kafka_factory(kube: Kube) -> KafkaFactory:
    """Admin clients per connection and app (see admins.py), credentials from the referenced Secrets."""
    return KafkaAdmins(kube)


def run_pass(ctx: Context, namespace: str, name: str, *, now: datetime, tick: bool = False) -> None:
    """Observe, decide, act, write status: serialized per app, from state read under the lock."""
    with ctx.lock(namespace, name), metrics.timed() as outcome:
        app = read_app(ctx.kube, namespace, name)
        if app is None or app["metadata"].get("deletionTimestamp"):
            outcome.set("skipped")
            return
        snap = Snapshot(app)
        try:
            snap, admin = observe(ctx, app, tick=tick)
            decision = decide(snap, now=now, tick=tick)
            decision = decision.with_volume_problems(act(ctx, app, decision.effects, admin))
            ctx.kube.patch_status(namespace, name, decision.wire())
        except (KubeError, KafkaError) as err:
            # Any API refusal (a name the apiserver rejects, RBAC, admission) or an unreachable Kafka
            # while acting ends in status; kopf tries again later.
            outcome.set("error")
            reason = "KubernetesApiError" if isinstance(err, KubeError) else "KafkaUnavailable"
            problem = status.Problem(reason, str(err)[:2048])
            ctx.event(app, "Warning", problem.reason, problem.message)
            ctx.kube.patch_status(namespace, name, failed(snap, problem, now).wire())
            raise kopf.TemporaryError(str(err)[:512], delay=RETRY_S * 5) from err
        if decision.wait is not None:
            outcome.set("waiting")
            raise kopf.TemporaryError(decision.wait.reason, delay=decision.wait.delay)


def on_change(ctx: Context, body: Mapping[str, Any], *, now: datetime) -> None:
    """Create/update/resume: a full pass (the body only names the app; the pass reads it afresh)."""
    meta = body["metadata"]
    run_pass(ctx, meta["namespace"], meta["name"], now=now)


def resync(ctx: Context, body: Mapping[str, Any], *, now: datetime) -> None:
    """The periodic pass: refreshes status from the pods and Kafka, and lets the autoscaler decide."""
    meta = body["metadata"]
    if meta.get("deletionTimestamp"):
        return
    run_pass(ctx, meta["namespace"], meta["name"], now=now, tick=True)


def cleanup(ctx: Context, body: Mapping[str, Any]) -> None:
    """The finalizer: apply topicCleanupPolicy (decide_cleanup). Owned objects go by garbage collection."""
    ref = app_ref(body)
    spec = spec_or_none(body)
    cm = None
    if spec is not None and spec.topic_cleanup_policy == "Delete":
        cm = ctx.kube.get("v1", "ConfigMap", ref.namespace, topology_configmap_name(ref.name))
    effects = decide_cleanup(body, cm)
    try:
        act(ctx, body, effects, (lambda: admin_for(ctx, spec, ref)) if spec is not None else None)
    except (KafkaError, SecretReferenceError) as err:
        raise kopf.TemporaryError(str(err), delay=RETRY_S * 5) from err
    factory = ctx.kafka_factory
    if isinstance(factory, KafkaAdmins) and spec is not None and spec.topic_cleanup_policy == "Delete":
        factory.release(f"{ref.namespace}/{ref.name}")
