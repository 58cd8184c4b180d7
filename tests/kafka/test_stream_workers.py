"""`num.stream.threads=2`: two worker processes behind one KafkaStreams, on the real broker.

One scenario, exactly_once_v2: tasks spread over both workers by the group; interactive queries through
the parent answer for keys of every worker's tasks; one scrape shows both workers' series; a worker
killed with kill -9 mid-stream is replaced and the committed output is still exactly once (every word's
counts are 1, 2, ... n: nothing lost, nothing doubled); close() stops every worker.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import threading
import time
import uuid
from collections import Counter, defaultdict

import pytest

from kappaflow.clients import partition_for_key
from kappaflow.query import QueryableStoreTypes, QueryServer
from kappaflow.runner import KafkaStreams, State
from tests.harness.kafka_fixtures import free_port
from tests.kafka.chaos import audit
from tests.kafka.streams_support import (
    fast_config,
    http_get,
    latest_counts,
    produce_lines,
    read_topic,
    start_cli_app,
    wait_for,
    wait_running,
)
from tests.kafka.streams_support import wordcount_topology as wordcount

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

WORDS = [f"w{i:02d}" for i in range(16)]


def lines(n: int, offset: int) -> list[str]:
    return [f"{WORDS[(i + offset) % 16]} {WORDS[(i * 5 + offset) % 16]}" for i in range(n)]


def both_workers_have_tasks(streams: KafkaStreams) -> bool:
    threads = streams.local_threads_metadata()
    return len(threads) == 2 and all(t.active_tasks for t in threads)


def test_two_workers_exactly_once_with_kill_and_queries(kafka_bootstrap, kafka_topics, tmp_path):
    source = kafka_topics("wk-in", partitions=4)
    sink = kafka_topics("wk-out", partitions=4)
    app_id = f"wk-{uuid.uuid4().hex[:8]}"
    query_port = free_port()
    config = fast_config(
        kafka_bootstrap,
        app_id,
        str(tmp_path),
        **{
            "num.stream.threads": 2,
            "processing.guarantee": "exactly_once_v2",
            "application.server": f"127.0.0.1:{query_port}",
        },
    )
    streams = KafkaStreams(wordcount(source, sink), config)
    server = QueryServer(streams, "127.0.0.1")
    server.start()
    streams.start()
    try:
        wait_running(streams)
        wait_for(lambda: both_workers_have_tasks(streams), 30, "tasks on both workers")
        threads = streams.local_threads_metadata()
        pids = {t.thread_name: t.pid for t in threads}
        assert len({p for p in pids.values()} | {os.getpid()}) == 3, "each worker is its own process"

        first = lines(400, 0)
        produce_lines(kafka_bootstrap, source, first)
        expected = dict(Counter(w for line in first for w in line.split()))
        wait_for(
            lambda: latest_counts(read_topic(kafka_bootstrap, sink, timeout=3)) == expected, 60, "counts"
        )

        # Interactive queries through the parent, for keys of both workers' tasks.
        store = streams.store("counts", QueryableStoreTypes.key_value())
        owners = {}
        for thread in streams.local_threads_metadata():
            for task in thread.active_tasks:
                owners[task] = thread.thread_name
        word_owner = {w: owners.get(f"1_{partition_for_key(w.encode(), 4)}") for w in WORDS}
        assert len(set(word_owner.values()) - {None}) == 2, f"keys of both workers: {word_owner}"
        assert {w: store.get(w) for w in WORDS} == expected
        assert dict(store.all()) == expected
        assert store.approximate_num_entries() >= len(expected)
        # ... and over the parent's one HTTP server (keys of both workers, and a scan over both)
        for word in WORDS:
            status, body = http_get(query_port, f"/v1/stores/counts/keys/{word}")
            assert status == 200 and json.loads(body)["value"] == expected[word], body
        status, body = http_get(query_port, "/v1/stores/counts/all")
        assert status == 200 and sorted(json.loads(body)["partitions"]) == [0, 1, 2, 3], body
        assert {e["key"]: e["value"] for e in json.loads(body)["entries"]} == expected

        # One scrape of the parent shows both workers' series, labelled by thread.
        status, body = http_get(streams.metrics_port or 0, "/metrics")
        assert status == 200
        for name in pids:
            assert f'thread_id="{name}"' in body

        # kill -9 one worker while input keeps arriving: replaced, output still exactly once.
        second = lines(600, 3)
        feeder = threading.Thread(target=_feed, args=(kafka_bootstrap, source, second))
        feeder.start()
        victim_name, victim_pid = next(iter(pids.items()))
        assert victim_pid is not None
        time.sleep(0.5)
        os.kill(victim_pid, signal.SIGKILL)
        feeder.join()
        wait_for(
            lambda: (
                {t.thread_name: t.pid for t in streams.local_threads_metadata()}[victim_name]
                not in (None, victim_pid)
            ),
            10,
            "the killed worker replaced",
        )
        wait_for(lambda: both_workers_have_tasks(streams), 60, "tasks back on both workers")
        wait_running(streams)
        third = lines(200, 7)
        produce_lines(kafka_bootstrap, source, third)
        all_lines = first + second + third
        total = dict(Counter(w for line in all_lines for w in line.split()))
        wait_for(lambda: _queried(streams) == total, 60, "queried counts after the kill")
        _assert_exactly_once(kafka_bootstrap, sink, total)
        assert streams.metrics.counter("worker-replacements-total") == 1
    finally:
        server.stop()
        assert streams.close(30)
    assert streams.state is State.NOT_RUNNING
    for pid in pids.values():
        assert pid is not None and not _alive(pid), f"worker {pid} still running after close()"


def _assert_exactly_once(bootstrap: str, sink: str, expected: dict[str, int]) -> None:
    """Every word's committed counts are 1, 2, ... n (chaos.audit names what was lost or doubled)."""
    sequences: dict[str, list[int]] = defaultdict(list)
    for msg in read_topic(bootstrap, sink, timeout=30, committed_only=True):
        sequences[msg.key().decode()].append(struct.unpack(">q", msg.value())[0])
    result = audit(expected, dict(sequences))
    assert (result.lost, result.duplicates, result.regressions, result.wrong_keys) == (0, 0, 0, []), (
        result.summary()
    )


