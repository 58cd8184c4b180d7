"""kopf handlers: wiring only; each one delegates to `reconcile` in a line.

Run: `kopf run -m kappaflow_operator.main --all-namespaces` (or `--namespace X`); the chart's Deployment
does the same. kopf's own bookkeeping (handler progress, diff base) is kept in annotations, so the
status subresource holds only what `status.py` computes. The finalizer is the one the CRD documents
(`kappaflow.io/topic-cleanup`): deletion waits until the topic cleanup policy was applied.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from typing import Any

import kopf

from . import metrics, reconcile
from .context import Context
from .k8s import Kube
from .models import FINALIZER, GROUP, PLURAL, VERSION

RESOURCE = (GROUP, VERSION, PLURAL)
#: Seconds between periodic passes (status refresh, autoscaler ticks); tests make it short.
RESYNC_S = float(os.environ.get("KAPPAFLOW_OPERATOR_RESYNC_SECONDS", "15"))
#: Environment variable naming the port of the operator's own Prometheus metrics (0 or unset: off); read
#: at start-up, so every start of the operator in one process honours the value of that moment.
METRICS_PORT_ENV = "KAPPAFLOW_OPERATOR_METRICS_PORT"
#: Environment variable with the seconds a replica's peer record stays valid without a keep-alive (kopf's
#: `settings.peering.lifetime`, default 60): after a hard kill of the leader, the others take over once
#: it expires. kopf renews the record every `lifetime - 5..10` seconds (at least every second).
PEERING_LIFETIME_ENV = "KAPPAFLOW_OPERATOR_PEERING_LIFETIME_SECONDS"
DEFAULT_PEERING_LIFETIME_S = 60


def peering_priority(identity: str) -> int:
    """A priority unique per replica, so kopf peering elects one leader.

    kopf pauses every operator of a peering while a live peer has a higher priority, and pauses *all*
    of them when priorities tie; distinct priorities (from the pod name) make exactly one replica work
    and the next one take over when its peer record expires.
    """
    return int.from_bytes(hashlib.sha256(identity.encode()).digest()[:3], "big") + 1


def peering_lifetime(value: str | None) -> int:
    """The peer lifetime in whole seconds (kopf keeps an int) from the environment, or kopf's default.

    Below 5 s a busy replica could miss its own keep-alive and the followers would take over from a
    leader that still works; a clear error names the variable instead.
    """
    if value is None or not value.strip():
        return DEFAULT_PEERING_LIFETIME_S
    try:
        seconds = int(value)
    except ValueError:
        raise ValueError(f"{PEERING_LIFETIME_ENV}={value!r}: expected whole seconds") from None
    if seconds < 5:
        raise ValueError(f"{PEERING_LIFETIME_ENV}={value!r}: at least 5 seconds")
    return seconds


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kopf.kappaflow.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="kopf.kappaflow.io")
    # kopf would post its handler log lines as events, e.g. every "waiting for the describe Job" retry
    # as an Error; the reconciler posts one event per real step instead.
    settings.posting.enabled = False
    settings.peering.priority = peering_priority(os.environ.get("HOSTNAME", "kappaflow-operator"))
    settings.peering.lifetime = peering_lifetime(os.environ.get(PEERING_LIFETIME_ENV))
    metrics.start(int(os.environ.get(METRICS_PORT_ENV, "0")))
    kube = Kube.from_environment()
    memo["ctx"] = Context(kube, reconcile.default_kafka_factory(kube))


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    # kopf's own logins, read at call time: in a pod the service account, elsewhere $KUBECONFIG.
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


@kopf.on.cleanup()
def close(memo: kopf.Memo, **_: Any) -> None:
    ctx = memo["ctx"]
    ctx.close()


@kopf.on.create(*RESOURCE)
@kopf.on.update(*RESOURCE)
@kopf.on.resume(*RESOURCE)
def reconcile_app(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    reconcile.on_change(memo["ctx"], body, now=_now())


@kopf.timer(*RESOURCE, interval=RESYNC_S, initial_delay=RESYNC_S)
def resync_app(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    reconcile.resync(memo["ctx"], body, now=_now())


@kopf.on.delete(*RESOURCE)
def delete_app(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    reconcile.cleanup(memo["ctx"], body)
