"""StreamsConfig: defaults, properties files, KAPPAFLOW_* environment and validation messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from kappaflow.api.config import StreamsConfig, env_key
from kappaflow.api.errors import ConfigError
from kappaflow_contract.optimization import REWRITES, optimization_rewrites


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


def test_unknown_keys_fail_naming_the_key() -> None:
    """A typo must not pass: Java would only log an unknown key, kappaflow refuses to start."""
    with pytest.raises(ConfigError, match=r"'comit.interval.ms' is not a kappaflow config key"):
        StreamsConfig({"application.id": "a", "comit.interval.ms": 100})
    with pytest.raises(
        ConfigError, match=r"'default.dsl.store' is a Kafka Streams setting kappaflow does not"
    ):
        StreamsConfig({"default.dsl.store": "in_memory"})
    with pytest.raises(ConfigError, match=r"'num.standby.replica' is not a kappaflow config key"):
        StreamsConfig.load({}, environ={"KAPPAFLOW_NUM_STANDBY_REPLICA": "1"})


def test_unknown_keys_get_a_did_you_mean_naming_where_they_came_from(tmp_path) -> None:
    """The error suggests the key a typo most likely means; from a file it names the file, from the
    environment the variable and the variable the intended key reads."""
    with pytest.raises(ConfigError) as raised:
        StreamsConfig({"application.id": "a", "comit.interval.ms": 100})
    assert str(raised.value) == (
        "config 'comit.interval.ms' is not a kappaflow config key (did you mean commit.interval.ms?)"
    )
    props = tmp_path / "app.properties"
    props.write_text("application.id=a\nbootstrap.server=localhost:9092\n")
    with pytest.raises(ConfigError) as raised:
        StreamsConfig.load(file=props, environ={})
    assert str(raised.value) == (
        f"{props}: config 'bootstrap.server' is not a kappaflow config key (did you mean bootstrap.servers?)"
    )
    with pytest.raises(ConfigError) as raised:
        StreamsConfig.load({}, environ={"KAPPAFLOW_NUM_STANDBY_REPLICA": "1"})
    assert str(raised.value) == (
        "environment variable KAPPAFLOW_NUM_STANDBY_REPLICA: config 'num.standby.replica' is not a "
        "kappaflow config key (did you mean num.standby.replicas?); the variable for num.standby.replicas "
        "is KAPPAFLOW_NUM_STANDBY_REPLICAS"
    )
    with pytest.raises(ConfigError, match=r"\(a typo\?\)$"):
        StreamsConfig({"zzz.qqq": 1})  # nothing close: no suggestion


def test_honoured_keys_and_client_settings_pass() -> None:
    config = StreamsConfig.load(
        {"consumer.fetch.min.bytes": 1, "producer.linger.ms": 10, "security.protocol": "PLAINTEXT"},
        environ={
            "KAPPAFLOW_CACHE": "/tmp/cache",
            "KAPPAFLOW_TEST_BOOTSTRAP": "x",
            "KAPPAFLOW_METRICS_HOST": "h",
        },
    )
    assert config.prefixed("producer.") == {"linger.ms": 10}
    assert config.get_str("metrics.host") == "h"
    assert "cache" not in config.as_dict()


def test_num_stream_threads_at_least_one() -> None:
    assert StreamsConfig({"num.stream.threads": "1"}).get_int("num.stream.threads") == 1
    assert StreamsConfig({"num.stream.threads": "4"}).get_int("num.stream.threads") == 4
    with pytest.raises(ConfigError, match=r"'num.stream.threads' must be >= 1"):
        StreamsConfig({"num.stream.threads": "0"})


def test_topology_optimization_takes_java_values_and_refuses_others() -> None:
    """Java's `verifyTopologyOptimizationConfigs`: `all` or `none` alone, or a comma-separated list of
    the individual rewrites (blanks around the commas ignored)."""
    for value in (
        "all",
        "none",
        "reuse.ktable.source.topics",
        "merge.repartition.topics , single.store.self.join",
    ):
        assert StreamsConfig({"topology.optimization": value}).get("topology.optimization") == value
    assert optimization_rewrites("all") == set(REWRITES)
    assert optimization_rewrites("none") == set()
    assert optimization_rewrites(" merge.repartition.topics,single.store.self.join ") == {
        "merge.repartition.topics",
        "single.store.self.join",
    }
    with pytest.raises(
        ConfigError, match=r"'topology.optimization'='all,none' is not valid: 'all' and 'none'"
    ):
        StreamsConfig({"topology.optimization": "all,none"})
    with pytest.raises(ConfigError, match=r"unknown optimization 'reuse'"):
        StreamsConfig({"topology.optimization": "reuse,merge.repartition.topics"})


def test_task_placement_settings_take_kafka_streams_defaults_and_bounds() -> None:
    config = StreamsConfig({"application.id": "a"})
    assert config.get_int("acceptable.recovery.lag") == 10000
    assert config.get_int("max.warmup.replicas") == 2
    assert config.get_int("probing.rebalance.interval.ms") == 600000
    with pytest.raises(ConfigError, match=r"'acceptable.recovery.lag' must be >= 0, got -1"):
        StreamsConfig({"acceptable.recovery.lag": "-1"})
    with pytest.raises(ConfigError, match=r"'max.warmup.replicas' must be >= 1, got 0"):
        StreamsConfig({"max.warmup.replicas": 0})
    with pytest.raises(ConfigError, match=r"'probing.rebalance.interval.ms' must be >= 60000"):
        StreamsConfig({"probing.rebalance.interval.ms": 1000})
    with pytest.raises(ConfigError, match=r"'max.warmup.replicas': expected an integer"):
        StreamsConfig({"max.warmup.replicas": "two"})
