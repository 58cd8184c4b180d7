"""Word count: the classic Kafka Streams example, in kappaflow.

Reads lines from `wordcount-input`, splits them into lowercase words, counts each word in a
RocksDB-backed, changelogged store named `counts`, and writes every updated count to `wordcount-output`
(String keys, Long values - readable by Java's console consumer with a LongDeserializer). The env vars
WORDCOUNT_INPUT / WORDCOUNT_OUTPUT name other topics (set them in the StreamApp's `podTemplate.env`: the
operator gives the same env to the pods and to a reprocessing Spark job, so both build one topology).

    kappaflow describe examples.wordcount:build_topology
"""

from __future__ import annotations

import os
import re

from kappaflow import Materialized, StreamsBuilder, Topology, serdes

INPUT_TOPIC = "wordcount-input"
OUTPUT_TOPIC = "wordcount-output"
STORE = "counts"

_WORD = re.compile(r"\W+")


def split_words(line: str) -> list[str]:
    return [word for word in _WORD.split(line.lower()) if word]


def build_topology() -> Topology:
    builder = StreamsBuilder()
    source = os.environ.get("WORDCOUNT_INPUT") or INPUT_TOPIC
    sink = os.environ.get("WORDCOUNT_OUTPUT") or OUTPUT_TOPIC
    lines = builder.stream(source, key_serde=serdes.String(), value_serde=serdes.String())
    words = lines.flat_map_values(split_words)
    grouped = words.group_by(lambda _key, word: word, key_serde=serdes.String(), value_serde=serdes.String())
    counts = grouped.count(Materialized.as_(STORE).with_value_serde(serdes.Long()))
    counts.to_stream().to(sink, key_serde=serdes.String(), value_serde=serdes.Long())
    return builder.build()
