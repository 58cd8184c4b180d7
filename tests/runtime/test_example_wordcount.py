"""examples/wordcount.py through the TopologyTestDriver: counts, timestamps, state and restart."""

from __future__ import annotations

from examples.wordcount import INPUT_TOPIC, OUTPUT_TOPIC, STORE, build_topology, split_words

from kappaflow import serdes
from kappaflow.testing import TopologyTestDriver

S, L = serdes.String(), serdes.Long()


def test_split_words() -> None:
    assert split_words("Hello, Kafka-Streams!  hello") == ["hello", "kafka", "streams", "hello"]


def test_counts_every_word_and_emits_each_update() -> None:
    with TopologyTestDriver(build_topology(), {"application.id": "wordcount"}) as driver:
        lines = driver.create_input_topic(INPUT_TOPIC, S, S)
        counts = driver.create_output_topic(OUTPUT_TOPIC, S, L)
        lines.pipe_input(None, "all streams lead to kafka", timestamp=1000)
        lines.pipe_input(None, "hello kafka streams", timestamp=2000)
        lines.pipe_input(None, "join kafka summit", timestamp=1500)
        assert counts.read_key_values_to_map() == {
            "all": 1,
            "streams": 2,
            "lead": 1,
            "to": 1,
            "kafka": 3,
            "hello": 1,
            "join": 1,
            "summit": 1,
        }
        assert driver.get_key_value_store(STORE).get("kafka") == 3
        # repartitioned through <application.id>-counts-repartition, logged to the changelog
        assert len(driver.produced["wordcount-counts-repartition"]) == 11
        assert len(driver.produced["wordcount-counts-changelog"]) == 11


def test_aggregate_timestamps_are_the_max_seen() -> None:
    with TopologyTestDriver(build_topology()) as driver:
        lines = driver.create_input_topic(INPUT_TOPIC, S, S)
        lines.pipe_input(None, "kafka", timestamp=2000)
        lines.pipe_input(None, "kafka", timestamp=1000)
        out = driver.create_output_topic(OUTPUT_TOPIC, S, L).read_records_to_list()
        assert [(r.value, r.timestamp) for r in out] == [(1, 2000), (2, 2000)]


def test_restart_restores_counts_from_the_changelog() -> None:
    config = {"application.id": "wordcount"}
    first = TopologyTestDriver(build_topology(), config)
    first.create_input_topic(INPUT_TOPIC, S, S).pipe_input(None, "a b a")
    first.close()
    second = TopologyTestDriver(build_topology(), config, restore_from=first)
    try:
        second.create_input_topic(INPUT_TOPIC, S, S).pipe_input(None, "a")
        assert second.create_output_topic(OUTPUT_TOPIC, S, L).read_key_values_to_list() == [("a", 3)]
    finally:
        second.close()
