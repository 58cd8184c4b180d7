"""Remove static members from a consumer group (Admin's `removeMembersFromConsumerGroup`), over
clients/wire_client.py.

confluent-kafka's AdminClient has no member removal, and librdkafka never sends LeaveGroup for a static
member, so `KafkaStreams.close` with LEAVE_GROUP (runner/close_options.py) sends it itself: FindCoordinator
(key type group) to a bootstrap broker, then LeaveGroup (clients/group_messages.py) to the coordinator.
A coordinator that is loading or moved is asked again until the deadline; a member the coordinator does
not know (UNKNOWN_MEMBER_ID, or no such group) counts as removed: that is what was wanted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from kappaflow.clients import group_messages as gm
from kappaflow.clients import txn_messages as msg
from kappaflow.clients.wire import ProtocolError, error_name
from kappaflow.clients.wire_client import BrokerConnection, BrokerIOError, ssl_context

RETRIABLE = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
GONE = {gm.UNKNOWN_MEMBER_ID, 69}  # not a member, or no such group (GROUP_ID_NOT_FOUND)
log = logging.getLogger(__name__)
REASON = "the instance closed with GroupMembershipOperation.LEAVE_GROUP"


class GroupLeaveError(Exception):
    """The members could not be removed; the message says why (they stay until the session timeout)."""


def leave_group(settings: Mapping[str, Any], group_id: str, instance_ids: list[str],
                deadline: float) -> GroupLeaveError | None:  # fmt: skip
    """`remove_static_members` within what is left until `deadline` (monotonic; at least a second), for a
    closing instance: a failure is logged and returned, not raised. The instance stopped either way;
    only the rebalance then waits for the session timeout."""
    if not instance_ids:
        return None
    try:
        remove_static_members(settings, group_id, instance_ids, max(1.0, deadline - time.monotonic()))
    except GroupLeaveError as exc:
        log.error("could not remove static member(s) from group '%s', so they stay until "
                  "session.timeout.ms passes: %s", group_id, exc)  # fmt: skip
        return exc
    log.info("left group '%s': removed static member(s) %s", group_id, ", ".join(instance_ids))
    return None


def bootstrap_addresses(servers: str) -> list[tuple[str, int]]:
    """(host, port) pairs of a `bootstrap.servers` list (a listener prefix like `PLAINTEXT://` dropped)."""
    found: list[tuple[str, int]] = []
    for entry in servers.split(","):
        entry = entry.strip().split("://", 1)[-1]
        if not entry:
            continue
        host, _, port = entry.rpartition(":")
        if not host or not port.isdigit():
            raise GroupLeaveError(f"bootstrap.servers: '{entry}' is not host:port")
        found.append((host.strip("[]"), int(port)))
    if not found:
        raise GroupLeaveError("bootstrap.servers is empty")
    return found


def remove_static_members(
    settings: Mapping[str, Any], group_id: str, instance_ids: list[str], timeout_s: float
) -> None:
    """Remove the members with `instance_ids` from `group_id` within `timeout_s`; GroupLeaveError if not."""
    deadline = time.monotonic() + timeout_s
    _check_protocol(settings)
    context = ssl_context(settings)
    client_id = f"{settings.get('client.id') or group_id}-leave-group"
    last = ""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise GroupLeaveError(f"LeaveGroup for {', '.join(instance_ids)} in group '{group_id}': {last}")
        try:
            outcome = _attempt(settings, group_id, instance_ids, left, context, client_id)
        except (BrokerIOError, ProtocolError) as exc:
            outcome = str(exc)
        if outcome is None:
            return
        if isinstance(outcome, GroupLeaveError):
            raise outcome
        last = outcome
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


def _check_protocol(settings: Mapping[str, Any]) -> None:
    protocol = str(settings.get("security.protocol", "PLAINTEXT")).upper()
    if protocol not in ("PLAINTEXT", "SSL"):
        raise GroupLeaveError(
            f"security.protocol={protocol}: removing a static member on close supports PLAINTEXT and SSL "
            "listeners; it stays in the group until session.timeout.ms passes"
        )


def _attempt(settings: Mapping[str, Any], group_id: str, instance_ids: list[str], timeout_s: float,
             context: Any, client_id: str) -> str | GroupLeaveError | None:  # fmt: skip
    """None when done; a string saying what to retry; a GroupLeaveError that no retry helps."""
    coordinator = None
    for host, port in bootstrap_addresses(str(settings["bootstrap.servers"])):
        try:
            connection = BrokerConnection(host, port, timeout_s, context, client_id)
        except BrokerIOError:
            continue  # the next bootstrap broker may answer
        try:
            (coordinator,) = connection.call(
                msg.FIND_COORDINATOR,
                lambda v: msg.encode_find_coordinator(v, group_id, msg.KEY_TYPE_GROUP),
                lambda v, r: msg.decode_find_coordinator(v, r, group_id),
            )
        finally:
            connection.close()
        break
    if coordinator is None:
        return f"no bootstrap broker answered ({settings['bootstrap.servers']})"
    if coordinator.error_code != 0:
        return f"FindCoordinator: {error_name(coordinator.error_code)}"
    connection = BrokerConnection(coordinator.host, coordinator.port, timeout_s, context, client_id)
    try:
        result: gm.LeaveGroupResult = connection.call(
            gm.LEAVE_GROUP,
            lambda v: gm.encode_leave_group(v, group_id, instance_ids, REASON),
            gm.decode_leave_group,
        )
    finally:
        connection.close()
    return interpret(result, instance_ids)


def interpret(result: gm.LeaveGroupResult, instance_ids: list[str]) -> str | GroupLeaveError | None:
    """What a LeaveGroup answer means: None (every member removed or already gone), a retriable
    condition (a string), or a GroupLeaveError."""
    if result.error_code in RETRIABLE:
        return f"LeaveGroup: {error_name(result.error_code)}"
    if result.error_code in GONE:
        return None
    if result.error_code != 0:
        return GroupLeaveError(f"LeaveGroup: {error_name(result.error_code)}")
    failed = [
        f"{m.group_instance_id}: {error_name(m.error_code)}"
        for m in result.members
        if m.error_code not in (0, *GONE)
    ]
    answered = {m.group_instance_id for m in result.members}
    missing = [i for i in instance_ids if i not in answered]
    if failed or missing:
        detail = failed + [f"{i}: no answer" for i in missing]
        return GroupLeaveError(f"LeaveGroup: {'; '.join(detail)}")
    return None
