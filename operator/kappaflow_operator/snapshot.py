"""What one reconcile pass knows: the `Snapshot` that `observe` reads and `decide` decides from.

Pure data (no client, no clock), so a test builds one from plain dicts and `decide` runs without a
cluster. Every fact a decision needs is here, Kafka's included (topics and partition counts, the group's
lag and members): a decision made in the middle of reading could not be tested without the servers it
read from, and a pass that reads while it decides sees different states of the world in one decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from .models import StreamAppSpec, StreamAppStatus

#: The application id the StatefulSet's pods run with, written with every apply.
APPLICATION_ID_ANNOTATION = "kappaflow.io/application-id"


@dataclass(frozen=True)
class TerminatedContainer:
    """How a Job's container ended: exit code and the termination message it left."""

    exit_code: int
    message: str


def newest_termination(pods: Sequence[Mapping[str, Any]]) -> TerminatedContainer | None:
    """The terminated container of the newest finished pod (a Job retries in new pods), None while none
    has finished. The termination message is where `kappaflow describe --json` writes (desired.jobs):
    reading it from the Pod object needs no log access."""
    finished: list[tuple[str, TerminatedContainer]] = []
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            term = (cs.get("state") or {}).get("terminated")
            if term is not None:
                outcome = TerminatedContainer(int(term.get("exitCode") or 0), str(term.get("message") or ""))
                finished.append((str(term.get("finishedAt") or ""), outcome))
    return max(finished, key=lambda f: f[0])[1] if finished else None


@dataclass(frozen=True)
class JobFacts:
    """A Job the operator runs (describe, reset), as observed: the object, its pods, its refusals."""

    name: str
    job: Mapping[str, Any] | None = None
    """None when it does not exist."""
    pods: Sequence[Mapping[str, Any]] = ()
    refusals: Sequence[Mapping[str, Any]] = ()
    """The Job's FailedCreate events (admission, PodSecurity, quota)."""

    @property
    def outcome(self) -> TerminatedContainer | None:
        return newest_termination(self.pods)


@dataclass(frozen=True)
class LocalTask:
    """One task a pod holds, as the pod reports it: its role there and its changelog lag."""

    role: str
    """active, restoring, standby or warmup (the runtime's `local_task_roles`)."""
    lag: int | None
    """Changelog records behind; None when the pod does not report it (stream workers > 1)."""


@dataclass(frozen=True)
class PodTasks:
    """A pod's own tasks (movement.parse_pod_tasks), or why they could not be read."""

    pod: str
    tasks: Mapping[str, LocalTask] = field(default_factory=dict)
    error: str | None = None
    """Why the pod's answer is missing (unreachable, not JSON); `tasks` is then empty."""


@dataclass(frozen=True)
class Snapshot:
    """What one pass knows about one StreamApp: the object itself, what it owns, and Kafka's side.

    Fields a pass did not need are left at their defaults (observe reads the Kafka group, the Spark
    runs, the reset Job only where the spec and the cluster say they matter).
    """

    app: Mapping[str, Any] | None
    """The StreamApp as stored now (None once it is gone)."""
    statefulset: Mapping[str, Any] | None = None
    pods: Sequence[Mapping[str, Any]] = field(default_factory=list)
    """The StatefulSet's pods (Jobs' pods excluded)."""
    refusals: Sequence[Mapping[str, Any]] = field(default_factory=list)
    """The StatefulSet's FailedCreate events, read only while it has fewer pods than replicas."""
    topology_configmap: Mapping[str, Any] | None = None
    """`<name>-topology`, where the describe Job publishes the topology."""
    describe_job: JobFacts | None = None
    """Read only while the ConfigMap holds no topology for the spec's image and entry point."""
    kafka_access_error: str | None = None
    """Why no Kafka client could be built (a Secret or key the spec names is missing)."""
    topics: Mapping[str, int] | None = None
    """Every topic the cluster has, with its partition count; None when not read."""
    kafka_error: str | None = None
    """Why the topics could not be listed."""
    lag: int | None = None
    """The group's total lag over the source topics (timer passes only)."""
    lag_error: str | None = None
    spark_application: Mapping[str, Any] | None = None
    """The SparkApplication reprocessing the current spec (upgrade mode reprocess)."""
    spark_applications: Sequence[Mapping[str, Any]] = ()
    """Every SparkApplication of the app, read only while a completed run awaits its clean-up."""
    reset_job: JobFacts | None = None
    """This generation's reset Job (upgrade mode reset, while the StatefulSet exists)."""
    group_members: int | None = None
    """Members the broker still counts in the group; read only once a reset stopped every pod."""
    group_error: str | None = None
    static_members: Sequence[str] | None = None
    """The group's static members (`group.instance.id`s), read while the StatefulSet exists."""
    static_members_error: str | None = None
    claims: Sequence[Mapping[str, Any]] = ()
    """The app's PersistentVolumeClaims (state volumes)."""
    storage_classes: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict)
    """The classes of the claims that must grow (volumes.classes_to_read) or are unbound, None for a
    missing one."""
    provisioning_failures: Sequence[Mapping[str, Any]] = ()
    """The namespace's ProvisioningFailed claim events, read only while a state claim is unbound."""
    pod_tasks: Sequence[PodTasks] | None = None
    """Each running pod's own tasks, read on timer passes and while a scale-in is pending
    (movement.read_due); None when not read."""

    @property
    def deleting(self) -> bool:
        return bool(self.app is not None and self.app["metadata"].get("deletionTimestamp"))

    @property
    def running_application_id(self) -> str | None:
        """The application id the pods run under, from the StatefulSet that runs them."""
        annotations = (self.statefulset or {}).get("metadata", {}).get("annotations") or {}
        value = annotations.get(APPLICATION_ID_ANNOTATION)
        return str(value) if value else None

    @property
    def generation(self) -> int:
        return int(((self.app or {}).get("metadata") or {}).get("generation") or 0)

    @property
    def status(self) -> StreamAppStatus | None:
        """The status as stored (None when absent, or written by an operator whose schema differs)."""
        return status_of(self.app or {})

    def spec(self) -> StreamAppSpec:
        """The parsed spec; raises pydantic's ValidationError for an invalid one."""
        return StreamAppSpec.model_validate((self.app or {}).get("spec") or {})


def status_of(body: Mapping[str, Any]) -> StreamAppStatus | None:
    raw = {k: v for k, v in (body.get("status") or {}).items() if k != "kopf"}
    try:
        return StreamAppStatus.model_validate(raw) if raw else None
    except ValidationError:  # written by an older/newer operator: start afresh rather than fail
        return None


def spec_or_none(body: Mapping[str, Any]) -> StreamAppSpec | None:
    try:
        return StreamAppSpec.model_validate(body.get("spec") or {})
    except ValidationError:
        return None
