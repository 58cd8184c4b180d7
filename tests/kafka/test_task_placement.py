"""Tasks go where their state is, on the real broker: a failover lands on caught-up standbys, and a
restarted instance gets its own tasks (and state) back."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from kappaflow.query.server import QueryService
from kappaflow.runner import KafkaStreams
from tests.kafka.streams_support import (
    fast_config,
    latest_counts,
    produce_lines,
    read_topic,
    wait_for,
    wait_running,
    wordcount_topology,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

PARTITIONS = 6


def counts_of(lines: list[str]) -> dict[str, int]:
    return dict(Counter(w for line in lines for w in line.split()))


def restored(app: KafkaStreams) -> float:
    return app.metrics.counter("restored-records-total")


def standby_lag(app: KafkaStreams, tasks: set[str]) -> int:
    """Changelog records this instance's standbys of `tasks` (counting tasks `1_<p>`) have not applied."""
    lags = app.all_local_store_partition_lags().get("counts", {})
    return sum(lags[int(t.split("_")[1])].offset_lag for t in tasks if int(t.split("_")[1]) in lags)


def test_a_departed_instances_tasks_fail_over_to_their_standbys_restoring_only_their_lag(
    kafka_bootstrap, kafka_topics, tmp_path
):
    """Three static instances, one standby each: `range` gives pod-b partitions 2 and 3; without pod-b
    it gives 2 to pod-a and 3 to pod-c. The standbys of pod-b's counting tasks must sit exactly there,
    so the failover restores no more than those standbys lagged (the ring placement put both on pod-c
    and pod-a restored task 1_2's whole changelog)."""
    source = kafka_topics("tp-in", partitions=PARTITIONS)
    sink = kafka_topics("tp-out", partitions=PARTITIONS)
    app_id = f"tp-{uuid.uuid4().hex[:8]}"
    lines = [f"w{i} w{i % 40} common" for i in range(1200)]

    endpoints = {name: f"127.0.0.1:{17100 + i}" for i, name in enumerate("abc")}  # named, never bound

    def instance(name: str) -> KafkaStreams:
        config = fast_config(
            kafka_bootstrap,
            app_id,
            str(tmp_path / name),
            **{
                "num.standby.replicas": 1,
                "group.instance.id": f"pod-{name}",
                "application.server": endpoints[name],
            },
        )
        return KafkaStreams(wordcount_topology(source, sink), config)

    apps = {name: instance(name) for name in "abc"}
    for app in apps.values():
        app.start()
    a, b, c = apps["a"], apps["b"], apps["c"]
    try:
        wait_for(lambda: all(len(x.local_task_ids()[0]) == 4 for x in apps.values()), 60, "4 tasks each")
        wait_running(a, b, c)
        assert sorted(b.local_task_ids()[0]) == ["0_2", "0_3", "1_2", "1_3"]  # range over pod-a..c
        produce_lines(kafka_bootstrap, source, lines)
        wait_for(
            lambda: latest_counts(read_topic(kafka_bootstrap, sink, timeout=5)) == counts_of(lines),
            90,
            "counts",
        )
        wait_for(
            lambda: "1_2" in a.local_task_ids()[1] and "1_3" in c.local_task_ids()[1],
            30,
            "pod-b's counting tasks standing by where a failover moves them",
        )
        wait_for(
            lambda: standby_lag(a, {"1_2"}) == 0 and standby_lag(c, {"1_3"}) == 0, 30, "standbys caught up"
        )
        lag_at_failover = standby_lag(a, {"1_2"}) + standby_lag(c, {"1_3"})
        roles = a.local_task_roles()  # what the HTTP health endpoints describe per task
        assert roles["1_2"] == {"role": "standby", "lag": 0}
        assert roles["1_0"] == {"role": "active", "lag": 0}
        placed = QueryService(c, c.host_info).tasks()  # GET /v1/tasks on pod-c
        assert placed["tasks"]["1_2"] == {"active": endpoints["b"], "standbys": [endpoints["a"]]}
        assert placed["tasks"]["1_3"] == {"active": endpoints["b"], "standbys": [endpoints["c"]]}
        assert placed["local"]["1_3"] == {"role": "standby", "lag": 0}
        wait_for(
            lambda: a.metrics.gauge("task-lag-records", task="1_2", role="standby") == 0,
            15,
            "the standby's lag published per task",
        )
        before = restored(a) + restored(c)
        assert b.close(30)  # a static member: it stays in the group until its session times out
        wait_for(
            lambda: {"1_2"} <= set(a.local_task_ids()[0]) and {"1_3"} <= set(c.local_task_ids()[0]),
            60,
            "pod-b's tasks on pod-a and pod-c",
        )
        wait_running(a, c)
        failover_restored = restored(a) + restored(c) - before
        more = [f"w{i} after" for i in range(100)]
        produce_lines(kafka_bootstrap, source, more)
        wait_for(
            lambda: latest_counts(read_topic(kafka_bootstrap, sink, timeout=5)) == counts_of(lines + more),
            60,
            "counting continues from the standbys' state",
        )
    finally:
        for app in apps.values():
            app.close(30)
    print(f"failover restored {failover_restored:.0f} records (standby lag {lag_at_failover})")
    assert failover_restored <= lag_at_failover, (failover_restored, lag_at_failover)


