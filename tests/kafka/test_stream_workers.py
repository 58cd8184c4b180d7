"""`num.stream.threads=2`: two worker processes behind one `kappaflow run`, on the real broker.

One scenario under exactly_once_v2, seen only from outside as an operator would: the group spreads the
tasks over both workers; the parent's one HTTP endpoint answers health (with each worker's tasks),
Prometheus metrics labelled by worker, and interactive queries for keys of every worker's tasks; a
worker killed with kill -9 mid-stream is replaced and the committed output stays exactly once (every
word's counts rise to its true total with nothing lost, doubled or going backwards); SIGTERM stops every
worker and the parent exits 0.

The app runs as its own process (`kappaflow run`), as in production: workers are forked, and a process
that already opened RocksDB stores (this pytest process, after other tests) cannot fork them safely; the
last test checks that such a process gets a clear error instead of workers that would hang.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from kappaflow.api.errors import StreamsError
from kappaflow.clients import partition_for_key
from kappaflow.runner import KafkaStreams
from tests.harness.kafka_fixtures import free_port
from tests.kafka.chaos import audit
from tests.kafka.streams_support import (
    fast_config,
    http_get,
    kill_if_running,
    produce_lines,
    read_topic,
    start_cli_app,
    wait_for,
)
from tests.kafka.streams_support import wordcount_topology as wordcount

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

WORDS = [f"w{i:02d}" for i in range(16)]


def lines(n: int, offset: int) -> list[str]:
    return [f"{WORDS[(i + offset) % 16]} {WORDS[(i * 5 + offset) % 16]}" for i in range(n)]


def test_two_workers_exactly_once_with_kill_queries_and_sigterm(kafka_bootstrap, kafka_topics, tmp_path):
    source = kafka_topics("wk-in", partitions=4)
    sink = kafka_topics("wk-out", partitions=4)
    port, query_port = free_port(), free_port()
    props = fast_config(
        kafka_bootstrap,
        f"wk-{uuid.uuid4().hex[:8]}",
        str(tmp_path / "state"),
        **{
            "metrics.port": port,
            "num.stream.threads": 2,
            "processing.guarantee": "exactly_once_v2",
            "application.server": f"127.0.0.1:{query_port}",
            "query.http.enabled": "true",
            "query.http.host": "127.0.0.1",
        },
    )
    env = {"WC_INPUT": source, "WC_OUTPUT": sink}
    process = start_cli_app("tests.kafka.apps:wordcount", props, tmp_path, env)
    try:
        wait_for(lambda: _both_workers_have_tasks(port, WORD_COUNT_TASKS), 60, "tasks on both workers")
        threads = _threads(port)
        pids = {t["thread_name"]: t["pid"] for t in threads}
        assert sorted(pids.values()) == sorted(_children(process.pid)), "each worker is a child process"

        first = lines(400, 0)
        produce_lines(kafka_bootstrap, source, first)
        expected = dict(Counter(w for line in first for w in line.split()))
        wait_for(lambda: _queried_all(query_port) == expected, 60, "first counts through the query server")

        # Key lookups through the parent's one server, for keys of both workers' tasks.
        owner = {task: t["thread_name"] for t in _threads(port) for task in t["active_tasks"]}
        word_owner = {w: owner.get(f"1_{partition_for_key(w.encode(), 4)}") for w in WORDS}
        assert len(set(word_owner.values()) - {None}) == 2, f"keys of both workers: {word_owner}"
        for word in WORDS:
            status, body = http_get(query_port, f"/v1/stores/counts/keys/{word}")
            assert status == 200 and json.loads(body)["value"] == expected[word], body

        # One scrape of the parent shows both workers' series, labelled by worker.
        metrics = http_get(port, "/metrics")[1]
        for name in pids:
            assert f'thread_id="{name}"' in metrics
            # each worker process samples its own CPU and memory (runner/samples.py)
            assert f'kappaflow_process_cpu_seconds_total{{thread_id="{name}"}}' in metrics
            assert f'kappaflow_process_resident_memory_bytes{{thread_id="{name}"}}' in metrics

        # kill -9 one worker while input keeps arriving: replaced, output still exactly once.
        second = lines(600, 3)
        victim_name, victim_pid = sorted(pids.items())[0]
        for start in range(0, len(second), 50):
            produce_lines(kafka_bootstrap, source, second[start : start + 50])
            if start == 200:
                os.kill(victim_pid, signal.SIGKILL)
            time.sleep(0.05)
        wait_for(
            lambda: _pid_of(port, victim_name) not in (None, victim_pid), 15, "the killed worker replaced"
        )
        wait_for(lambda: _both_workers_have_tasks(port, WORD_COUNT_TASKS), 60, "tasks back on both workers")
        third = lines(200, 7)
        produce_lines(kafka_bootstrap, source, third)
        total = dict(Counter(w for line in first + second + third for w in line.split()))
        wait_for(lambda: _queried_all(query_port) == total, 60, "counts after the kill")
        assert 'kappaflow_worker_replacements_total{thread_id="' in http_get(port, "/metrics")[1]

        workers = _children(process.pid)
        process.send_signal(signal.SIGTERM)
        assert process.wait(45) == 0
    finally:
        kill_if_running(process)
    assert not any(Path(f"/proc/{pid}").exists() for pid in workers), "a worker outlived its parent"
    _assert_exactly_once(kafka_bootstrap, sink, total)


def test_two_instances_of_two_workers_keep_each_others_standbys_never_a_siblings(
    kafka_bootstrap, kafka_topics, tmp_path
):
    """num.standby.replicas=1 over two instances of two workers: each instance keeps a standby of every
    stateful task the other instance runs, one copy, and no worker keeps one of its sibling's tasks."""
    source = kafka_topics("wksb-in", partitions=4)
    sink = kafka_topics("wksb-out", partitions=4)
    app_id = f"wksb-{uuid.uuid4().hex[:8]}"
    env = {"WC_INPUT": source, "WC_OUTPUT": sink}
    ports, processes = [free_port(), free_port()], []
    try:
        for n, port in enumerate(ports):
            props = fast_config(
                kafka_bootstrap,
                app_id,
                str(tmp_path / f"state-{n}"),
                **{"metrics.port": port, "num.stream.threads": 2, "num.standby.replicas": 1},
            )
            processes.append(start_cli_app("tests.kafka.apps:wordcount", props, tmp_path, env, f"app{n}"))

        def placed() -> tuple[list[set[str]], list[set[str]]] | None:
            described = [_describe(port) for port in ports]
            if any(d.get("state") != "RUNNING" or len(d.get("threads", [])) != 2 for d in described):
                return None
            active = [{t for w in d["threads"] for t in w["active_tasks"]} for d in described]
            standby = [[set(w["standby_tasks"]) for w in d["threads"]] for d in described]
            stateful = {t for t in active[0] | active[1] if t.startswith("1_")}  # the count's tasks
            if len(active[0] | active[1]) != 8 or any(not a for a in active):
                return None
            for me, other in ((0, 1), (1, 0)):
                if set().union(*standby[me]) != active[other] & stateful:
                    return None  # not settled yet (standbys follow each rebalance)
            return active, [set().union(*s) for s in standby]

        wait_for(lambda: placed() is not None, 90, "standbys placed on the other instance")
        for port in ports:
            first, second = (set(w["standby_tasks"]) for w in _threads(port))
            mine = [set(w["active_tasks"]) for w in _threads(port)]
            assert not first & second, "a standby kept twice in one instance"
            assert not (first | second) & (mine[0] | mine[1]), "a standby of a sibling worker's task"
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(45)
            finally:
                kill_if_running(process)


