"""Interactive queries in-process: the Python API across three instances, and reads during restoration.

Three KafkaStreams instances of examples/queryable_app.py share one group, each with its own
`application.server`. Every key is found through `query_metadata_for_key` and read from the owner's
`store(...)`; then one instance leaves, the others restore its partitions from the changelog, and a read
of a restoring partition must raise the retryable InvalidStateStorePartitionError (503 over HTTP), never
return a wrong value.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter

import pytest
from examples.queryable_app import COUNTS_STORE, SESSION_STORE, WINDOWED_STORE, build_topology

from kappaflow.api.errors import InvalidStateStoreError, InvalidStateStorePartitionError
from kappaflow.clients import partition_for_key
from kappaflow.query import QueryableStoreTypes, QueryServer
from kappaflow.runner import KafkaStreams
from kappaflow.runner.metadata import HostInfo
from tests.harness.kafka_fixtures import free_port
from tests.kafka.streams_support import fast_config, produce_lines, wait_for, wait_running

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

PARTITIONS = 4


def get_json(port: int, path: str) -> tuple[int, dict, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}"), dict(err.headers)


class Instance:
    def __init__(self, bootstrap: str, app_id: str, topic: str, state_dir: str, protocol: str) -> None:
        self.port = free_port()
        extra = {"application.server": f"127.0.0.1:{self.port}", "statestore.cache.max.bytes": 0}
        if protocol == "consumer":
            extra["consumer.group.protocol"] = "consumer"
        config = fast_config(bootstrap, app_id, state_dir, **extra)
        self.streams = KafkaStreams(build_topology(topic), config)
        self.server = QueryServer(self.streams, "127.0.0.1")

    def start(self) -> Instance:
        self.server.start()
        self.streams.start()
        return self

    def close(self) -> None:
        self.server.stop()
        self.streams.close(30)


def throttle_restoration(streams: KafkaStreams, records: int = 100, pause: float = 0.05) -> None:
    """Slow this instance's restoration down (fewer records per step, a pause between steps)."""
    tm = streams.stream_thread.tm
    original = tm.restore_step

    def slow(max_records: int = 2000, timeout: float = 0.0) -> list:
        if tm.restoring():
            time.sleep(pause)
        return original(min(max_records, records), timeout)

    tm.restore_step = slow


