"""Word count: the classic Kafka Streams example, in kappaflow.

Reads lines from `wordcount-input`, splits them into lowercase words, counts each word in a
RocksDB-backed, changelogged store named `counts`, and writes every updated count to `wordcount-output`
(String keys, Long values - readable by Java's console consumer with a LongDeserializer).

    kappaflow describe examples.wordcount:build_topology
"""

from __future__ import annotations

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
    lines = builder.stream(INPUT_TOPIC, key_serde=serdes.String(), value_serde=serdes.String())
    words = lines.flat_map_values(split_words)
    grouped = words.group_by(lambda _key, word: word, key_serde=serdes.String(), value_serde=serdes.String())
    counts = grouped.count(Materialized.as_(STORE).with_value_serde(serdes.Long()))
    counts.to_stream().to(OUTPUT_TOPIC, key_serde=serdes.String(), value_serde=serdes.Long())
    return builder.build()
