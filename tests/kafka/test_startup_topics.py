"""Topics records are written to are checked at start, on a real broker (auto.create.topics.enable=false):
a missing output or dead-letter topic is one line naming the topic and what writes to it (for the dead-letter
topic, its setting) and a non-zero exit, before the group is joined - it used to run ~30 s and then crash.
A sink whose topic a TopicNameExtractor picks per record cannot be checked, and is not refused.
"""

from __future__ import annotations

import time
import uuid

import pytest

from kappaflow import StreamsBuilder, serdes
from kappaflow.runner import KafkaStreams
from tests.kafka.streams_support import (
    fast_config,
    kill_if_running,
    produce_lines,
    read_topic,
    start_cli_app,
    wait_running,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]


def _run_to_exit(props: dict[str, object], tmp_path, env: dict[str, str]) -> tuple[int, float, list[str]]:
    started = time.monotonic()
    process = start_cli_app("tests.kafka.apps:wordcount", props, tmp_path, env, close_timeout=5)
    try:
        code = process.wait(40)
    finally:
        kill_if_running(process)
    return code, time.monotonic() - started, (tmp_path / "app.log").read_text().splitlines()


def test_missing_output_topic_fails_at_start_naming_topic_and_sink(kafka_bootstrap, kafka_topics, tmp_path):
    source = kafka_topics("start-in")
    missing = f"start-out-missing-{uuid.uuid4().hex[:8]}"
    props = fast_config(kafka_bootstrap, f"start-{uuid.uuid4().hex[:8]}", str(tmp_path / "state"))
    code, seconds, lines = _run_to_exit(props, tmp_path, {"WC_INPUT": source, "WC_OUTPUT": missing})
    assert code != 0
    assert seconds < 20, lines  # not the ~60 s of a failed first delivery
    named = [line for line in lines if f"output topic '{missing}' (sink KSTREAM-SINK-" in line]
    assert named and "does not exist" in named[0], lines
    assert "auto.create.topics.enable=false" in named[0]
    assert not any("subscribed to" in line for line in lines), "the group was joined before the check"
    assert not any("Traceback" in line for line in lines), lines
    assert "stopped (error): output topic" in lines[-1], lines[-1]


def test_missing_dead_letter_topic_names_the_setting(kafka_bootstrap, kafka_topics, tmp_path):
    source, sink = kafka_topics("start-dlq-in"), kafka_topics("start-dlq-out")
    missing = f"start-dlq-missing-{uuid.uuid4().hex[:8]}"
    props = fast_config(
        kafka_bootstrap,
        f"start-dlq-{uuid.uuid4().hex[:8]}",
        str(tmp_path / "state"),
        **{
            "errors.dead.letter.queue.topic.name": missing,
            "processing.exception.handler": "log_and_continue",
        },
    )
    code, seconds, lines = _run_to_exit(props, tmp_path, {"WC_INPUT": source, "WC_OUTPUT": sink})
    assert code != 0 and seconds < 20, lines
    expected = f"dead-letter topic '{missing}' (config 'errors.dead.letter.queue.topic.name')"
    assert any(expected in line for line in lines), lines
    assert not any("output topic" in line for line in lines), "the existing output topic was reported"
    assert not any("subscribed to" in line for line in lines)


def test_a_topic_name_extractor_sink_is_not_refused(kafka_bootstrap, kafka_topics, tmp_path):
    """The extractor's topics are known per record only: the app starts and writes where it says."""
    source, sink = kafka_topics("start-dyn-in"), kafka_topics("start-dyn-out")
    builder = StreamsBuilder()
    stream = builder.stream(source, key_serde=serdes.String(), value_serde=serdes.String())
    stream.to(lambda _key, _value, _context: sink, key_serde=serdes.String(), value_serde=serdes.String())
    app = KafkaStreams(
        builder.build(), fast_config(kafka_bootstrap, f"dyn-{uuid.uuid4().hex[:8]}", str(tmp_path))
    )
    app.start()
    try:
        wait_running(app)
        produce_lines(kafka_bootstrap, source, ["routed"])
        assert [m.value() for m in read_topic(kafka_bootstrap, sink, expected=1)] == [b"routed"]
    finally:
        app.close(30)


def test_sigterm_during_a_normal_start_still_stops_cleanly(kafka_bootstrap, kafka_topics, tmp_path):
    """A stop that arrives while topics are prepared, with the broker reachable, is not 'waiting for the
    broker': preparation finishes, the thread ends holding nothing, and the run exits 0."""
    import signal

    source, sink = kafka_topics("start-stop-in"), kafka_topics("start-stop-out")
    props = fast_config(kafka_bootstrap, f"start-stop-{uuid.uuid4().hex[:8]}", str(tmp_path / "state"))
    process = start_cli_app(
        "tests.kafka.apps:wordcount", props, tmp_path, {"WC_INPUT": source, "WC_OUTPUT": sink}
    )
    log = tmp_path / "app.log"
    try:
        deadline = time.monotonic() + 30
        while "CREATED -> REBALANCING" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.02)
        process.send_signal(signal.SIGTERM)
        code = process.wait(30)
    finally:
        kill_if_running(process)
    lines = log.read_text().splitlines()
    assert code == 0, lines
    assert "stopped (clean)" in lines[-1] and not any("waiting for the broker" in line for line in lines)
