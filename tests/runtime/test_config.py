"""StreamsConfig: defaults, properties files, KAPPAFLOW_* environment and validation messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from kappaflow.api.config import StreamsConfig, env_key
from kappaflow.api.errors import ConfigError


def test_defaults_follow_kafka_streams() -> None:
    config = StreamsConfig({"application.id": "a"})
    assert config.get_int("commit.interval.ms") == 30000
    assert config.get_int("statestore.cache.max.bytes") == 10 * 1024 * 1024
    eos = StreamsConfig({"application.id": "a", "processing.guarantee": "exactly_once_v2"})
    assert eos.get_int("commit.interval.ms") == 100
    assert eos.exactly_once


def test_file_then_environment_precedence(tmp_path: Path) -> None:
    props = tmp_path / "app.properties"
    props.write_text(
        "# comment\napplication.id=from-file\nnum.standby.replicas = 1\nbootstrap.servers: b:9092\n"
    )
    config = StreamsConfig.load(
        {"application.id": "from-dict", "commit.interval.ms": 5},
        file=props,
        environ={"KAPPAFLOW_NUM_STANDBY_REPLICAS": "2", "KAPPAFLOW_GROUP_INSTANCE_ID": "pod-0", "OTHER": "x"},
    )
    assert config.application_id == "from-file"
    assert config.get_int("num.standby.replicas") == 2
    assert config.get_str("group.instance.id") == "pod-0"
    assert config.get_str("bootstrap.servers") == "b:9092"
    assert config.get_int("commit.interval.ms") == 5
    assert env_key("bootstrap.servers") == "KAPPAFLOW_BOOTSTRAP_SERVERS"


def test_invalid_values_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'processing.guarantee'"):
        StreamsConfig({"processing.guarantee": "exactly_once"})
    with pytest.raises(ConfigError, match="'num.standby.replicas': expected an integer"):
        StreamsConfig({"num.standby.replicas": "two"})
    with pytest.raises(ConfigError, match="'application.id' is required"):
        _ = StreamsConfig({}).application_id
    bad = tmp_path / "bad.properties"
    bad.write_text("novalue\n")
    with pytest.raises(ConfigError, match=r"bad.properties:1"):
        StreamsConfig.load(file=bad, environ={})
