"""A queryable word count: the counts live only in the application's stores, and are read with queries.

Reads lines from `queryable-input` (override with QUERYABLE_INPUT), counts words in the key-value store
`word-counts`, per minute in the window store `word-counts-per-minute`, and per burst of activity in the
session store `word-sessions`. Nothing is written to an output topic: the state itself is the product,
read through interactive queries from any instance.

Run three instances (each with its own query port and state directory), then ask any of them:

    kappaflow run examples.queryable_app:build_topology --config app.properties
        # app.properties: application.id=queryable-wordcount, bootstrap.servers=localhost:9092,
        #   application.server=localhost:7071, query.http.enabled=true, state.dir=/tmp/qa-1
    curl localhost:7071/v1/stores/word-counts/keys/kafka
    curl localhost:7072/v1/stores/word-counts/all
    curl 'localhost:7073/v1/stores/word-counts-per-minute/keys/kafka/windows?from=0'
    curl localhost:7072/v1/stores/word-sessions/keys/kafka/sessions
    curl localhost:7071/openapi.json

Or from Python, inside the process that runs the topology:

    streams.store("word-counts", QueryableStoreTypes.key_value()).get("kafka")
    streams.query_metadata_for_key("word-counts", "kafka").active_host
"""

from __future__ import annotations

import os
import re
from datetime import timedelta

from kappaflow import Materialized, SessionWindows, StreamsBuilder, TimeWindows, Topology, serdes

INPUT_TOPIC = "queryable-input"
COUNTS_STORE = "word-counts"
WINDOWED_STORE = "word-counts-per-minute"
SESSION_STORE = "word-sessions"

_WORD = re.compile(r"\W+")


def split_words(line: str) -> list[str]:
    return [word for word in _WORD.split(line.lower()) if word]


def build_topology(input_topic: str | None = None) -> Topology:
    builder = StreamsBuilder()
    topic = input_topic or os.environ.get("QUERYABLE_INPUT", INPUT_TOPIC)
    lines = builder.stream(topic, key_serde=serdes.String(), value_serde=serdes.String())
    words = lines.flat_map_values(split_words).group_by(
        lambda _key, word: word, key_serde=serdes.String(), value_serde=serdes.String()
    )
    words.count(Materialized.as_(COUNTS_STORE).with_value_serde(serdes.Long()))
    per_minute = words.windowed_by(TimeWindows.of_size_with_no_grace(timedelta(minutes=1)))
    per_minute.count(Materialized.as_(WINDOWED_STORE).with_value_serde(serdes.Long()))
    # bursts of a word: a session closes after five minutes without it
    bursts = words.windowed_by(SessionWindows.of_inactivity_gap_and_grace(timedelta(minutes=5), 0))
    bursts.count(Materialized.as_(SESSION_STORE).with_value_serde(serdes.Long()))
    return builder.build()
