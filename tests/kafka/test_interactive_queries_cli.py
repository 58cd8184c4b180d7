"""Interactive queries over HTTP: three `kappaflow run` processes of examples/queryable_app.py.

Any instance answers for any key (forwarding to the owner), scans gather every instance, and after one
process is killed (-9, no goodbye to the group) the others take over its partitions: while the group
still names the dead owner, or a new owner restores, the answer is 503 with Retry-After; it is never a
wrong count, and soon every key is right again on every surviving instance.
"""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from typing import Any

import pytest
from examples.queryable_app import COUNTS_STORE, SESSION_STORE, WINDOWED_STORE

from tests.harness.kafka_fixtures import free_port
from tests.kafka.streams_support import (
    fast_config,
    kill_if_running,
    produce_lines,
    start_cli_app,
    wait_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(150)]

WORDS = ["apple", "banana", "cherry", "date", "elder", "fig", "grape", "kiwi", "lemon", "mango"]


def get_json(port: int, path: str) -> tuple[int, dict[str, Any], dict[str, str]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}"), dict(err.headers)
    except OSError:
        return 0, {}, {}


class Answers:
    """Every key asked on every port; wrong values are recorded (they must never happen)."""

    def __init__(self, expected: dict[str, int]) -> None:
        self.expected = expected
        self.wrong: list[tuple[int, str, int, Any]] = []
        self.retries = 0

    def all_right(self, ports: list[int]) -> bool:
        right = True
        for port in ports:
            for word, count in self.expected.items():
                status, body, headers = get_json(port, f"/v1/stores/{COUNTS_STORE}/keys/{word}")
                if status == 200 and body.get("value") != count:
                    self.wrong.append((port, word, status, body))
                if status == 503:
                    assert headers.get("Retry-After") == "1" and body["retryable"], body
                    self.retries += 1
                right = right and status == 200 and body.get("value") == count
        return right


def test_any_instance_answers_every_key_before_and_after_a_kill(kafka_bootstrap, kafka_topics, tmp_path):
    topic = kafka_topics("iqc-in", partitions=4)
    app_id = f"iqc-{uuid.uuid4().hex[:8]}"
    ports = [free_port() for _ in range(3)]
    processes: list[Any] = []

    def start(n: int) -> None:
        props = fast_config(
            kafka_bootstrap,
            app_id,
            str(tmp_path / f"state{n}"),
            **{
                "application.server": f"127.0.0.1:{ports[n]}",
                "query.http.enabled": "true",
                "query.http.host": "127.0.0.1",
                "statestore.cache.max.bytes": 0,
            },
        )
        env = {"QUERYABLE_INPUT": topic}
        processes.append(
            start_cli_app("examples.queryable_app:build_topology", props, tmp_path, env, f"app{n}")
        )

    def instances(port: int) -> int:
        return len(get_json(port, "/v1/metadata")[1].get("instances", []))

    try:
        # The others join once the first has created the internal topics (simultaneous starts race on
        # topic creation: an instance may find a topic whose partitions have no leader yet).
        start(0)
        wait_for(lambda: instances(ports[0]) == 1, 60, "the first instance in the group")
        start(1)
        start(2)
        wait_for(
            lambda: all(instances(p) == 3 for p in ports),
            60,
            "three instances in every instance's metadata",
        )
        lines = [f"{WORDS[i % 10]} {WORDS[(i * 3) % 10]}" for i in range(300)]
        produce_lines(kafka_bootstrap, topic, lines)
        answers = Answers(dict(Counter(w for line in lines for w in line.split())))
        wait_for(lambda: answers.all_right(ports), 60, "every key on every instance", interval=0.2)

        # Key requests are forwarded: each instance owns some words and forwards the others.
        served = {get_json(ports[0], f"/v1/stores/{COUNTS_STORE}/keys/{w}")[1]["host"] for w in WORDS}
        assert len(served) >= 2, served
        status, body, _ = get_json(ports[1], f"/v1/stores/{COUNTS_STORE}/all")
        assert status == 200 and sorted(body["partitions"]) == [0, 1, 2, 3]
        assert {e["key"]: e["value"] for e in body["entries"]} == answers.expected

        # The windowed and session counts run in sub-topologies of their own: they converge too.
        def total(port: int, path: str, field: str) -> int | None:
            status, body, _ = get_json(port, path)
            return sum(w["value"] for w in body[field]) if status == 200 else None

        apple = answers.expected["apple"]
        windows = f"/v1/stores/{WINDOWED_STORE}/keys/apple/windows?from=0"
        wait_for(lambda: total(ports[2], windows, "windows") == apple, 30, "windowed count")
        sessions = f"/v1/stores/{SESSION_STORE}/keys/apple/sessions"
        wait_for(lambda: total(ports[1], sessions, "sessions") == apple, 30, "session count")
        status, body, _ = get_json(ports[0], f"/v1/stores/{COUNTS_STORE}/keys/apple/metadata")
        assert body["active_host"] in {f"127.0.0.1:{p}" for p in ports} and body["partition"] in range(4)
        status, body, _ = get_json(ports[0], f"/v1/stores/{COUNTS_STORE}/keys/no-such-word")
        assert status == 404
        status, body, _ = get_json(ports[0], "/v1/stores/no-such-store/keys/x")
        assert status == 404 and "no store named" in body["error"]
        status, spec, _ = get_json(ports[0], "/openapi.json")
        assert spec["openapi"].startswith("3.") and "/v1/stores/{store}/keys/{key}" in spec["paths"]

        time.sleep(0.5)  # the counts are committed (commit.interval.ms=200) before the kill
        processes[2].send_signal(signal.SIGKILL)
        processes[2].wait(10)
        survivors = ports[:2]
        answers.wrong, answers.retries = [], 0  # before the kill, counts were still being computed
        started = time.monotonic()
        wait_for(lambda: answers.all_right(survivors), 60, "every key after the kill", interval=0.2)
        took = time.monotonic() - started
        print(f"all keys answered again {took:.1f}s after the kill; 503s meanwhile: {answers.retries}")
        assert answers.wrong == []
        assert answers.retries > 0  # the dead owner was named until the session timed out
        metadata = get_json(ports[0], "/v1/metadata")[1]["instances"]
        assert {m["host"] for m in metadata} == {f"127.0.0.1:{p}" for p in survivors}

        for process in processes[:2]:
            process.send_signal(signal.SIGTERM)
        assert [p.wait(30) for p in processes[:2]] == [0, 0]
    finally:
        for process in processes:
            kill_if_running(process)
