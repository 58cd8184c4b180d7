"""Carry out a `Decision`'s effects, in order, through k8s.py and kafka.py (the only modules doing I/O).

Nothing is decided here. An effect that fails raises (KubeError, KafkaError) and stops the effects after
it; reconcile.py's one catch ladder turns that into a status problem. Two failures are expected and
reported instead of raised: a claim the API server refuses to grow (a VolumeExpansionFailed problem
returned for the pass's status; the app runs on the volume it has) and a topic that refuses creation
while the reset's deletion of it completes (`CreateTopics.tolerate_errors`: the next pass tries again).
A static member that cannot be removed from the group is reported too (an event): it still leaves when
its session times out, and the next pass tries again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from . import status
from .context import Context
from .effects import (
    Apply,
    CreateTopics,
    Delete,
    DeleteTopics,
    Effect,
    Event,
    ExpandClaim,
    Patch,
    RemoveGroupMembers,
)
from .k8s import KubeError
from .kafka import KafkaAdmin, KafkaError


def act(
    ctx: Context,
    body: Mapping[str, Any],
    effects: Iterable[Effect],
    admin: KafkaAdmin | Callable[[], KafkaAdmin] | None,
) -> list[status.Problem]:
    """Run `effects` for the StreamApp `body`; returns the claims' expansion problems."""
    namespace = body["metadata"]["namespace"]
    problems: list[status.Problem] = []
    grown: list[str] = []
    size = ""

    def kafka() -> KafkaAdmin:
        if admin is None:
            raise KafkaError("no Kafka client for this pass")
        return admin if isinstance(admin, KafkaAdmin) else admin()

    def event(type_: str, reason: str, message: str, dedupe: bool = True) -> None:
        if dedupe:
            ctx.event(body, type_, reason, message)
        else:
            ctx.kube.event(body, type_, reason, message)

    for effect in effects:
        if isinstance(effect, Apply):
            ctx.kube.apply(effect.obj)
        elif isinstance(effect, Delete):
            deleted = ctx.kube.delete(
                effect.api_version, effect.kind, namespace, effect.name, propagation=effect.propagation
            )
            if deleted and effect.announce:
                event("Normal", "Deleted", f"deleted {effect.kind} {effect.name}")
        elif isinstance(effect, Patch):
            ctx.kube.patch(effect.api_version, effect.kind, namespace, effect.name, effect.body)
        elif isinstance(effect, ExpandClaim):
            patch = {"spec": {"resources": {"requests": {"storage": effect.size}}}}
            try:
                ctx.kube.patch("v1", "PersistentVolumeClaim", namespace, effect.name, patch)
            except KubeError as err:  # e.g. the class changed since it was read; admission says why
                problem = status.Problem("VolumeExpansionFailed", f"claim {effect.name}: {str(err)[:512]}")
                event("Warning", problem.reason, problem.message)
                problems.append(problem)
                continue
            grown.append(effect.name)
            size = effect.size
        elif isinstance(effect, CreateTopics):
            try:
                created = kafka().create_topics(effect.topics, effect.replication_factor)
            except KafkaError:
                if not effect.tolerate_errors:
                    raise
                continue
            if effect.announce and created:
                event("Normal", "TopicsCreated", "created " + ", ".join(created))
        elif isinstance(effect, DeleteTopics):
            deleted_topics = kafka().delete_topics(effect.names)
            if effect.announce:
                event(
                    "Normal", "TopicsDeleted", "deleted " + (", ".join(deleted_topics) or "no topics"), False
                )
        elif isinstance(effect, RemoveGroupMembers):
            ids = list(effect.instance_ids)
            try:
                kafka().remove_static_members(effect.group, ids)
            except KafkaError as err:
                event("Warning", "MemberRemovalFailed", f"{err}; they leave when their session times out")
                continue
            event(
                "Normal",
                "MembersRemoved",
                f"removed static member(s) {', '.join(ids)} of pods the scale-in stopped from consumer group "
                f"'{effect.group}': their tasks move now, not after session.timeout.ms",
                False,
            )
        elif isinstance(effect, Event):
            event(effect.type, effect.reason, effect.message, effect.dedupe)
    if grown:
        event(
            "Normal",
            "VolumeExpansionRequested",
            f"requested {size} for claims {', '.join(grown)}; the storage driver grows the volumes",
        )
    return problems