def test_a_restarted_static_instance_gets_its_own_tasks_back_and_restores_nothing(
    kafka_bootstrap, kafka_topics, tmp_path
):
    """Stickiness across a restart: the same group.instance.id sorts to the same place in `range`, so
    the restarted instance owns the tasks whose state its directory holds."""
    source = kafka_topics("ts-in", partitions=4)
    sink = kafka_topics("ts-out", partitions=4)
    app_id = f"ts-{uuid.uuid4().hex[:8]}"
    lines = [f"v{i} v{i % 30}" for i in range(600)]

    def instance(name: str) -> KafkaStreams:
        config = fast_config(
            kafka_bootstrap,
            app_id,
            str(tmp_path / name),
            **{"num.standby.replicas": 1, "group.instance.id": f"pod-{name}"},
        )
        return KafkaStreams(wordcount_topology(source, sink), config)

    a, b = instance("a"), instance("b")
    a.start()
    b.start()
    try:
        wait_for(lambda: len(a.local_task_ids()[0]) == 4 and len(b.local_task_ids()[0]) == 4, 60, "split")
        wait_running(a, b)
        produce_lines(kafka_bootstrap, source, lines)
        wait_for(
            lambda: latest_counts(read_topic(kafka_bootstrap, sink, timeout=5)) == counts_of(lines),
            90,
            "counts",
        )
        owned = sorted(b.local_task_ids()[0])
        assert b.close(30)
        b = instance("b")  # the same state directory and instance id, within the session
        b.start()
        wait_for(lambda: sorted(b.local_task_ids()[0]) == owned, 60, "the same tasks back")
        wait_running(a, b)
        assert restored(b) == 0
        assert sorted(a.local_task_ids()[0]) == ["0_0", "0_1", "1_0", "1_1"]
    finally:
        a.close(30)
        b.close(30)


def test_a_joining_instance_warms_up_its_forecast_tasks_and_takes_them_over_caught_up(
    kafka_bootstrap, kafka_topics, tmp_path
):
    """Scale-out 2 -> 3 with an empty state directory: `range` will give pod-c partition 3, whose
    counting task pod-b runs. pod-c restores it as a warm-up before it joins (pod-b keeps processing),
    then takes it over restoring no more than `acceptable.recovery.lag` (without the warm-up it joined
    at once and restored the task's whole changelog as an active task)."""
    source = kafka_topics("tw-in", partitions=4)
    sink = kafka_topics("tw-out", partitions=4)
    app_id = f"tw-{uuid.uuid4().hex[:8]}"
    lines = [f"x{i} x{i % 30} shared" for i in range(1200)]
    acceptable = 5

    def instance(name: str) -> KafkaStreams:
        config = fast_config(
            kafka_bootstrap,
            app_id,
            str(tmp_path / name),
            **{"group.instance.id": f"pod-{name}", "acceptable.recovery.lag": acceptable},
        )
        return KafkaStreams(wordcount_topology(source, sink), config)

    a, b = instance("a"), instance("b")
    a.start()
    b.start()
    c = None
    try:
        wait_for(lambda: len(a.local_task_ids()[0]) == 4 and len(b.local_task_ids()[0]) == 4, 60, "split")
        wait_running(a, b)
        assert "1_3" in b.local_task_ids()[0]
        produce_lines(kafka_bootstrap, source, lines)
        wait_for(
            lambda: latest_counts(read_topic(kafka_bootstrap, sink, timeout=5)) == counts_of(lines),
            90,
            "counts",
        )
        c = instance("c")
        c.start()
        wait_for(lambda: sorted(c.local_task_ids()[0]) == ["0_3", "1_3"], 60, "pod-c owns partition 3")
        wait_running(a, b, c)
        assert c.local_task_roles()["1_3"] == {"role": "active", "lag": 0}
        warmed = c.metrics.counter("standby-updated-records-total")
        restored_as_active = restored(c)
        more = [f"x{i} later" for i in range(60)]
        produce_lines(kafka_bootstrap, source, more)
        wait_for(
            lambda: latest_counts(read_topic(kafka_bootstrap, sink, timeout=5)) == counts_of(lines + more),
            60,
            "counting continues on pod-c from the warmed-up state",
        )
    finally:
        for app in (a, b, c):
            if app is not None:
                app.close(30)
    print(f"warm-up applied {warmed:.0f} changelog records; restored as active {restored_as_active:.0f}")
    assert warmed > acceptable  # the task's changelog was restored before pod-c joined ...
    assert restored_as_active <= acceptable  # ... and only the tail after it took the task over
