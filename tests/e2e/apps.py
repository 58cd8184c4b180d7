"""Topologies for the operator tests: word count over an input topic named by the environment.

Why not `examples.wordcount` directly: its topic names are fixed, and tests sharing one broker need
their own input topics (with their own partition counts) to stay independent.
"""

from __future__ import annotations

import os

from examples.wordcount import split_words

from kappaflow import Materialized, StreamsBuilder, Topology, serdes

INPUT_ENV = "KF_E2E_INPUT"
OUTPUT_ENV = "KF_E2E_OUTPUT"


def wordcount() -> Topology:
    builder = StreamsBuilder()
    source = os.environ.get(INPUT_ENV, "wordcount-input")
    lines = builder.stream(source, key_serde=serdes.String(), value_serde=serdes.String())
    words = lines.flat_map_values(split_words)
    grouped = words.group_by(lambda _key, word: word, key_serde=serdes.String(), value_serde=serdes.String())
    counts = grouped.count(Materialized.as_("counts").with_value_serde(serdes.Long()))
    sink = os.environ.get(OUTPUT_ENV, "wordcount-output")
    counts.to_stream().to(sink, key_serde=serdes.String(), value_serde=serdes.Long())
    return builder.build()


#: Branches of `wide`: each adds a few hundred bytes of `kappaflow describe --json`.
WIDE_BRANCHES = 90


def wide() -> Topology:
    """Word count plus many stateless branches: a topology whose description is over 20 KB (more than a
    container's 4 KiB termination message could carry), with the same internal topics as `wordcount`."""
    topology_builder = StreamsBuilder()
    source = os.environ.get(INPUT_ENV, "wordcount-input")
    lines = topology_builder.stream(source, key_serde=serdes.String(), value_serde=serdes.String())
    for i in range(WIDE_BRANCHES):
        branch = lines.filter(lambda _k, v, i=i: len(v) % WIDE_BRANCHES == i).map_values(str.upper)
        branch.to(
            f"{source}-uppercase-branch-number-{i:03d}",
            key_serde=serdes.String(),
            value_serde=serdes.String(),
        )
    words = lines.flat_map_values(split_words)
    grouped = words.group_by(lambda _key, word: word, key_serde=serdes.String(), value_serde=serdes.String())
    counts = grouped.count(Materialized.as_("counts").with_value_serde(serdes.Long()))
    counts.to_stream().to(
        os.environ.get(OUTPUT_ENV, "wordcount-output"), key_serde=serdes.String(), value_serde=serdes.Long()
    )
    return topology_builder.build()
