"""Static members whose pods a scale-in removed, pure: which ones the operator takes out of the group.

Why the operator does it: the pods are static members (`group.instance.id` = the pod's name, and
`<pod>-<n>` for worker `n` with `streamThreads` above 1) that close with Kafka Streams' default
REMAIN_IN_GROUP, so that a restarted pod takes its tasks back without a rebalance. A pod the
StatefulSet removed therefore stays in the consumer group until `session.timeout.ms` (45 s by default)
passes, and its tasks are processed by nobody until then. The pod itself cannot tell a scale-in's SIGTERM
from a rolling restart's; the operator can: a member whose pod's ordinal is at or past the StatefulSet's
replica count and whose pod no longer exists is gone for good. Kafka Streams leaves this to the user
(`Admin.removeMembersFromConsumerGroup`); the operator does it once the pod has stopped (not before: a
pod still shutting down commits its last work as a member).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from .effects import RemoveGroupMembers, Wait

STOPPING_RETRY_S = 2.0
"""How soon to look again while removed pods are still shutting down: their tasks wait meanwhile."""


def member_pod(instance_id: str, name: str) -> tuple[str, int] | None:
    """(pod name, ordinal) of a static member of StatefulSet `name`'s pods, None for any other member."""
    found = re.fullmatch(rf"{re.escape(name)}-(0|[1-9][0-9]*)(?:-[1-9][0-9]*)?", instance_id)
    if found is None:
        return None
    return f"{name}-{found.group(1)}", int(found.group(1))


@dataclass(frozen=True)
class Departures:
    removable: tuple[str, ...] = ()
    """Static members of removed pods that no longer exist: taken out of the group now."""
    stopping: tuple[str, ...] = ()
    """Removed pods still shutting down whose members are still in the group: looked at again soon."""

    def effects(self, group: str) -> list[RemoveGroupMembers]:
        return [RemoveGroupMembers(group, self.removable)] if self.removable else []

    def wait(self, group: str) -> Wait | None:
        if not self.stopping:
            return None
        return Wait(
            f"waiting for pod(s) {', '.join(self.stopping)} to stop, to remove their static members from "
            f"consumer group '{group}'",
            STOPPING_RETRY_S,
        )


def departures(name: str, replicas: int, pods: Collection[str], members: Iterable[str]) -> Departures:
    """Which of the group's static `members` belong to pods the StatefulSet (now at `replicas`) removed,
    split by whether their pod still exists (`pods`: the app's pod names)."""
    removable: list[str] = []
    stopping: set[str] = set()
    for member in members:
        found = member_pod(member, name)
        if found is None or found[1] < replicas:
            continue
        if found[0] in pods:
            stopping.add(found[0])
        else:
            removable.append(member)
    return Departures(tuple(sorted(removable)), tuple(sorted(stopping)))