def test_a_worker_failing_stops_the_instance_and_every_worker(kafka_bootstrap, kafka_topics, tmp_path):
    """SHUTDOWN_CLIENT (the default answer) in one worker ends the whole instance, as a Kafka Streams
    client shuts down all its threads: the parent goes to ERROR, stops the other worker, exits 1."""
    source = kafka_topics("wkerr-in", partitions=2)
    sink = kafka_topics("wkerr-out", partitions=2)
    port = free_port()
    props = fast_config(
        kafka_bootstrap,
        f"wkerr-{uuid.uuid4().hex[:8]}",
        str(tmp_path / "state"),
        **{"metrics.port": port, "num.stream.threads": 2},
    )
    env = {"WC_INPUT": source, "WC_OUTPUT": sink}
    process = start_cli_app("tests.kafka.apps:failing_on_boom", props, tmp_path, env)
    try:
        wait_for(lambda: _both_workers_have_tasks(port), 60, "RUNNING with tasks on both workers")
        workers = _children(process.pid)
        produce_lines(kafka_bootstrap, source, ["fine", "boom"])
        assert process.wait(60) == 1
    finally:
        kill_if_running(process)
    assert not any(Path(f"/proc/{pid}").exists() for pid in workers), "a worker outlived its parent"
    log = (tmp_path / "app.log").read_text()
    assert "RuntimeError: boom" in log and "stopped (error)" in log
    assert "close timed out" not in log


