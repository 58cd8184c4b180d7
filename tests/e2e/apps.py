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
