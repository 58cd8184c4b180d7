"""`kappaflow run` whose final commit fails does not report a clean stop.

It used to log "final commit failed", then "stopped (clean)", and exit 0: a pod's restart policy, a
supervisor or a script could not tell that records processed since the last commit would be processed
again. The broker here is the test's own, so it can be stopped under the running application.
"""

from __future__ import annotations

import json
import signal
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness.kafka_broker import LocalKafkaBroker
from tests.harness.kafka_fixtures import free_port
from tests.kafka.streams_support import (
    fast_config,
    http_get,
    kill_if_running,
    produce_lines,
    start_cli_app,
    wait_for,
)
from tests.kafka.test_cli_run import _processed

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]


def test_a_failed_final_commit_exits_non_zero_and_says_so(tmp_path):
    broker = LocalKafkaBroker(free_port(), tmp_path / "kafka")
    broker.start()
    process = None
    try:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic(t, 1, 1) for t in ("in", "out")]).values():
            future.result(30)
        port = free_port()
        props = fast_config(
            bootstrap,
            f"unclean-{uuid.uuid4().hex[:8]}",
            str(tmp_path / "state"),
            **{
                "metrics.port": port,
                "commit.interval.ms": 600000,
                "default.api.timeout.ms": 3000,
                "consumer.session.timeout.ms": 45000,
            },
        )
        process = start_cli_app(
            "tests.kafka.apps:wordcount",
            props,
            tmp_path,
            {"WC_INPUT": "in", "WC_OUTPUT": "out"},
            close_timeout=30,
        )
        wait_for(lambda: http_get(port, "/health/ready")[0] == 200, 90, "readiness")
        produce_lines(bootstrap, "in", ["a b", "b c"])
        wait_for(lambda: _processed(http_get(port, "/metrics")[1]) >= 6, 30, "6 records processed")
        # Nothing processed since the start is committed: the final commit must fail. A killed broker says
        # nothing to the consumer (a graceful stop can get the partitions revoked as lost first).
        broker.stop(graceful=False)
        process.send_signal(signal.SIGTERM)
        code = process.wait(60)
    finally:
        if process is not None:
            kill_if_running(process)
        broker.stop()
    log_lines = (tmp_path / "app.log").read_text().splitlines()
    messages = [json.loads(line)["msg"] for line in log_lines if line.startswith("{")]
    assert any(m.startswith("final commit failed") for m in messages), messages
    assert code != 0, messages[-3:]
    assert messages[-1].startswith("stopped (not clean"), messages[-3:]
    assert not any(m.startswith("stopped (clean)") for m in messages)
