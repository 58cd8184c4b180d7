"""Chaos tests: instances killed with `kill -9` and restarted at random, and broker restarts, while input
arrives; the read_committed output must hold every update exactly once (tests/kafka/chaos.py)."""

from __future__ import annotations

import pytest

from tests.harness.kafka_fixtures import free_port
from tests.harness.kafka_split import SplitKafkaCluster
from tests.kafka.chaos import ASYNC_APP, ChaosResult, audit, run_chaos


def test_audit_counts_losses_duplicates_and_regressions():
    result = audit(
        {"a": 3, "b": 4, "c": 2, "d": 1},
        {"a": [1, 2, 3], "b": [1, 2, 1, 2, 3, 4], "c": [1], "d": [1, 1]},
    )
    assert result.lost == 1  # c stopped at 1 of 2
    assert result.duplicates == 3  # b counted 1 and 2 twice, d counted 1 twice
    assert result.regressions == 2  # b went 2 -> 1, d went 1 -> 1
    assert sorted(result.wrong_keys) == ["b", "c", "d"]
    assert result.final == {"a": 3, "b": 4, "c": 1, "d": 1}


def _assert_exactly_once(result: ChaosResult, clean_exits: bool = True) -> None:
    a = result.audit
    per_kill = result.restored_records / max(1, result.kills)
    print(f"{result.kills} kills, {result.broker_restarts} broker restarts: {a.summary()}; "
          f"input records whose acknowledgement was lost: {result.unacked}; changelog records "
          f"restored: {result.restored_records} ({per_kill:.0f} per kill)")  # fmt: skip
    assert result.kills >= 3, "the loop must actually kill instances"
    assert a.total_expected > 1000
    assert (a.lost, a.duplicates, a.regressions, a.wrong_keys) == (0, 0, 0, []), (
        f"{a.summary()}\n{result.diagnostics}\n{_warnings_of(result.logs)}"
    )
    if clean_exits:
        failed = [
            "\n".join(line for line in log.splitlines() if '"ERROR"' in line)[-3000:]
            + (
                f"\nlast log lines:\n{log[-1500:]}\nits threads when it was killed:\n{stacks}"
                if stacks
                else ""
            )
            for code, log, stacks in zip(result.exit_codes, result.logs, result.stuck_stacks, strict=True)
            if code != 0
        ]
        assert not failed, f"every instance stops cleanly on SIGTERM: {result.exit_codes}\n" + "\n".join(
            failed
        )


def _warnings_of(logs: list[str], per_instance: int = 40) -> str:
    """Each instance's last warning and error lines (its structured log): what the instances did about
    the faults, for an audit that failed."""
    parts = []
    for index, log in enumerate(logs):
        notable = [line for line in log.splitlines() if '"WARNING"' in line or '"ERROR"' in line]
        parts.append(f"instance {index}, last {per_instance} of {len(notable)} warnings and errors:")
        parts.extend(line[:400] for line in notable[-per_instance:])
    return "\n".join(parts)


# The kill-only loops on one broker: the cluster campaigns (test_cluster_chaos.py) kill instances as
# often under the same audits, so CI runs those and `make chaos` these (the `chaos` mark).
@pytest.mark.kafka
@pytest.mark.chaos
@pytest.mark.timeout(300)
@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
def test_kill_loop_exactly_once(kafka_bootstrap, tmp_path, static):
    result = run_chaos(kafka_bootstrap, tmp_path, static=static, duration_s=40.0)
    _assert_exactly_once(result)


@pytest.mark.kafka
@pytest.mark.timeout(300)
def test_kill_loop_exactly_once_with_async_calls_in_flight(kafka_bootstrap, tmp_path):
    """kill -9 with asynchronous calls in flight in both sub-topologies: what was in flight is redone,
    never half emitted; per key no count lost, duplicated or out of order. Short in CI (its time
    budget); `make chaos` runs it for minutes."""
    result = run_chaos(
        kafka_bootstrap,
        tmp_path,
        app=ASYNC_APP,
        instances=2,
        duration_s=10.0,
        kill_every=(1.5, 2.2),  # at least 3 kills in 10 s however slow the machine
        rate=250.0,  # over the 1000 inputs the audit wants even when the feeder is slowed down
    )
    _assert_exactly_once(result)


@pytest.mark.kafka
@pytest.mark.chaos
@pytest.mark.timeout(300)
def test_kill_loop_at_least_once_loses_nothing(kafka_bootstrap, tmp_path):
    result = run_chaos(kafka_bootstrap, tmp_path, guarantee="at_least_once", duration_s=25.0)
    assert result.kills >= 2
    assert result.audit.lost == 0, result.audit.summary()


@pytest.mark.kafka
@pytest.mark.chaos
@pytest.mark.timeout(400)
def test_broker_restarts_with_kills_exactly_once(tmp_path):
    """(`make chaos`: in CI the three-broker campaigns of test_cluster_chaos.py crash brokers under the
    same kill loop, and test_eos_broker_freeze.py pins the duplicate a whole-cluster outage caused.)
    A cluster of its own - a controller-only and a broker-only process - whose broker is crashed twice
    and restarted once fenced, while instances are killed (static members: the case where librdkafka
    reports `Static consumer fenced` after the restart). Why not the session's combined node: restarting
    it makes the broker itself drop transaction markers (tests.harness.kafka_split)."""
    broker = SplitKafkaCluster(free_port(), free_port(), tmp_path / "kafka")
    broker.start()
    try:
        result = run_chaos(
            broker.bootstrap_servers, tmp_path, static=True, duration_s=30.0, broker=broker, broker_restarts=2
        )
        dropped = broker.dropped_markers()
    finally:
        broker.stop()
    assert result.broker_restarts == 2
    # A broker that completed transactions without their markers breaks exactly-once by itself: say so
    # rather than let the audit blame the application.
    assert not dropped, "the broker dropped transaction markers:\n" + "\n".join(dropped[:10])
    # Instances ride out the outages (calls retried up to default.api.timeout.ms, a fenced static
    # member rejoins with a new consumer) and stop cleanly on SIGTERM at the end.
    _assert_exactly_once(result)