def _feed(bootstrap: str, topic: str, data: list[str]) -> None:
    for start in range(0, len(data), 50):
        produce_lines(bootstrap, topic, data[start : start + 50])
        time.sleep(0.05)


def _queried(streams: KafkaStreams) -> dict[str, int]:
    try:
        return dict(streams.store("counts", QueryableStoreTypes.key_value()).all())
    except Exception:
        return {}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_cli_run_with_two_workers_stops_them_all_on_sigterm(kafka_bootstrap, kafka_topics, tmp_path):
    """`kappaflow run` with num.stream.threads=2: one health endpoint for both workers; SIGTERM commits
    (the commit interval is a minute: only the close commits) and every worker exits with the parent."""
    source = kafka_topics("wkcli-in", partitions=2)
    sink = kafka_topics("wkcli-out", partitions=2)
    port = free_port()
    props = fast_config(
        kafka_bootstrap,
        f"wkcli-{uuid.uuid4().hex[:8]}",
        str(tmp_path / "state"),
        **{"metrics.port": port, "num.stream.threads": 2, "commit.interval.ms": 60000},
    )
    process = start_cli_app(
        "tests.kafka.apps:wordcount", props, tmp_path, {"WC_INPUT": source, "WC_OUTPUT": sink}
    )
    try:
        wait_for(lambda: http_get(port, "/health/ready")[0] == 200, 60, "readiness")
        ready = json.loads(http_get(port, "/health/ready")[1])
        assert ready["state"] == "RUNNING" and len(ready["active_tasks"]) == 4, ready
        produce_lines(kafka_bootstrap, source, ["a b", "b c", "c"])
        wait_for(lambda: "kappaflow_records_processed_total" in http_get(port, "/metrics")[1], 30, "metrics")
        workers = _children(process.pid)
        assert len(workers) == 2, workers
        wait_for(lambda: _processed(http_get(port, "/metrics")[1]) >= 8, 30, "8 records processed")
        process.send_signal(signal.SIGTERM)
        assert process.wait(40) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert not any(_alive(pid) for pid in workers)
    assert latest_counts(read_topic(kafka_bootstrap, sink, expected=3, timeout=20)) == {
        "a": 1,
        "b": 2,
        "c": 2,
    }


def _processed(metrics: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("kappaflow_records_processed_total")
    )


def _children(pid: int) -> list[int]:
    from pathlib import Path

    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(p) for p in text.split()]
