"""A reconcile pass's decision as data: the `Decision` that `decide` returns and `act` carries out, and
the `Draft` it is built in. Its own module so decide.py holds the decision's steps, not its plumbing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from . import status, volumes
from .desired.statefulset import STATE_VOLUME
from .effects import Effect, Event, Wait
from .models import StreamAppStatus
from .snapshot import Snapshot
from .status import Observation, Problem, compute_status


@dataclass(frozen=True)
class Decision:
    """What one pass decided: the effects to carry out in order, the status to write once, and why (and
    for how long) it waits. The status is computed from `observation` and `extra` (see `status`)."""

    effects: tuple[Effect, ...]
    observation: Observation
    extra: Mapping[str, Any]
    """Status fields beyond compute_status's (topology, reprocessing, autoscaler, consumerLag, rollback,
    reset); a None value removes the field."""
    prev: StreamAppStatus | None
    """The status this pass started from (with the autoscaler's new memory, when it ticked)."""
    name: str
    now: datetime
    wait: Wait | None = None

    @property
    def problems(self) -> tuple[Problem, ...]:
        return tuple(self.observation.problems)

    @property
    def events(self) -> list[Event]:
        return [e for e in self.effects if isinstance(e, Event)]

    @property
    def status(self) -> StreamAppStatus:
        new = compute_status(self.prev, self.observation, name=self.name, now=self.now)
        return new.model_copy(update=dict(self.extra)) if self.extra else new

    def wire(self) -> dict[str, Any]:
        """The status as the merge patch of the /status subresource (explicit nulls remove fields)."""
        wire = self.status.to_wire()
        for key, value in self.extra.items():
            if value is None:
                wire[StreamAppStatus.model_fields[key].alias or key] = None
        return wire

    def with_volume_problems(self, more: Sequence[Problem]) -> Decision:
        """The decision with problems `act` met growing claims (a refused resize stops nothing)."""
        if not more:
            return self
        obs = replace(self.observation, volume_problems=(*self.observation.volume_problems, *more))
        return replace(self, observation=obs)


def state_claims(name: str, objects: Sequence[Mapping[str, Any]]) -> list[volumes.Claim]:
    """The StatefulSet's state claims among the app's PersistentVolumeClaims."""
    prefix = f"{STATE_VOLUME}-{name}-"
    return [volumes.Claim.from_object(o) for o in objects if o["metadata"]["name"].startswith(prefix)]


@dataclass
class Draft:
    """A decision under construction: effects, status extras and volume problems accumulate."""

    snap: Snapshot
    now: datetime
    effects: list[Effect] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    volume_problems: list[status.Problem] = field(default_factory=list)

    def event(self, type_: str, reason: str, message: str, *, dedupe: bool = True) -> None:
        self.effects.append(Event(type_, reason, message, dedupe))

    def problem(self, p: status.Problem) -> None:
        """Warn with an event (deduplicated when posted: a pass every few seconds repeats none)."""
        self.event("Warning", p.reason, p.message)

    def observation(self, replicas: int, **kw: Any) -> status.Observation:
        snap = self.snap
        name = str((snap.app or {}).get("metadata", {}).get("name", ""))
        # a volume that cannot be provisioned first: it is why its pod cannot be scheduled
        unprovisioned = volumes.provisioning_problem(
            state_claims(name, snap.claims), snap.provisioning_failures
        )
        problems = [*kw.pop("problems", []), *([unprovisioned] if unprovisioned is not None else [])]
        problems += status.pod_problems(snap.pods)
        refused = status.creation_problem(snap.statefulset, snap.pods, snap.refusals)
        problems += [refused] if refused is not None else []
        kw["volume_problems"] = tuple(self.volume_problems)
        return status.Observation(snap.generation, replicas, snap.statefulset, problems=problems, **kw)

    def done(
        self, prev: StreamAppStatus | None, obs: status.Observation, wait: Wait | None = None
    ) -> Decision:
        assert self.snap.app is not None
        name = self.snap.app["metadata"]["name"]
        return Decision(tuple(self.effects), obs, dict(self.extra), prev, name, self.now, wait)
