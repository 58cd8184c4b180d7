"""Bad input: deserialization and processing handlers, dead-letter records, invalid timestamps."""

from __future__ import annotations

from typing import Any

import pytest

from kappaflow import StreamsBuilder, TimeWindowedSerde, TimeWindows, serdes
from kappaflow.api.errors import DeserializationError, ProcessingError
from kappaflow.testing import TopologyTestDriver

S, L = serdes.String(), serdes.Long()


def long_sum_topology() -> Any:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=L).map_values(lambda v: 100 // v).to("out", value_serde=L)
    return builder.build()


def test_log_and_fail_names_topic_partition_and_offset() -> None:
    with TopologyTestDriver(long_sum_topology()) as driver:
        raw_in = driver.create_input_topic("in", S, serdes.Bytes())
        with pytest.raises(DeserializationError, match=r"value of record in-0@0 with Long\(\)"):
            raw_in.pipe_input("k", b"\x01\x02")


def test_the_error_of_a_failing_handler_names_its_setting() -> None:
    """A poison record that stops the application says which setting decided that, and the way out."""
    with TopologyTestDriver(long_sum_topology()) as driver:
        raw_in = driver.create_input_topic("in", S, serdes.Bytes())
        with pytest.raises(DeserializationError) as failed:
            raw_in.pipe_input("k", b"\x01\x02")
    assert "default.deserialization.exception.handler=log_and_fail" in str(failed.value)
    assert "log_and_continue" in str(failed.value)
    with TopologyTestDriver(long_sum_topology()) as driver:
        with pytest.raises(ProcessingError) as failed_processing:
            driver.create_input_topic("in", S, L).pipe_input("zero", 0)
    assert "processing.exception.handler=log_and_fail" in str(failed_processing.value)
    assert "ZeroDivisionError" in str(failed_processing.value)


def test_log_and_continue_skips_to_dead_letter_topic_and_keeps_going() -> None:
    config = {
        "default.deserialization.exception.handler": "log_and_continue",
        "processing.exception.handler": "log_and_continue",
        "errors.dead.letter.queue.topic.name": "dlq",
    }
    with TopologyTestDriver(long_sum_topology(), config) as driver:
        raw_in = driver.create_input_topic("in", S, serdes.Bytes())
        raw_in.pipe_input("poison", b"\x01\x02", headers=[("origin", b"test")])
        raw_in.pipe_input("zero", L.serialize("in", 0))  # ZeroDivisionError while processing
        raw_in.pipe_input("ok", L.serialize("in", 4))
        assert driver.create_output_topic("out", S, L).read_key_values_to_list() == [("ok", 25)]
        dead = driver.create_output_topic("dlq", S, serdes.Bytes()).read_records_to_list()
        assert [(r.key, r.value) for r in dead] == [("poison", b"\x01\x02"), ("zero", L.serialize("in", 0))]
        first = dict(dead[0].headers.to_list())
        assert first["origin"] == b"test"
        assert first["__kappaflow.error.class"] == b"DeserializationError"
        assert first["__kappaflow.source.offset"] == b"0"
        second = dict(dead[1].headers.to_list())
        assert second["__kappaflow.error.class"] == b"ProcessingError"
        assert b"ZeroDivisionError" in second["__kappaflow.error.message"]
        assert driver.metrics().counter("dropped-records-total") == 2


def test_the_dead_letter_counter_exists_at_zero_from_the_tasks_start() -> None:
    """An alert on `increase(kappaflow_dead_letter_records_total[5m])` sees the first dead letters only if
    the series existed before them."""
    config = {
        "processing.exception.handler": "log_and_continue",
        "errors.dead.letter.queue.topic.name": "dlq",
    }
    with TopologyTestDriver(long_sum_topology(), config) as driver:
        driver.create_input_topic("in", S, L).pipe_input("ok", 4)
        series = driver.metrics().counters()["dead-letter-records-total"]
        assert series == {(("task", "0_0"), ("topic", "dlq")): 0.0}


def test_callable_handler_decides() -> None:
    decisions: list[str] = []

    def handler(error: BaseException, record: Any) -> Any:
        from kappaflow import HandlerResponse

        decisions.append(record.where())
        return HandlerResponse.CONTINUE

    with TopologyTestDriver(long_sum_topology(), {"processing.exception.handler": handler}) as driver:
        driver.create_input_topic("in", S, L).pipe_input("k", 0)
        assert decisions == ["in-0@0 in node 'KSTREAM-MAPVALUES-0000000001'"]


def test_a_failure_behind_built_in_processors_names_the_deepest_node_and_processing_goes_on() -> None:
    """Built-in processors call their only child directly (DirectRoute), not through forward(): the
    error must still name the node that raised, and the next record must flow as usual."""
    builder = StreamsBuilder()
    stream = builder.stream("in", key_serde=S, value_serde=L).filter(lambda _k, v: v != 1)
    upper = stream.select_key(lambda k, _v: k.upper())
    upper.map_values(lambda v: 100 // v).to("out", key_serde=S, value_serde=L)
    decisions: list[str] = []

    def handler(error: BaseException, record: Any) -> Any:
        from kappaflow import HandlerResponse

        decisions.append(record.where())
        return HandlerResponse.CONTINUE

    with TopologyTestDriver(builder.build(), {"processing.exception.handler": handler}) as driver:
        source = driver.create_input_topic("in", S, L)
        source.pipe_input("a", 0)
        source.pipe_input("b", 1)
        source.pipe_input("c", 4)
        assert decisions == ["in-0@0 in node 'KSTREAM-MAPVALUES-0000000003'"]
        assert driver.create_output_topic("out", S, L).read_key_values_to_list() == [("C", 25)]


def test_processing_errors_fail_by_default() -> None:
    with (
        TopologyTestDriver(long_sum_topology()) as driver,
        pytest.raises(ProcessingError, match="ZeroDivisionError"),
    ):
        driver.create_input_topic("in", S, L).pipe_input("k", 0)


def test_negative_timestamps_fail_unless_another_extractor_is_configured() -> None:
    from kappaflow.api.errors import StreamsError

    with (
        TopologyTestDriver(long_sum_topology()) as driver,
        pytest.raises(StreamsError, match="invalid timestamp -5"),
    ):
        driver.create_input_topic("in", S, L).pipe_input("k", 1, timestamp=-5)
    config = {"default.timestamp.extractor": __import__("kappaflow").log_and_skip_on_invalid_timestamp}
    with TopologyTestDriver(long_sum_topology(), config) as driver:
        topic = driver.create_input_topic("in", S, L)
        topic.pipe_input("k", 1, timestamp=-5)
        topic.pipe_input("k", 2, timestamp=5)
        assert driver.create_output_topic("out", S, L).read_key_values_to_list() == [("k", 50)]
        assert driver.metrics().counter("dropped-records-total", reason="invalid-timestamp") == 1


@pytest.mark.parametrize("fusion", [True, False])
def test_a_node_failure_under_continue_loses_only_that_nodes_output_and_dead_letters_the_source_record(
    fusion: bool,
) -> None:
    """Java's ProcessorNode catches per node: the failing branch loses its output, its sibling still
    sees the record, on the generic path and through the native core's compiled stages alike; the dead
    letter carries the source record's bytes and names the failing node."""
    builder = StreamsBuilder()
    stream = builder.stream("in", key_serde=S, value_serde=L)
    doubled = stream.map_values(lambda v: v * 2)
    doubled.map_values(lambda v: 100 // (v - 4)).to("quotients", value_serde=L)  # fails on 2
    doubled.to("doubled", value_serde=L)
    config = {
        "processing.exception.handler": "log_and_continue",
        "errors.dead.letter.queue.topic.name": "dlq",
        "kappaflow.fusion.enabled": fusion,
    }
    with TopologyTestDriver(builder.build(), config) as driver:
        source = driver.create_input_topic("in", S, L)
        source.pipe_input("bad", 2)
        source.pipe_input("good", 3)
        assert driver.create_output_topic("quotients", S, L).read_key_values_to_list() == [("good", 50)]
        assert driver.create_output_topic("doubled", S, L).read_key_values_to_list() == [
            ("bad", 4),
            ("good", 6),
        ]
        dead = driver.create_output_topic("dlq", S, serdes.Bytes()).read_records_to_list()
        assert [(r.key, r.value) for r in dead] == [("bad", L.serialize("in", 2))]
        headers = dict(dead[0].headers.to_list())
        assert headers["__kappaflow.node"] == b"KSTREAM-MAPVALUES-0000000002"
        assert headers["__kappaflow.source.offset"] == b"0"
        assert driver.metrics().counter("dropped-records-total") == 1


def fail_on_third(count: int) -> int:
    if count == 3:
        raise ValueError("a third update")
    return count


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("windowed", [False, True])
def test_a_failure_while_a_commit_flushes_the_cache_names_the_record_behind_the_update(
    native: bool, windowed: bool
) -> None:
    """A node below a cached table that raises while a commit flushes the cache fails the commit with an
    error that names the node and the input record whose update it was (the cache entry's record
    context, as Kafka Streams reports it), not only the node."""
    builder = StreamsBuilder()
    grouped = builder.stream("in", key_serde=S, value_serde=S).group_by_key()
    if windowed:
        grouped.windowed_by(TimeWindows.of_size_with_no_grace(60_000)).count().to_stream().map_values(
            fail_on_third
        ).to("out", key_serde=TimeWindowedSerde(S, 60_000), value_serde=L)
    else:
        grouped.count().to_stream().map_values(fail_on_third).to("out", value_serde=L)
    config = {"kappaflow.native.enabled": native, "statestore.cache.max.bytes": 1 << 20}
    with TopologyTestDriver(builder.build(), config) as driver:
        source = driver.create_input_topic("in", S, S)
        source.pipe_key_value_list([("a", "1"), ("b", "2"), ("a", "3"), ("b", "4")])
        with pytest.raises(ProcessingError) as failed:
            source.pipe_input("b", "5")  # offset 4: b's third record
    error = failed.value
    assert "while a commit flushed the record cache (the cached update from record in-0@4)" in str(error)
    assert "ValueError: a third update" in str(error)
    assert (error.topic, error.partition, error.offset) == ("in", 0, 4)
    assert error.node.startswith("KSTREAM-MAPVALUES-")
