"""Pure parts of the Kafka runner (no broker): murmur2, standby placement, client configs, exposition."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kappaflow.api.config import StreamsConfig
from kappaflow.api.metrics import Metrics
from kappaflow.api.processor import TaskId
from kappaflow.clients.admin import GroupMember, InternalTopicManager, TopicError
from kappaflow.clients.kafka import client_configs
from kappaflow.clients.murmur2 import murmur2, partition_for_key
from kappaflow.runner.http import prometheus_text
from kappaflow.runner.placement import standby_tasks_for
from tests.harness import murmur2 as reference


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=1000))
def test_murmur2_matches_the_independent_reference(data, partitions):
    assert murmur2(data) == reference.murmur2(data)
    assert partition_for_key(data, partitions) == reference.default_partition(data, partitions)


def test_murmur2_known_java_values():
    # Values from Kafka's own UtilsTest.testMurmur2.
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536


def _members(*assignments):
    return [GroupMember(f"m{i}", f"c{i}", f"pod-{i}", tuple(a)) for i, a in enumerate(assignments)]


def _tasks(partitions):
    return {TaskId(1, p): [("t", p)] for _t, p in partitions}


def test_standbys_go_to_the_next_members_never_the_owner_where_range_cannot_be_forecast():
    # not what range gives three members over four partitions (pod-0 would hold 0 and 1): the ring
    # applies (tests/runtime/test_range_forecast.py covers the placement that forecasts range)
    members = _members([("t", 3)], [("t", 0), ("t", 1)], [("t", 2)])
    placed = {m.member_id: standby_tasks_for(m.member_id, members, _tasks, 1) for m in members}
    assert placed == {
        "m0": {TaskId(1, 2)},
        "m1": {TaskId(1, 3)},
        "m2": {TaskId(1, 0), TaskId(1, 1)},
    }
    two = {m.member_id: standby_tasks_for(m.member_id, members, _tasks, 2) for m in members}
    for member in members:
        owned = set(_tasks(list(member.assignment)))
        assert not owned & two[member.member_id]
    assert sum(len(v) for v in two.values()) == 2 * 4  # every task has two standbys
    # more standbys than other members: capped at n - 1
    assert standby_tasks_for("m0", members[:2], _tasks, 5) == {TaskId(1, 0), TaskId(1, 1)}
    assert standby_tasks_for("m0", members[:1], _tasks, 1) == set()


def test_client_configs_follow_the_guarantee_and_pass_security_through():
    config = StreamsConfig(
        {
            "application.id": "app",
            "bootstrap.servers": "b:9092",
            "processing.guarantee": "exactly_once_v2",
            "group.instance.id": "pod-0",
            "security.protocol": "SASL_SSL",
            "sasl.password": "secret",
            "consumer.max.poll.interval.ms": 1000,
        }
    )
    roles = client_configs(config, "cid")
    assert roles["consumer"]["isolation.level"] == "read_committed"
    assert roles["consumer"]["group.instance.id"] == "pod-0"
    assert roles["consumer"]["partition.assignment.strategy"] == "range"
    assert roles["consumer"]["max.poll.interval.ms"] == 1000
    assert roles["producer"]["transactional.id"] == "app-pod-0"
    assert roles["producer"]["partitioner"] == "murmur2_random"
    for role in roles.values():
        assert role["security.protocol"] == "SASL_SSL" and role["sasl.password"] == "secret"
    alo = client_configs(StreamsConfig({"application.id": "a", "bootstrap.servers": "b"}), "c")
    assert "transactional.id" not in alo["producer"]
    # 20 ms at both guarantees: at at_least_once a repartition hop held 100 ms was end-to-end latency,
    # exactly_once_v2 flushes every 100 ms commit anyway (clients/kafka.py)
    assert alo["producer"]["linger.ms"] == 20 and roles["producer"]["linger.ms"] == 20
    assert alo["consumer"]["isolation.level"] == "read_uncommitted"


def test_stream_consumer_prefetch_is_bounded_whatever_the_partition_count():
    """librdkafka's defaults let one fetch response carry 1 MiB per partition up to 50 MiB, each small
    record kept at ~20x its size: memory grew with partitions (bench/scaling_cost.py). The stream
    thread's consumer caps a response and its queue; a user's `consumer.` setting still wins."""
    base = {"application.id": "a", "bootstrap.servers": "b"}
    consumer = client_configs(StreamsConfig(base), "c")["consumer"]
    assert consumer["fetch.max.bytes"] <= 2 << 20
    assert consumer["queued.max.messages.kbytes"] <= 4096
    # librdkafka refuses a fetch.max.bytes below message.max.bytes (1,000,000 by default)
    assert consumer["fetch.max.bytes"] >= 1_000_000
    tuned = client_configs(StreamsConfig({**base, "consumer.fetch.max.bytes": 8 << 20}), "c")["consumer"]
    assert tuned["fetch.max.bytes"] == 8 << 20
    # the restore consumer reads changelogs as fast as it can: not bounded this way
    assert "fetch.max.bytes" not in client_configs(StreamsConfig(base), "c")["restore"]


def test_copartitioning_errors_name_the_topics():
    InternalTopicManager.check_copartitioned([["a", "b"]], {"a": 3, "b": 3})
    try:
        InternalTopicManager.check_copartitioned([["a", "b"]], {"a": 3, "b": 4})
    except TopicError as err:
        assert "a (3 partitions)" in str(err) and "b (4 partitions)" in str(err)
    else:
        raise AssertionError("expected a TopicError")


def test_prometheus_text_format():
    metrics = Metrics()
    metrics.increment("records-processed-total", 3, task="0_1")
    metrics.set_gauge("restore-remaining-records", 7, task='we"ird')
    text = prometheus_text(metrics)
    assert "# TYPE kappaflow_records_processed_total counter" in text
    assert 'kappaflow_records_processed_total{task="0_1"} 3.0' in text
    assert 'kappaflow_restore_remaining_records{task="we\\"ird"} 7.0' in text


def test_consumer_group_protocol_drops_classic_settings():
    config = StreamsConfig(
        {
            "application.id": "a",
            "bootstrap.servers": "b",
            "consumer.group.protocol": "consumer",
            "consumer.session.timeout.ms": 6000,
        }
    )
    consumer = client_configs(config, "c")["consumer"]
    assert consumer["group.remote.assignor"] == "range"
    assert "partition.assignment.strategy" not in consumer and "session.timeout.ms" not in consumer
