"""Topology.describe() in Java's format, Mermaid, the operator's JSON, and `kappaflow describe`."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from examples.wordcount import build_topology

from kappaflow.cli import load_topology, main, stop_on_signals
from kappaflow.runner.stop_request import StopRequest

ROOT = Path(__file__).resolve().parents[2]

# what Kafka Streams 4.3.1 prints for the Java twin (tests/conformance/describe_golden.json has it too)
JAVA_WORDCOUNT = """Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [wordcount-input])
      --> KSTREAM-FLATMAPVALUES-0000000001
    Processor: KSTREAM-FLATMAPVALUES-0000000001 (stores: [])
      --> KSTREAM-KEY-SELECT-0000000002
      <-- KSTREAM-SOURCE-0000000000
    Processor: KSTREAM-KEY-SELECT-0000000002 (stores: [])
      --> counts-repartition-filter
      <-- KSTREAM-FLATMAPVALUES-0000000001
    Processor: counts-repartition-filter (stores: [])
      --> counts-repartition-sink
      <-- KSTREAM-KEY-SELECT-0000000002
    Sink: counts-repartition-sink (topic: counts-repartition)
      <-- counts-repartition-filter

  Sub-topology: 1
    Source: counts-repartition-source (topics: [counts-repartition])
      --> KSTREAM-AGGREGATE-0000000003
    Processor: KSTREAM-AGGREGATE-0000000003 (stores: [counts])
      --> KTABLE-TOSTREAM-0000000007
      <-- counts-repartition-source
    Processor: KTABLE-TOSTREAM-0000000007 (stores: [])
      --> KSTREAM-SINK-0000000008
      <-- KSTREAM-AGGREGATE-0000000003
    Sink: KSTREAM-SINK-0000000008 (topic: wordcount-output)
      <-- KTABLE-TOSTREAM-0000000007

"""


def test_describe_matches_kafka_streams_wordcount_description() -> None:
    # the same node names, sub-topologies and repartition naming as Java's WordCountDemo
    assert str(build_topology().describe()) == JAVA_WORDCOUNT


def test_json_description_plans_internal_topics_for_the_operator() -> None:
    data = build_topology().describe().to_dict()
    assert data["source_topics"] == ["wordcount-input"]
    assert data["sink_topics"] == ["wordcount-output"]
    topics = {t["name"]: t for t in data["internal_topics"]}
    assert topics["counts-repartition"]["type"] == "repartition"
    assert topics["counts-repartition"]["config"]["cleanup.policy"] == "delete"
    assert topics["counts-repartition"]["partitions_from"] == ["wordcount-input"]
    assert topics["counts-changelog"] == {
        "name": "counts-changelog",
        "type": "changelog",
        "config": {"cleanup.policy": "compact"},
        "store": "counts",
        "partitions_from": ["wordcount-input"],
    }


def test_explicit_partition_counts_flow_to_downstream_changelogs() -> None:
    from kappaflow import Materialized, StreamsBuilder, serdes

    builder = StreamsBuilder()
    S = serdes.String()
    builder.stream("in", key_serde=S, value_serde=S).repartition(number_of_partitions=6).group_by_key().count(
        Materialized.as_("c")
    )
    topics = {t["name"]: t for t in builder.build().describe().to_dict()["internal_topics"]}
    assert topics["c-changelog"]["partitions"] == 6


def test_mermaid_names_every_node_and_topic() -> None:
    text = build_topology().describe().to_mermaid()
    assert text.startswith("flowchart TD")
    for needle in ("KSTREAM_AGGREGATE_0000000003", '"wordcount-input"', "s_counts[(counts)]"):
        assert needle in text


def test_cli_describe_prints_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["describe", "examples.wordcount:build_topology"]) == 0
    assert capsys.readouterr().out.strip() == JAVA_WORDCOUNT.strip()
    assert main(["describe", "examples.wordcount:build_topology", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["source_topics"] == ["wordcount-input"]


def test_cli_reports_bad_targets_clearly(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["describe", "examples.wordcount"]) == 2
    assert "must be 'module:attr'" in capsys.readouterr().err
    assert main(["describe", "examples.wordcount:nope"]) == 2
    assert "has no attribute 'nope'" in capsys.readouterr().err
    assert main(["describe", "examples.wordcount:split_words"]) != 0


def test_load_topology_accepts_builders_and_topologies() -> None:
    assert load_topology("examples.wordcount:build_topology").sub_topologies()


def test_the_installed_console_script_runs() -> None:
    exe = Path(sys.executable).parent / "kappaflow"
    result = subprocess.run(
        [str(exe), "describe", "examples.wordcount:build_topology", "--mermaid"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "flowchart TD" in result.stdout


class SignalingRaw(io.RawIOBase):
    """A raw stream whose first write delivers SIGTERM to this process: Python runs the handler inside
    this write, while the buffered writer above it holds its lock."""

    def __init__(self) -> None:
        self.data = b""
        self.signaled = False

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        if not self.signaled:
            self.signaled = True
            os.kill(os.getpid(), signal.SIGTERM)
        self.data += bytes(b)
        return len(b)


def test_a_signal_during_a_log_write_stops_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """`kappaflow run` logs to stderr. A signal handler that logged, run while the main thread is inside
    a write to stderr, fails with "reentrant call" in the buffered writer; logging's error report then
    writes to stderr too, which fails the same way and leaves the handler before it set `stop`: the
    process never stopped (a chaos test's instance ignored its SIGTERM). The handler only notes the
    signal; the run logs it once its wait returns."""
    raw = SignalingRaw()
    stderr = io.TextIOWrapper(io.BufferedWriter(raw), write_through=True)
    monkeypatch.setattr(sys, "stderr", stderr)
    handler = logging.StreamHandler(sys.stderr)
    root = logging.getLogger()
    previous = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    root.addHandler(handler)
    try:
        stop = StopRequest()
        received = stop_on_signals(stop)
        logging.getLogger("kappaflow.test").warning("a line being written when the signal arrives")
        assert stop.is_set() and received == [signal.SIGTERM]
        assert raw.data == b"a line being written when the signal arrives\n"
    finally:
        root.removeHandler(handler)
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])
