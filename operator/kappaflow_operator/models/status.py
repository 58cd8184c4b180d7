"""The StreamApp status: what the operator observed and decided, written only through /status."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field

from .common import CamelModel

Phase = Literal[
    "Pending", "Running", "Scaling", "Upgrading", "Reprocessing", "Resetting", "Paused", "Degraded"
]
ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(CamelModel):
    """A Kubernetes-style condition (Ready, Progressing, Degraded, ReplicasCapped)."""

    type: Annotated[str, Field(min_length=1, max_length=316)]
    status: ConditionStatus
    reason: Annotated[str, Field(max_length=1024, pattern=r"^([A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?)?$")] = (
        ""
    )
    """CamelCase machine-readable reason."""
    message: Annotated[str, Field(max_length=32768)] = ""
    last_transition_time: datetime
    """When status last changed (not when the condition was last computed)."""
    observed_generation: int | None = None


class InternalTopicStatus(CamelModel):
    """One repartition or changelog topic and whether it matches what the topology needs."""

    name: str
    type: Literal["changelog", "repartition"]
    partitions: int
    """Partitions the topology needs."""
    actual_partitions: int | None = None
    """Partitions the existing topic has (absent until it exists)."""
    state: Literal["Ready", "Created", "Missing", "Mismatch"]


def _spec_schema(schema: dict[str, Any]) -> None:
    schema.clear()
    schema.update(
        {
            "type": "object",
            "description": "The spec itself, as applied (what a rollback applies again).",
            "x-kubernetes-preserve-unknown-fields": True,
        }
    )


class StableSpec(CamelModel):
    """The last spec that ran with every replica ready; a failed upgrade falls back to it."""

    hash: str
    image: str
    application_id: str
    spec: dict[str, Any] | None = Field(default=None, json_schema_extra=_spec_schema)


class Rollback(CamelModel):
    """An upgrade that missed spec.upgrade.progressDeadlineSeconds and was rolled back.

    Kept while spec stays the failed one (the stable spec keeps running); a new spec clears it.
    """

    failed_spec_hash: str
    to_spec_hash: str
    time: datetime
    reason: str


class TopologyStatus(CamelModel):
    """What `kappaflow describe` reported for the current image and entry point."""

    hash: str
    """Hash of the describe JSON: a change of it is a topology change."""
    described_image: str
    described_entry_point: str
    source_topics: list[str] = Field(default_factory=list)
    max_parallelism: int | None = None
    """Largest partition count of any sub-topology's inputs: replicas beyond it would idle."""


class AutoscalerDecision(CamelModel):
    """One decision of the lag-based autoscaler."""

    time: datetime
    from_replicas: int
    to_replicas: int
    lag: int | None = None
    reason: str


class AutoscalerStatus(CamelModel):
    """The autoscaler's memory: its current target and when it last changed the replica count."""

    desired_replicas: int | None = None
    last_scale_time: datetime | None = None
    last_decision: AutoscalerDecision | None = None
    warmup_tasks: int | None = None
    """Tasks warming up when it last decided: while any are, it takes no scaling step."""
    warmup_max_lag: int | None = None
    """The largest changelog lag (records) among those warm-ups."""


class TaskMovement(CamelModel):
    """Tasks on the move between pods, as each pod reports its own (GET /health/ready on the metrics
    port): warm-ups a scale-out waits for, and a scale-in held until standbys are caught up."""

    warmup_tasks: int = 0
    """Warm-up replicas catching up on pods that have not joined the group yet; the current owners keep
    processing these tasks until they are within acceptable.recovery.lag."""
    warmup_max_lag: int | None = None
    """The largest changelog lag (records) among them."""
    warmup_pods: list[str] = Field(default_factory=list)
    restoring_tasks: int = 0
    """Active tasks restoring their state (not processing until done)."""
    scale_in_to: int | None = None
    """The replica count a held scale-in goes to once standbys are caught up."""
    scale_in_held_since: datetime | None = None
    """When the scale-in to scaleInTo was first held (spec.scaleIn.standbyWaitSeconds counts from it)."""
    waiting_for: list[str] = Field(default_factory=list)
    """Active tasks of the pods to remove with no caught-up standby on a pod that stays (`task@pod`)."""
    unreachable_pods: list[str] = Field(default_factory=list)
    """Pods whose tasks could not be read, with why."""
    message: str = ""


class ReprocessingRun(CamelModel):
    """A reprocessing run on Spark (the `upgrade: reprocess` path)."""

    spark_application: str
    """Name of the SparkApplication."""
    application_id: str
    """The new application id the run writes state and outputs for."""
    image: str
    spec_hash: str
    state: Literal["Pending", "Running", "Completed", "Failed"]
    started_at: datetime
    finished_at: datetime | None = None
    message: str = ""
    previous_application_id: str | None = None
    """The id the pods ran under when the run started: what a Completed run replaces."""
    cleaned_up: bool = False
    """Whether the replaced id's internal topics and older SparkApplications were deleted
    (`upgrade.spark.cleanupPolicy: Delete`)."""


class ResetProgress(CamelModel):
    """An `upgrade.mode: reset` under way for one generation; cleared once the new spec is applied.

    Each step is recognisable from the cluster (StatefulSet at 0, no pods, the generation's Job), so a
    restarted operator resumes where it stopped; only the last step needs memory: the internal topics,
    recreated after the reset deleted them, must be seen present for a few seconds (deletion in Kafka is
    asynchronous, and a topic still being deleted can be listed for a while).
    """

    generation: int
    step: str
    """What the reset waits for now (also the Progressing condition's message)."""
    topics_present_since: datetime | None = None
    """When a pass first saw every internal topic present again after the reset Job."""


def _kopf_schema(schema: dict[str, Any]) -> None:
    schema.clear()
    schema.update(
        {
            "type": "object",
            "description": "Handler bookkeeping kopf may keep in status; opaque to users.",
            "x-kubernetes-preserve-unknown-fields": True,
        }
    )


class StreamAppStatus(CamelModel):
    """Observed state of a StreamApp."""

    observed_generation: int | None = None
    phase: Phase | None = None
    conditions: list[Condition] = Field(default_factory=list)
    replicas: int | None = None
    """Pods the StatefulSet runs (the scale subresource reads this)."""
    ready_replicas: int | None = None
    selector: str | None = None
    """Label selector of the pods, as a string (the scale subresource's labelSelectorPath)."""
    application_id: str | None = None
    """The application id the pods run with; differs from spec.applicationId after a reprocess."""
    internal_topics: list[InternalTopicStatus] = Field(default_factory=list)
    consumer_lag: int | None = None
    """Total lag of the application's consumer group over its source topics."""
    last_reconciled: datetime | None = None
    last_stable_spec: StableSpec | None = None
    topology: TopologyStatus | None = None
    autoscaler: AutoscalerStatus | None = None
    reprocessing: ReprocessingRun | None = None
    kopf: dict[str, Any] | None = Field(default=None, json_schema_extra=_kopf_schema)
    rollback: Rollback | None = None
    """Set while the current spec is a failed upgrade that was rolled back to lastStableSpec."""
    reset: ResetProgress | None = None
    """Set while an `upgrade.mode: reset` runs (phase Resetting)."""
    task_movement: TaskMovement | None = None
    """Warm-ups and a held scale-in, while there are any."""
