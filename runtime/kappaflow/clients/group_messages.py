"""LeaveGroup (13), encoded and decoded (pure; framing in clients/wire.py, sending in wire_client.py).

librdkafka never sends LeaveGroup for a static member (`group.instance.id`): closing one leaves it in the
group until `session.timeout.ms` passes, which is the point of static membership across a restart, but
not what a scale-in wants. `KafkaStreams.close` with `GroupMembershipOperation.LEAVE_GROUP` (KIP-1153)
removes it the way Java's Admin `removeMembersFromConsumerGroup` does: LeaveGroup v3+ naming the member by
its group.instance.id, with the member id left empty ("unknown"), which the coordinator accepts for a
static member and which works whatever member id the closed consumer had. v3 is the first version with
the members array; v4 the first flexible one; v5 adds a reason the coordinator logs.

Schemas: `common/message/LeaveGroupRequest.json` / `LeaveGroupResponse.json`.
"""

from __future__ import annotations

from dataclasses import dataclass

from kappaflow.clients.wire import Reader, VersionRange, Writer

LEAVE_GROUP = 13
LEAVE_GROUP_VERSIONS = VersionRange(3, 5)
UNKNOWN_MEMBER_ID = 25  # the member is not in the group (any more): what removing it wanted


def is_flexible(version: int) -> bool:
    return version >= 4


@dataclass(frozen=True, slots=True)
class LeftMember:
    """One member's answer: `error_code` 0 when removed."""

    member_id: str
    group_instance_id: str | None
    error_code: int


@dataclass(frozen=True, slots=True)
class LeaveGroupResult:
    """The whole request's error (a coordinator that moved, an unknown group) and each member's."""

    error_code: int
    members: tuple[LeftMember, ...]


def encode_leave_group(version: int, group_id: str, instance_ids: list[str], reason: str) -> bytes:
    """Remove the static members `instance_ids` of `group_id` (member ids unknown: empty)."""
    w = Writer(flexible=is_flexible(version))
    w.string(group_id)

    def member(w2: Writer, instance_id: str) -> None:
        w2.string("")
        w2.string(instance_id)
        if version >= 5:
            w2.string(reason)
        w2.tags()

    w.array(instance_ids, member)
    w.tags()
    return w.getvalue()


def decode_leave_group(version: int, r: Reader) -> LeaveGroupResult:
    r.int32()  # throttle time
    error = r.int16()

    def member(m: Reader) -> LeftMember:
        left = LeftMember(m.string(), m.nullable_string(), m.int16())
        m.tags()
        return left

    members = tuple(r.array(member))
    r.tags()
    return LeaveGroupResult(error, members)