def owner_counts(instances: list[Instance], words: list[str]) -> dict[str, int | None]:
    """Each word read through the Python API on the instance the metadata names as its owner."""
    by_host = {HostInfo("127.0.0.1", i.port): i for i in instances}
    result: dict[str, int | None] = {}
    for word in words:
        meta = instances[0].streams.query_metadata_for_key(COUNTS_STORE, word)
        owner = by_host.get(meta.active_host) if meta.active_host else None
        if owner is None:
            result[word] = None
            continue
        try:
            result[word] = owner.streams.store(COUNTS_STORE, QueryableStoreTypes.key_value()).get(word)
        except InvalidStateStorePartitionError:
            result[word] = None
    return result


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_python_api_on_three_instances_and_reads_during_restoration(
    kafka_bootstrap, kafka_topics, tmp_path, protocol
):
    """Both group protocols: the classic one (eager `range`) and KIP-848's (incremental, broker-side)."""
    topic = kafka_topics("iq-in", partitions=PARTITIONS)
    app_id = f"iq-{uuid.uuid4().hex[:8]}"
    lines = [f"w{i} common" for i in range(6000)] + ["kafka streams kafka"]
    expected = Counter(w for line in lines for w in line.split())
    sample = ["common", "kafka", "streams", *(f"w{i}" for i in range(0, 6000, 97))]
    instances = [
        Instance(kafka_bootstrap, app_id, topic, str(tmp_path / f"s{n}"), protocol) for n in range(3)
    ]

    # Before the group has formed, a query over HTTP is "retry later", not an empty answer.
    early = instances[0].start()
    status, body, headers = get_json(early.port, f"/v1/stores/{COUNTS_STORE}/keys/kafka")
    assert status == 503 and body["retryable"] and headers["Retry-After"] == "1", (status, body)
    try:
        # The others join once the first has created the internal topics (simultaneous starts race on
        # topic creation: an instance may find a topic whose partitions have no leader yet).
        wait_running(early.streams)
        for instance in instances[1:]:
            instance.start()
        streams = [i.streams for i in instances]
        wait_for(lambda: all(s.local_task_ids()[0] for s in streams), 60, "three instances with tasks")
        wait_running(*streams)
        produce_lines(kafka_bootstrap, topic, lines)
        want = {w: expected[w] for w in sample}
        wait_for(lambda: owner_counts(instances, sample) == want, 60, "every key from its owner")

        # The metadata agrees across instances and covers each partition of the store exactly once.
        views = [s.metadata_for_all_clients() for s in streams]
        assert all(len(v) == 3 for v in views)
        assert {str(m.host_info) for m in views[0]} == {f"127.0.0.1:{i.port}" for i in instances}
        owned = sorted(
            p
            for m in views[0]
            if COUNTS_STORE in m.state_store_names
            for t, p in m.topic_partitions
            if t.endswith(f"{COUNTS_STORE}-repartition")
        )
        assert owned == list(range(PARTITIONS))
        meta = streams[1].query_metadata_for_key(COUNTS_STORE, "kafka")
        assert meta == streams[2].query_metadata_for_key(COUNTS_STORE, "kafka")
        assert meta.partition == partition_for_key(b"kafka", PARTITIONS)

        # Scans over one instance see only its partitions; together they see every word once.
        local_alls = [dict(s.store(COUNTS_STORE, QueryableStoreTypes.key_value()).all()) for s in streams]
        assert sum(len(a) for a in local_alls) == len(expected)
        merged = {k: v for a in local_alls for k, v in a.items()}
        assert merged == dict(expected)

        def owner_of(store: str, key: str) -> KafkaStreams:
            host = streams[0].query_metadata_for_key(store, key).active_host
            return next(s for s in streams if s.host_info == host)

        def windowed_total() -> int:
            store = owner_of(WINDOWED_STORE, "kafka").store(
                WINDOWED_STORE, QueryableStoreTypes.window_store()
            )
            return sum(count for _start, count in store.fetch("kafka", 0, 2**62))

        def session_counts() -> list[int]:
            store = owner_of(SESSION_STORE, "kafka").store(SESSION_STORE, QueryableStoreTypes.session_store())
            return [count for _window, count in store.fetch("kafka")]

        # the windowed and session counts run in sub-topologies of their own: they converge too
        wait_for(lambda: windowed_total() == 2, 30, "windowed count")
        wait_for(lambda: session_counts() == [2], 30, "session count")
        with pytest.raises(InvalidStateStoreError, match="window store, not a key-value"):
            streams[0].store(WINDOWED_STORE, QueryableStoreTypes.key_value()).get("kafka")
        lags = streams[0].all_local_store_partition_lags()
        assert set(lags) <= {COUNTS_STORE, WINDOWED_STORE, SESSION_STORE} and all(
            info.offset_lag == 0 for parts in lags.values() for info in parts.values()
        )

        # One instance leaves: the two others restore its partitions from the changelogs. Restoration is
        # throttled here (a test hook on the task managers) so that it is reliably observed: a key of a
        # restoring partition raises the retryable error on the Python API, is 503 with Retry-After over
        # HTTP, and a stale read returns a value no newer than the truth, never a wrong one.
        for instance in instances[:2]:
            throttle_restoration(instance.streams)
        leaving = instances.pop()
        leaving.close()
        observed: list[str] = []

        def check_restoring() -> bool:
            for instance in instances:
                s = instance.streams
                tm = s.stream_thread.tm if s.stream_thread else None
                restoring = [m.task.id for m in tm.restoring()] if tm else []
                for task_id in [t for t in restoring if t.subtopology == 1]:
                    word = next(
                        w for w in expected if partition_for_key(w.encode(), PARTITIONS) == task_id.partition
                    )
                    try:
                        value = s.store(COUNTS_STORE, QueryableStoreTypes.key_value()).get(word)
                        assert value == expected[word], (word, value)  # restored in between: right
                    except InvalidStateStorePartitionError as exc:
                        assert "restoring" in str(exc)
                        observed.append("api")
                    stale = s.store(COUNTS_STORE, QueryableStoreTypes.key_value(), enable_stale_stores=True)
                    assert stale.get(word) in (None, *range(1, expected[word] + 1))
                    status, body, headers = get_json(instance.port, f"/v1/stores/{COUNTS_STORE}/keys/{word}")
                    if status == 503:
                        assert body["retryable"] and headers["Retry-After"] == "1"
                        observed.append("http")
                    else:
                        assert (status, body.get("value")) == (200, expected[word]), (status, body)
            return {"api", "http"} <= set(observed)

        wait_for(check_restoring, 60, "reads of a restoring partition", interval=0.01)
        # Every answer during and after the rebalance is right or "retry"; finally all are right.
        wait_for(lambda: owner_counts(instances, sample) == want, 60, "every key after the rebalance")
        for instance in instances:
            for word in ("kafka", "common"):
                status, body, _ = get_json(instance.port, f"/v1/stores/{COUNTS_STORE}/keys/{word}")
                assert (status, body.get("value")) == (200, expected[word]), body
    finally:
        for instance in instances:
            instance.close()


def test_a_global_store_is_answered_by_any_instance_from_its_own_copy(
    kafka_bootstrap, kafka_topics, tmp_path
):
    from kappaflow import StreamsBuilder, serdes
    from tests.kafka.streams_support import produce

    users = kafka_topics("iqg-users", partitions=3)
    clicks = kafka_topics("iqg-clicks", partitions=2)
    builder = StreamsBuilder()
    string = serdes.String()
    builder.global_table(users, key_serde=string, value_serde=string, materialized="users")
    builder.stream(clicks, key_serde=string, value_serde=string).foreach(lambda _k, _v: None)
    port = free_port()
    config = fast_config(
        kafka_bootstrap,
        f"iqg-{uuid.uuid4().hex[:8]}",
        str(tmp_path),
        **{"application.server": f"127.0.0.1:{port}"},
    )
    streams = KafkaStreams(builder.build(), config)
    server = QueryServer(streams, "127.0.0.1")
    produce(kafka_bootstrap, users, [(f"u{i}".encode(), f"user{i}".encode()) for i in range(20)])
    server.start()
    streams.start()
    try:
        wait_running(streams)
        store = streams.store("users", QueryableStoreTypes.key_value())
        assert store.get("u7") == "user7" and len(store.all()) == 20
        assert streams.query_metadata_for_key("users", "u7").active_host == HostInfo("127.0.0.1", port)
        status, body, _ = get_json(port, "/v1/stores/users/keys/u13")
        assert (status, body["value"]) == (200, "user13")
        status, body, _ = get_json(port, "/v1/stores/users/all")
        assert status == 200 and len(body["entries"]) == 20
    finally:
        server.stop()
        streams.close(30)
