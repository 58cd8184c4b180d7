"""`CloseOptions` (KIP-1153): how `KafkaStreams.close` treats the instance's group membership.

Java's `CloseOptions.groupMembershipOperation(LEAVE_GROUP | REMAIN_IN_GROUP)` chooses whether the closing
members leave the consumer group (their partitions move to the others at once) or remain in it until
`session.timeout.ms` (a restart within it takes them back without a rebalance). librdkafka decides this
by membership kind and cannot be told otherwise: a dynamic member always sends LeaveGroup when its
consumer closes, a static one (`group.instance.id`) never does. So:

- `DEFAULT` (kappaflow's default, the config `close.group.membership.operation`): what librdkafka does,
  dynamic members leave, static members remain. Java's default is REMAIN_IN_GROUP for both, which
  librdkafka cannot give a dynamic member.
- `LEAVE_GROUP`: a static member is removed after its consumer closed, by a LeaveGroup naming its
  group.instance.id (clients/group_leave.py), as Java's admin `removeMembersFromConsumerGroup` does;
  a dynamic member leaves as always. A scale-in of static members then rebalances at once instead of
  after the session timeout.
- `REMAIN_IN_GROUP`: a static member remains, as always. A dynamic member cannot: this is refused, by
  `close()` before it stops anything and by `start()` when the config asks for it, rather than leaving
  the group while the caller believes it stayed.

The decisions are pure (`check_supported`, `instances_to_remove`); runner/streams.py does the I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from datetime import timedelta

from kappaflow.api.errors import StreamsError
from kappaflow.api.processor import to_millis

DEFAULT_CLOSE_TIMEOUT_S = 60.0


class GroupMembershipOperation(enum.Enum):
    """What closing does to the instance's consumer group membership (module docstring)."""

    LEAVE_GROUP = "LEAVE_GROUP"
    REMAIN_IN_GROUP = "REMAIN_IN_GROUP"
    DEFAULT = "DEFAULT"

    @classmethod
    def parse(cls, text: str) -> GroupMembershipOperation:
        """From a config value or flag, case-insensitively; StreamsError naming the choices."""
        try:
            return cls[text.strip().upper()]
        except KeyError:
            choices = ", ".join(op.value for op in cls)
            raise StreamsError(f"unknown group membership operation '{text}' (one of {choices})") from None


@dataclass(frozen=True, slots=True)
class CloseOptions:
    """Java's `CloseOptions`, fluent: `CloseOptions.group_membership_operation(LEAVE_GROUP)
    .with_timeout(timedelta(seconds=30))`. `membership` None means the config's choice
    (`close.group.membership.operation`, default DEFAULT)."""

    timeout_s: float = DEFAULT_CLOSE_TIMEOUT_S
    membership: GroupMembershipOperation | None = None

    @staticmethod
    def timeout(duration: timedelta | int) -> CloseOptions:
        """Options with this close timeout (a timedelta, or milliseconds) and the config's membership."""
        return CloseOptions().with_timeout(duration)

    @staticmethod
    def group_membership_operation(operation: GroupMembershipOperation) -> CloseOptions:
        """Options with this membership operation and the default timeout (60 s)."""
        return CloseOptions().with_group_membership_operation(operation)

    def with_timeout(self, duration: timedelta | int) -> CloseOptions:
        """A copy with this timeout: how long close() waits for the threads; StreamsError if negative."""
        millis = to_millis(duration, "close timeout")
        if millis < 0:
            raise StreamsError(f"close timeout must not be negative, got {millis} ms")
        return replace(self, timeout_s=millis / 1000.0)

    def with_group_membership_operation(self, operation: GroupMembershipOperation) -> CloseOptions:
        """A copy with this membership operation (what happens to the group membership on close)."""
        if not isinstance(operation, GroupMembershipOperation):
            raise TypeError(f"expected a GroupMembershipOperation, got {operation!r}")
        return replace(self, membership=operation)


def check_supported(operation: GroupMembershipOperation, static: bool) -> None:
    """Refuse REMAIN_IN_GROUP for a dynamic member: librdkafka leaves the group on every close."""
    if operation is GroupMembershipOperation.REMAIN_IN_GROUP and not static:
        raise StreamsError(
            "GroupMembershipOperation.REMAIN_IN_GROUP needs static membership (set group.instance.id): "
            "librdkafka always sends LeaveGroup when a dynamic member closes, so it cannot remain in the "
            "group; close with DEFAULT or LEAVE_GROUP"
        )


def instances_to_remove(
    operation: GroupMembershipOperation, instance_id: str, worker_count: int
) -> list[str]:
    """The group.instance.ids to remove with a LeaveGroup once the consumers closed: the static members'
    under LEAVE_GROUP (each worker process has its own, `<id>-<n>`), none otherwise (a dynamic member
    left by itself)."""
    if operation is not GroupMembershipOperation.LEAVE_GROUP or not instance_id:
        return []
    if worker_count > 1:
        return [worker_instance_id(instance_id, index) for index in range(1, worker_count + 1)]
    return [instance_id]


def worker_instance_id(instance_id: str, index: int) -> str:
    """The group.instance.id of worker process `index` (1-based) of a static instance."""
    return f"{instance_id}-{index}"
