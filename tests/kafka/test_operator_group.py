"""The operator's group I/O against the real broker: it lists the group's static members and removes the
ones a scale-in left behind, whose partitions then move at once instead of after the session timeout
(which decides when, tests/operator/test_departed.py; the whole path on a real cluster,
tests/realnode/test_wordcount_lifecycle.py's scaling test)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer

from kappaflow_operator.kafka import KafkaAdmin, KafkaError, client_config
from tests.kafka.streams_support import wait_for

pytestmark = pytest.mark.kafka

# Long enough that a rebalance within the waits below can only come from the removal.
SESSION_MS = 120_000


def _member(bootstrap: str, group: str, instance_id: str, topic: str) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.instance.id": instance_id,
            "session.timeout.ms": SESSION_MS,
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    return consumer


def _assigned(consumer: Consumer, deadline_s: float = 0.5) -> int:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        consumer.poll(0.1)
    return len(consumer.assignment())


def test_departed_static_members_are_listed_and_removed_and_their_partitions_move(
    kafka_bootstrap, kafka_topics
):
    topic = kafka_topics("operator-group", partitions=4)
    group = f"operator-group-{time.monotonic_ns()}"
    stays, departs = (
        _member(kafka_bootstrap, group, "wc-0", topic),
        _member(kafka_bootstrap, group, "wc-1", topic),
    )
    admin = KafkaAdmin(client_config(kafka_bootstrap))
    try:
        wait_for(
            lambda: _assigned(stays) + _assigned(departs) == 4 and _assigned(departs) > 0, 60, "both assigned"
        )
        departs.close()  # a static member's close leaves it in the group (the pod after SIGTERM)
        # both listed once the group settles (the remaining member keeps polling meanwhile)
        wait_for(
            lambda: _assigned(stays, 0.2) >= 0 and admin.static_members(group) == ["wc-0", "wc-1"],
            30,
            "both listed",
        )

        admin.remove_static_members(group, ["wc-1"])
        assert admin.static_members(group) == ["wc-0"]
        wait_for(lambda: _assigned(stays) == 4, 40, "every partition on the remaining member")
        admin.remove_static_members(group, ["wc-1"])  # already gone: that is what was wanted
        assert admin.static_members("no-such-group-" + group) == []
    finally:
        stays.close()


def test_a_removal_that_cannot_be_sent_is_a_kafka_error_naming_the_members_and_why():
    admin = KafkaAdmin(
        client_config(
            "127.0.0.1:1", "SASL_SSL", {"sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p"}
        )
    )
    with pytest.raises(KafkaError, match="wc-1.*security.protocol=SASL_SSL"):
        admin.remove_static_members("g", ["wc-1"])
