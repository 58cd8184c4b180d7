"""Exactly-once client settings and the persisted process id, without a broker."""

from __future__ import annotations

from kappaflow.api.config import StreamsConfig
from kappaflow.clients.kafka import client_configs
from kappaflow.runner.process_id import acquire_process_id


def test_group_settings_reach_only_the_group_consumer_and_eos_uses_streams_defaults():
    config = StreamsConfig(
        {
            "application.id": "app",
            "bootstrap.servers": "b:9092",
            "processing.guarantee": "exactly_once_v2",
            "session.timeout.ms": 6000,
            "max.poll.interval.ms": 30000,
        }
    )
    roles = client_configs(config, "cid", process_id="abc")
    assert roles["consumer"]["session.timeout.ms"] == 6000
    assert roles["consumer"]["max.poll.interval.ms"] == 30000
    for role in ("producer", "admin", "restore"):
        assert "session.timeout.ms" not in roles[role] and "max.poll.interval.ms" not in roles[role], role
    assert roles["producer"]["transactional.id"] == "app-abc"
    assert roles["producer"]["transaction.timeout.ms"] == 10000
    overridden = config.with_overrides({"producer.transaction.timeout.ms": 20000})
    assert client_configs(overridden, "cid", "abc")["producer"]["transaction.timeout.ms"] == 20000


def test_process_id_survives_a_restart_and_is_not_shared_by_two_live_processes(tmp_path):
    first = acquire_process_id(tmp_path / "app")
    second = acquire_process_id(tmp_path / "app")  # the directory is held: a temporary id of its own
    assert second.value != first.value
    first.release()
    second.release()
    again = acquire_process_id(tmp_path / "app")
    assert again.value == first.value and len(again.value) == 32
    again.release()
