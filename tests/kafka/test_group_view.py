"""The group view the stream thread reads (InternalTopicManager.group_members) through the classic
DescribeGroups, which avoids librdkafka 2.16.0's abort in the newer Admin calls' coordinator path
(issue 29 item 3; tests/kafka/group_view_hammer.py reproduces the abort): the same members,
assignments and state as describe_consumer_groups reports, for classic and KIP-848 groups."""

from __future__ import annotations

import struct
import uuid

import pytest
from confluent_kafka import Consumer

from kappaflow.clients.admin import InternalTopicManager, decode_assignment, static_instance_id
from tests.kafka.streams_support import wait_for


def _assignment(topics: dict[str, list[int]], user_data: bytes) -> bytes:
    """A ConsumerProtocolAssignment (version 3) as the range assignor writes it."""
    out = struct.pack(">hi", 3, len(topics))
    for topic, partitions in topics.items():
        name = topic.encode()
        out += (
            struct.pack(">h", len(name))
            + name
            + struct.pack(f">i{len(partitions)}i", len(partitions), *partitions)
        )
    return out + struct.pack(">i", len(user_data)) + user_data


def test_an_assignment_decodes_to_its_sorted_partitions_whatever_its_user_data():
    data = _assignment({"b-topic": [2, 0], "a-topic": [1]}, b"\x00\x01user-data")
    assert decode_assignment(data) == (("a-topic", 1), ("b-topic", 0), ("b-topic", 2))
    assert decode_assignment(b"") == ()
    assert decode_assignment(_assignment({}, b"")) == ()


def test_a_static_members_instance_id_is_read_back_from_its_coordinator_given_member_id():
    assert static_instance_id("pod-1-0-4f0c8b9e-1d2a-4c3b-9e8f-0a1b2c3d4e5f") == "pod-1-0"
    assert static_instance_id("app-StreamThread-1-consumer") == ""  # not a coordinator's member id


@pytest.mark.kafka
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_the_group_view_matches_describe_consumer_groups(kafka_bootstrap, kafka_topics, protocol):
    topic = kafka_topics("group-view", partitions=3)
    group = f"group-view-{uuid.uuid4().hex[:8]}"
    settings = {"bootstrap.servers": kafka_bootstrap, "group.id": group, "group.protocol": protocol}
    if protocol == "classic":
        settings["group.instance.id"] = f"{group}-0"
    member = Consumer(settings)
    member.subscribe([topic])
    admin = InternalTopicManager({"bootstrap.servers": kafka_bootstrap})
    try:
        wait_for(lambda: bool(member.consume(1, 0.1) or member.assignment()), 30, "an assignment")
        wait_for(lambda: admin.group_members(group)[0] == "STABLE", 30, "a stable group")
        state, members = admin.group_members(group)
        described_state, described = admin._described_members(group)
        _state, static_view = admin.group_members(group, static=protocol == "classic")
    finally:
        member.close()
    assert state == described_state == "STABLE"
    assert [(m.member_id, m.client_id, m.assignment, m.host) for m in members] == [
        (m.member_id, m.client_id, m.assignment, m.host) for m in described
    ]
    assert members[0].assignment == ((topic, 0), (topic, 1), (topic, 2))
    # DescribeGroups has no group.instance.id; for a static group it is read back from the member id
    assert [m.instance_id for m in static_view] == [m.instance_id for m in described]
    if protocol == "classic":
        assert [m.instance_id for m in static_view] == [f"{group}-0"]
