"""A reproduction of issue 29 item 3, too slow and too much a matter of chance for CI: a process reads a
consumer group's members from several threads while its broker is crashed (SIGKILL) and restarted, and
either outlives the restarts or is aborted by librdkafka.

With `--call describe` it reads as the runtime did before (AdminClient.describe_consumer_groups): with
confluent-kafka 2.16.1 / librdkafka 2.16.0 it died on the second restart of its first run with
`rdkafka_queue.h:1086: rd_kafka_enq_once_del_source_return: Assertion 'eonce->refcnt > 0' failed`
(a use-after-free in the coordinator path of the newer Admin calls, confluentinc/librdkafka#5397).
With `--call members` it reads as the runtime does now (InternalTopicManager.group_members: the classic
DescribeGroups, which does not take that path).

python -m tests.kafka.group_view_hammer --call describe|members [--restarts N] [--threads N]
Exit status 0: survived; otherwise the reader's (-6: SIGABRT).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer

from kappaflow.clients.admin import InternalTopicManager
from tests.harness.kafka_broker import LocalKafkaBroker
from tests.harness.kafka_fixtures import free_port


def read_group(bootstrap: str, group: str, threads: int, call: str) -> None:
    """The reader process: `threads` threads reading `group`'s members until killed."""
    admin = InternalTopicManager({"bootstrap.servers": bootstrap, "log_level": 0})
    calls = [0]

    def once() -> None:
        if call == "describe":
            admin.admin.describe_consumer_groups([group], request_timeout=2)[group].result(timeout=5)
        else:
            admin.group_members(group)

    def loop() -> None:
        while True:
            try:
                once()
            except Exception:  # the broker is down: exactly the calls being exercised
                time.sleep(0.01)
            calls[0] += 1

    for _ in range(threads):
        threading.Thread(target=loop, daemon=True).start()
    while True:
        time.sleep(1)
        print(f"calls {calls[0]}", flush=True)


def campaign(call: str, restarts: int, threads: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        broker = LocalKafkaBroker(free_port(), Path(tmp), controller_port=free_port())
        broker.start()
        group = f"hammered-{uuid.uuid4().hex[:8]}"
        member = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group})
        member.subscribe(["__consumer_offsets"])
        for _ in range(30):
            member.poll(0.2)
        reader = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.kafka.group_view_hammer",
                "--read",
                broker.bootstrap_servers,
                group,
                str(threads),
                call,
            ]
        )
        try:
            for n in range(restarts):
                time.sleep(1.5)
                broker.stop(graceful=False)
                time.sleep(0.3 + 0.4 * (n % 3))
                broker.start()
                print(f"restart {n + 1}: reader {'alive' if reader.poll() is None else 'dead'}", flush=True)
                if reader.poll() is not None:
                    break
            time.sleep(2)
            code = reader.poll()
        finally:
            if reader.poll() is None:
                reader.kill()
            member.close()
            broker.stop()
        print(f"{call}: {'survived' if code is None else f'died, exit {code}'}", flush=True)
        return 0 if code is None else code


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--read":
        read_group(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
        return 0
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--call", choices=("describe", "members"), required=True)
    parser.add_argument("--restarts", type=int, default=4)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    return campaign(args.call, args.restarts, args.threads)


if __name__ == "__main__":
    sys.exit(main())
