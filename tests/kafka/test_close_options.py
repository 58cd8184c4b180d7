"""KIP-1153 close options against the real broker: a static member closed with LEAVE_GROUP is removed
from the group at once (LeaveGroup by group.instance.id, clients/group_leave.py) and its partitions go to
the remaining member well within the session timeout; one closed with DEFAULT remains a member."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from kappaflow.clients.admin import InternalTopicManager
from kappaflow.runner import CloseOptions, GroupMembershipOperation, KafkaStreams
from tests.kafka.streams_support import fast_config, wait_for, wait_running, wordcount_topology

pytestmark = pytest.mark.kafka

# Long enough that a rebalance within the waits below can only come from the member's removal.
SESSION_MS = 120_000


def _instance_ids(admin: InternalTopicManager, group: str) -> list[str]:
    _state, members = admin.group_members(group, static=True)
    return sorted(m.instance_id for m in members)


def test_a_static_member_closed_with_leave_group_is_gone_at_once_and_default_remains(
    kafka_bootstrap, kafka_topics, tmp_path
):
    source = kafka_topics("close-opts-in", partitions=4)
    sink = kafka_topics("close-opts-out", partitions=4)
    app_id = f"close-opts-{uuid.uuid4().hex[:8]}"

    def instance(name: str) -> KafkaStreams:
        config = fast_config(
            kafka_bootstrap,
            app_id,
            str(tmp_path / name),
            **{"group.instance.id": name, "consumer.session.timeout.ms": SESSION_MS},
        )
        return KafkaStreams(wordcount_topology(source, sink), config)

    first, second = instance("first"), instance("second")
    admin = InternalTopicManager({"bootstrap.servers": kafka_bootstrap})
    first.start()
    second.start()
    try:
        wait_running(first, second)
        wait_for(lambda: _instance_ids(admin, app_id) == ["first", "second"], 30, "both members")
        wait_for(lambda: bool(first.local_task_ids()[0]), 30, "tasks on the first instance")

        leave = CloseOptions.group_membership_operation(GroupMembershipOperation.LEAVE_GROUP)
        assert first.close(leave.with_timeout(timedelta(seconds=30)))
        assert first.leave_group_error is None
        # removed by the close itself: the group no longer lists it, without waiting for anything
        assert _instance_ids(admin, app_id) == ["second"]
        # every task moves to the remaining member, long before the session timeout would have let it
        every_task = {f"{sub}_{p}" for sub in (0, 1) for p in range(4)}
        wait_for(lambda: set(second.local_task_ids()[0]) == every_task, 40, "every task on the second")
    finally:
        first.close(10)

    assert second.close(CloseOptions.timeout(timedelta(seconds=30)))  # DEFAULT: a static member remains
    assert _instance_ids(admin, app_id) == ["second"]