def test_a_process_that_opened_rocksdb_refuses_to_fork_workers(kafka_bootstrap, tmp_path):
    """RocksDB's background threads stay in the parent: a forked worker's flush would wait forever."""
    config = fast_config(kafka_bootstrap, f"wkx-{uuid.uuid4().hex[:8]}", str(tmp_path))
    import rocksdict

    db = rocksdict.Rdict(str(tmp_path / "db"))  # starts RocksDB's thread pools in this process
    try:
        db[b"k"] = b"v"
        db.flush()
        streams = KafkaStreams(wordcount("wkx-in", "wkx-out"), {**config, "num.stream.threads": 2})
        with pytest.raises(StreamsError, match=r"num.stream.threads=2: this process already runs RocksDB"):
            streams.start()
    finally:
        db.close()


# ----------------------------------------------------------------- helpers
def _describe(port: int) -> dict[str, Any]:
    status, body = http_get(port, "/health/ready")
    return json.loads(body) if status in (200, 503) and body.startswith("{") else {}


def _threads(port: int) -> list[dict[str, Any]]:
    threads: list[dict[str, Any]] = _describe(port).get("threads", [])
    return threads


WORD_COUNT_TASKS = [f"{sub}_{p}" for sub in (0, 1) for p in range(4)]


def _both_workers_have_tasks(port: int, tasks: list[str] | None = None) -> bool:
    """RUNNING and both workers with tasks; given `tasks`, also their last reports (every 0.5 s) naming
    each of them once - a report from before the workers' rebalance settled names a task twice, or not."""
    described = _describe(port)
    threads = described.get("threads", [])
    reported = sorted(task for t in threads for task in t["active_tasks"])
    return (
        described.get("state") == "RUNNING"
        and len(threads) == 2
        and all(t["active_tasks"] for t in threads)
        and (tasks is None or reported == tasks)
    )


def _pid_of(port: int, name: str) -> int | None:
    return next((t["pid"] for t in _threads(port) if t["thread_name"] == name), None)


def _queried_all(query_port: int) -> dict[str, int]:
    status, body = http_get(query_port, "/v1/stores/counts/all")
    if status != 200:
        return {}
    answer = json.loads(body)
    assert sorted(answer["partitions"]) == [0, 1, 2, 3], answer
    return {e["key"]: e["value"] for e in answer["entries"]}


def _children(pid: int) -> list[int]:
    """The live child processes of `pid`, by the parent id in each process's /proc stat line (a
    thread's `children` file vanishes with the thread, and the parent's threads come and go)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # the process ended while being listed
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state, ppid, ...
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def _assert_exactly_once(bootstrap: str, sink: str, expected: dict[str, int]) -> None:
    """Every word's committed counts rise to its total: nothing lost, doubled or going backwards
    (the record cache may skip intermediate counts; chaos.audit names what is wrong)."""
    sequences: dict[str, list[int]] = defaultdict(list)
    for msg in read_topic(bootstrap, sink, timeout=30, committed_only=True):
        sequences[msg.key().decode()].append(struct.unpack(">q", msg.value())[0])
    result = audit(expected, dict(sequences))
    assert (result.lost, result.duplicates, result.regressions, result.wrong_keys) == (0, 0, 0, []), (
        result.summary()
    )
