"""The effects a `Decision` asks for, as data: `decide` lists them, `act` carries them out in order.

Why data and not calls: a unit test of `decide` asserts on what would be done (which objects applied,
which topics created, which events posted) without a cluster, and `act` is the one place where an effect
can fail. Effects run in list order and the first failure stops the rest (an event that announces a step
comes after the step), except where an effect says its failure is expected (`tolerate_errors`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .topics import TopicSpec


@dataclass(frozen=True)
class Apply:
    """Server-side apply of a whole object (k8s.Kube.apply)."""

    obj: Mapping[str, Any]


@dataclass(frozen=True)
class Delete:
    api_version: str
    kind: str
    name: str
    propagation: str = "Background"
    announce: bool = False
    """Post `Deleted: deleted <kind> <name>` when something was there to delete."""


@dataclass(frozen=True)
class Patch:
    """A JSON merge patch, for a one-off change outside the applied desired state."""

    api_version: str
    kind: str
    name: str
    body: Mapping[str, Any]


@dataclass(frozen=True)
class ExpandClaim:
    """Raise a state claim's storage request; a refusal becomes a VolumeExpansionFailed problem in the
    pass's status (it stops nothing: the app runs on the volume it has)."""

    name: str
    size: str


@dataclass(frozen=True)
class CreateTopics:
    topics: Sequence[TopicSpec]
    replication_factor: int
    announce: bool = True
    """Post `TopicsCreated` naming what was created."""
    tolerate_errors: bool = False
    """After a reset, a topic still being deleted refuses creation for a while: the next pass retries."""


@dataclass(frozen=True)
class DeleteTopics:
    names: Sequence[str]
    announce: bool = False
    """Post `TopicsDeleted` naming what was deleted (the finalizer)."""


@dataclass(frozen=True)
class Event:
    """An event on the StreamApp. `dedupe`: not posted again within Context.EVENT_REPEAT_S."""

    type: str
    reason: str
    message: str
    dedupe: bool = True


@dataclass(frozen=True)
class RemoveGroupMembers:
    """Take static members out of a consumer group (departed.py says which and why). A failure is
    reported (`MemberRemovalFailed`), not raised: the members still go when their session times out."""

    group: str
    instance_ids: Sequence[str]


Effect = Apply | Delete | Patch | ExpandClaim | CreateTopics | DeleteTopics | Event | RemoveGroupMembers


#: How soon a pass that waits for something outside our control (a Job, a topic, a Spark run, a
#: deletion) looks again; waits after errors are multiples of it. From the environment at import, so
#: tests can shorten it (context.RETRY_S is this value).
RETRY_S = float(os.environ.get("KAPPAFLOW_OPERATOR_RETRY_SECONDS", "3"))


@dataclass(frozen=True)
class Wait:
    """Why a pass stops short of its goal and when to look again: the pass ends (status written, the app
    lock released) and kopf calls again after `delay` seconds, instead of sleeping under the lock."""

    reason: str
    delay: float = RETRY_S
