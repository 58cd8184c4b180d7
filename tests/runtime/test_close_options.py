"""KIP-1153 close options without a broker: the LeaveGroup bytes (clients/group_messages.py), what an
answer means (clients/group_leave.py), which members a close removes and what it refuses
(runner/close_options.py), and where KafkaStreams and `kappaflow run` apply them."""

from __future__ import annotations

from datetime import timedelta

import pytest

from kappaflow import StreamsBuilder, serdes
from kappaflow.api.config import StreamsConfig
from kappaflow.api.errors import ConfigError, StreamsError
from kappaflow.cli import build_parser
from kappaflow.clients import group_messages as gm
from kappaflow.clients.group_leave import GroupLeaveError, bootstrap_addresses, interpret
from kappaflow.clients.wire import Reader
from kappaflow.runner import CloseOptions, GroupMembershipOperation, KafkaStreams, State
from kappaflow.runner.close_options import check_supported, instances_to_remove

LEAVE, REMAIN, DEFAULT = (
    GroupMembershipOperation.LEAVE_GROUP,
    GroupMembershipOperation.REMAIN_IN_GROUP,
    GroupMembershipOperation.DEFAULT,
)


def test_leave_group_names_members_by_instance_id_with_an_unknown_member_id():
    # v5, flexible: group "g", members [("", "i", reason "r")], tags
    assert gm.encode_leave_group(5, "g", ["i"], "r").hex() == "02670201026902720000"
    # v4: no reason
    assert gm.encode_leave_group(4, "g", ["i"], "r").hex() == "0267020102690000"
    # v3, classic: int16 strings, an int32 array length, no tags
    assert gm.encode_leave_group(3, "g", ["i"], "r").hex() == "000167000000010000000169"


def test_a_leave_group_answer_decodes_per_member():
    body = bytes.fromhex("00000000000002026d026900000000")
    assert gm.decode_leave_group(4, Reader(body, flexible=True)) == gm.LeaveGroupResult(
        0, (gm.LeftMember("m", "i", 0),)
    )
    classic = bytes.fromhex("0000000000000000000100000001690019")
    assert gm.decode_leave_group(3, Reader(classic, flexible=False)) == gm.LeaveGroupResult(
        0, (gm.LeftMember("", "i", 25),)
    )


def test_an_answer_is_done_retried_or_an_error():
    def result(error: int, *members: tuple[str, int]) -> gm.LeaveGroupResult:
        return gm.LeaveGroupResult(error, tuple(gm.LeftMember("", i, e) for i, e in members))

    assert interpret(result(0, ("a", 0), ("b", 0)), ["a", "b"]) is None
    assert interpret(result(0, ("a", 25)), ["a"]) is None  # not a member any more: what was wanted
    assert interpret(result(69), ["a"]) is None  # no such group
    assert interpret(result(16), ["a"]) == "LeaveGroup: NOT_COORDINATOR"  # asked again
    fenced = interpret(result(0, ("a", 82)), ["a"])
    assert isinstance(fenced, GroupLeaveError) and "a: FENCED_INSTANCE_ID" in str(fenced)
    missing = interpret(result(0, ("a", 0)), ["a", "b"])
    assert isinstance(missing, GroupLeaveError) and "b: no answer" in str(missing)


def test_bootstrap_servers_become_addresses():
    assert bootstrap_addresses("PLAINTEXT://k1:9092, k2:9093,") == [("k1", 9092), ("k2", 9093)]
    with pytest.raises(GroupLeaveError, match="not host:port"):
        bootstrap_addresses("k1")


def test_only_static_members_under_leave_group_are_removed_by_the_close():
    assert instances_to_remove(LEAVE, "pod-0", 1) == ["pod-0"]
    assert instances_to_remove(LEAVE, "pod-0", 3) == ["pod-0-1", "pod-0-2", "pod-0-3"]  # worker processes
    assert instances_to_remove(LEAVE, "", 1) == []  # dynamic: librdkafka's close leaves
    assert instances_to_remove(DEFAULT, "pod-0", 1) == []
    assert instances_to_remove(REMAIN, "pod-0", 1) == []


def test_remain_in_group_is_refused_for_a_dynamic_member_only():
    check_supported(REMAIN, static=True)
    check_supported(LEAVE, static=False)
    with pytest.raises(StreamsError, match="needs static membership"):
        check_supported(REMAIN, static=False)


def test_close_options_are_fluent_like_javas():
    options = CloseOptions.group_membership_operation(LEAVE).with_timeout(timedelta(seconds=5))
    assert (options.membership, options.timeout_s) == (LEAVE, 5.0)
    assert CloseOptions.timeout(250) == CloseOptions(timeout_s=0.25, membership=None)
    with pytest.raises(StreamsError, match="negative"):
        CloseOptions.timeout(-1)
    assert GroupMembershipOperation.parse("leave_group") is LEAVE
    with pytest.raises(StreamsError, match="one of LEAVE_GROUP, REMAIN_IN_GROUP, DEFAULT"):
        GroupMembershipOperation.parse("stay")


def _streams(tmp_path, **extra: str) -> KafkaStreams:
    config = {"application.id": "close-opts", "bootstrap.servers": "127.0.0.1:1", "state.dir": str(tmp_path),
              "metrics.port": -1, **extra}  # fmt: skip
    builder = StreamsBuilder()
    builder.stream("in", key_serde=serdes.String(), value_serde=serdes.String()).to("out")
    return KafkaStreams(builder.build(), config)


def test_a_dynamic_instance_refuses_remain_in_group_before_stopping_anything(tmp_path):
    streams = _streams(tmp_path)
    with pytest.raises(StreamsError, match="REMAIN_IN_GROUP needs static membership"):
        streams.close(CloseOptions.group_membership_operation(REMAIN))
    assert streams.state is State.CREATED  # untouched: close() can still be called as it should be
    assert streams.close(CloseOptions.timeout(timedelta(seconds=1)))
    assert streams.state is State.NOT_RUNNING


def test_the_config_asking_a_dynamic_instance_to_remain_fails_start(tmp_path):
    with pytest.raises(ConfigError, match="close.group.membership.operation"):
        StreamsConfig({"application.id": "a", "close.group.membership.operation": "stay"})
    streams = _streams(tmp_path, **{"close.group.membership.operation": "REMAIN_IN_GROUP"})
    with pytest.raises(ConfigError, match="'close.group.membership.operation': GroupMembershipOperation"):
        streams.start()
    assert streams.state is State.CREATED


def test_kappaflow_run_takes_the_operation_as_a_flag():
    args = build_parser().parse_args(["run", "app:topology", "--close-membership", "leave_group"])
    assert args.close_membership == "LEAVE_GROUP"
    assert build_parser().parse_args(["run", "app:topology"]).close_membership is None
