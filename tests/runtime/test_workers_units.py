"""The pure parts of `num.stream.threads` > 1 without a broker: combined state, scatter-gather results,
metrics snapshots from workers, one metadata entry per instance, standbys placed on other instances than
their task's owner (never on a sibling worker), the task-directory lock hand-over, and the check that
refuses to fork workers from a process running RocksDB's threads."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from examples.queryable_app import build_topology

from kappaflow.api.errors import StreamsError
from kappaflow.api.metrics import Metrics
from kappaflow.api.processor import TaskId
from kappaflow.clients.admin import GroupMember
from kappaflow.runner.managed_task import TaskDirLock
from kappaflow.runner.metadata import HostInfo, TopologyIndex, consumer_client_id, interpret_group
from kappaflow.runner.placement import standby_tasks_for
from kappaflow.runner.worker_process import fork_hazards
from kappaflow.runner.workers import combine_results, combined_state, replacement_delay


def test_combined_state_of_workers():
    assert combined_state(["RUNNING", "RUNNING"]) == "RUNNING"
    assert combined_state(["RUNNING", "REBALANCING"]) == "REBALANCING"
    assert combined_state(["CREATED", "RUNNING"]) == "REBALANCING"  # a replacement still starting
    assert combined_state(["RUNNING", "ERROR"]) == "ERROR"
    assert combined_state([]) == "REBALANCING"


def test_a_worker_dying_again_and_again_is_replaced_ever_more_slowly():
    assert replacement_delay([100.0], 100.0) == 0.0  # a first death: replaced at once
    assert replacement_delay([10.0, 100.0], 100.0) == 0.0  # the earlier one is out of the window
    assert replacement_delay([90.0, 100.0], 100.0) == 1.0
    assert replacement_delay([80.0, 90.0, 100.0], 100.0) == 2.0
    assert replacement_delay([float(t) for t in range(41, 101)], 100.0) == 30.0  # capped


def test_scatter_gather_results_combine():
    assert combine_results([3, 4]) == 7  # approximate_num_entries
    assert combine_results([[("a", 1)], [("b", 2), ("c", 3)]]) == [("a", 1), ("b", 2), ("c", 3)]


def test_worker_metrics_snapshots_are_labelled_and_replace_older_ones():
    worker = Metrics()
    worker.increment("records-processed-total", 5, task="0_0")
    worker.set_gauge("active-tasks", 2, state="RUNNING")
    parent = Metrics()
    parent.merge_snapshot(worker.counters(), worker.gauges(), thread_id="app-StreamThread-1")
    parent.merge_snapshot(worker.counters(), worker.gauges(), thread_id="app-StreamThread-2")
    worker.increment("records-processed-total", 5, task="0_0")
    parent.merge_snapshot(worker.counters(), worker.gauges(), thread_id="app-StreamThread-1")
    assert parent.counter("records-processed-total", thread_id="app-StreamThread-1") == 10  # set, not added
    assert parent.counter("records-processed-total") == 15
    assert parent.gauge("active-tasks", state="RUNNING") == 4
    assert parent.counter("records-processed-total", task="0_0", thread_id="app-StreamThread-2") == 5


def test_workers_of_one_instance_are_one_metadata_entry():
    index = TopologyIndex(build_topology("input"), "qa")
    topics = sorted({t for s in index.topology.sub_topologies() for t in index.source_topics_of(s.id)})
    members = [
        GroupMember(f"m{i}", consumer_client_id(f"c-StreamThread-{i}-consumer", host), f"i{i}", assignment)
        for i, (host, assignment) in enumerate(
            [
                ("h0:7000", tuple((t, p) for t in topics for p in (0, 1))),
                ("h0:7000", tuple((t, p) for t in topics for p in (2,))),
                ("h1:7000", tuple((t, p) for t in topics for p in (3,))),
            ]
        )
    ]
    view = interpret_group(True, members, index, 0, standby_tasks_for)
    assert [m.host_info for m in view.metadata] == [HostInfo("h0", 7000), HostInfo("h1", 7000)]
    assert {p for _t, p in view.metadata[0].topic_partitions} == {0, 1, 2}


def test_task_dir_lock_waits_for_the_previous_owner(tmp_path: Path):
    held = TaskDirLock(tmp_path / "1_0")
    with pytest.raises(StreamsError, match="locked by another process"):
        TaskDirLock(tmp_path / "1_0")  # flock is per open file: a second open in-process conflicts too
    releaser = threading.Timer(0.3, held.release)
    releaser.start()
    started = time.monotonic()
    taken = TaskDirLock(tmp_path / "1_0", wait_s=5.0)
    assert 0.2 < time.monotonic() - started < 5.0
    taken.release()
    held = TaskDirLock(tmp_path / "1_0")
    with pytest.raises(StreamsError, match=r"waited 0s"):
        TaskDirLock(tmp_path / "1_0", wait_s=0.3)
    held.release()


def test_fork_hazards_name_rocksdb_background_threads(tmp_path: Path):
    for tid, name in ((1, "python"), (2, "rocksdb:low"), (3, "rdk:main"), (4, "rocksdb:high")):
        (tmp_path / str(tid)).mkdir()
        (tmp_path / str(tid) / "comm").write_text(name + "\n")
    assert fork_hazards(tmp_path) == ["rocksdb:low", "rocksdb:high"]
    assert fork_hazards(tmp_path / "2") == []  # a thread dir with no sub-threads: nothing found


def _worker(instance: str, index: int, host: str, partitions: list[int], endpoint: str = "") -> GroupMember:
    client_id = consumer_client_id(f"{instance}-StreamThread-{index}-consumer", endpoint)
    member_id = f"{instance}-m{index}@{host}"
    return GroupMember(member_id, client_id, "", tuple(("t", p) for p in partitions), host)


def _tasks_of(partitions: list[tuple[str, int]]) -> dict[TaskId, list[tuple[str, int]]]:
    return {TaskId(0, p): [("t", p)] for _t, p in partitions}


def test_standbys_go_to_another_instance_never_a_sibling_worker_and_once_per_task():
    # An assignment `range` would not give (so the ring rule places the standbys): each worker two
    # interleaved partitions.
    members = [
        _worker("pod-a", 1, "10.0.0.1", [0, 2]),
        _worker("pod-a", 2, "10.0.0.1", [1, 3]),
        _worker("pod-b", 1, "10.0.0.2", [4, 6]),
        _worker("pod-b", 2, "10.0.0.2", [5, 7]),
    ]
    placed = {
        m.member_id.split("@")[0]: standby_tasks_for(m.member_id, members, _tasks_of, 1) for m in members
    }
    a_tasks = {TaskId(0, p) for p in range(4)}
    b_tasks = {TaskId(0, p) for p in range(4, 8)}
    assert placed["pod-a-m1"] | placed["pod-a-m2"] == b_tasks  # pod-a keeps pod-b's standbys ...
    assert placed["pod-b-m1"] | placed["pod-b-m2"] == a_tasks  # ... and pod-b pod-a's
    assert not placed["pod-a-m1"] & placed["pod-a-m2"]  # each standby once: siblings share them out
    assert not placed["pod-b-m1"] & placed["pod-b-m2"]
    assert all(len(tasks) == 2 for tasks in placed.values())


def test_forecast_standbys_of_workers_sit_where_range_moves_a_dead_pods_tasks():
    # `range`'s own assignment: a failover of one pod hands all its tasks, in range order, to the other
    # pod's workers, so that is where their standbys go, on another instance, each task once.
    members = [
        _worker("pod-a", 1, "10.0.0.1", [0, 1]),
        _worker("pod-a", 2, "10.0.0.1", [2, 3]),
        _worker("pod-b", 1, "10.0.0.2", [4, 5]),
        _worker("pod-b", 2, "10.0.0.2", [6, 7]),
    ]
    placed = {
        m.member_id.split("@")[0]: standby_tasks_for(m.member_id, members, _tasks_of, 1) for m in members
    }
    assert placed["pod-b-m1"] == {TaskId(0, p) for p in range(4)}  # range over pod-b's two workers
    assert placed["pod-a-m2"] == {TaskId(0, p) for p in range(4, 8)}
    assert placed["pod-a-m1"] == placed["pod-b-m2"] == set()


def test_instances_are_told_apart_by_host_and_endpoint_not_only_client_id():
    same_client_id = [
        _worker("app", 1, "10.0.0.1", [0]),
        _worker("app", 1, "10.0.0.2", [1]),  # another pod someone gave the same client.id
    ]
    assert standby_tasks_for("app-m1@10.0.0.1", same_client_id, _tasks_of, 1) == {TaskId(0, 1)}
    assert standby_tasks_for("app-m1@10.0.0.2", same_client_id, _tasks_of, 1) == {TaskId(0, 0)}
    one_pod = [_worker("app", 1, "10.0.0.1", [0]), _worker("app", 2, "10.0.0.1", [1])]
    assert standby_tasks_for("app-m1@10.0.0.1", one_pod, _tasks_of, 1) == set()  # no other instance
    endpoints = [
        _worker("app", 1, "127.0.0.1", [0], "127.0.0.1:7001"),
        _worker("app", 2, "127.0.0.1", [1], "127.0.0.1:7002"),  # same host, two instances (local runs)
    ]
    assert standby_tasks_for("app-m2@127.0.0.1", endpoints, _tasks_of, 1) == {TaskId(0, 0)}


# Runs in a child: forking workers needs a process without RocksDB threads (fork_hazards).
STUCK_WORKER = textwrap.dedent(
    """
    import os
    import threading

    from kappaflow.api.metrics import Metrics
    from kappaflow.runner.worker_process import WorkerSpec
    from kappaflow.runner.workers import WorkerPool

    started_r, started_w = os.pipe()


    def hang_here():
        threading.Event().wait()


    class StuckInstance:
        metrics = Metrics()
        final_commit_error = None
        error = None

        def set_state_listener(self, listener):
            pass

        def start(self):
            os.write(started_w, b"!")
            hang_here()


    pool = WorkerPool([WorkerSpec(1, "stuck-worker", StuckInstance, 1.0)], Metrics(), lambda state: None)
    pool.start()
    os.read(started_r, 1)  # the worker is inside hang_here() now
    print("stopped cleanly:", pool.stop(0.5))
    """
)


def test_a_worker_that_does_not_stop_prints_where_it_is_stuck_before_it_is_ended():
    """A worker still running past close()'s timeout is aborted, not killed outright: faulthandler prints
    every thread's stack on SIGABRT, so the log names the call the worker hung in (issue 31's replay lost
    60 s to a worker that did not stop, and nothing said where it was)."""
    result = subprocess.run([sys.executable, "-c", STUCK_WORKER], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "stopped cleanly: False" in result.stdout
    assert "in hang_here" in result.stderr and "in start" in result.stderr
