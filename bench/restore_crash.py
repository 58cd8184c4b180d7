"""Recovery from a crash under exactly_once_v2: kappaflow vs Java Kafka Streams, on the same store size.

Not a test: `python bench/restore.py --crash` (flags of bench/restore.py: --records, --partitions,
--value-bytes, --repeat, --bootstrap). Each side gets its own application (its own changelog of
--records distinct keys, written once) and, per round:

1. starts in its own process on an empty state directory (a full restore), as the static member
   "<application id>-0", exactly_once_v2, and reaches RUNNING;
2. processes a stream of updates to the store's keys written to its source topic (at --feed-rate records/s)
   and is killed with SIGKILL --kill-after seconds into that stream, a transaction open;
3. is started again on the same state directory: the recovery. It prints the seconds from `start()` to
   RUNNING and the changelog records restored; the bench also times the process start to RUNNING.

kappaflow's stores are transactional under exactly_once_v2 (state/transactional.py), so step 3 restores
only the changelog past the last commit; Kafka Streams 4.3.1 finds no checkpoint after a crash under EOS
and wipes and restores the whole store (its transactional state stores, KIP-892, are not enabled by
default). Static membership on both sides lets the restarted member take the dead one's place at once,
so neither recovery waits out a session timeout: what is compared is restoration, not group timing.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer  # noqa: E402

from bench import kafka_streams_peer  # noqa: E402

SIDES = {
    "kappaflow": "kappaflow exactly_once_v2",
    "kappaflow:before": "kappaflow exactly_once_v2 (before)",
    "java": "Java Kafka Streams 4.3.1 exactly_once_v2",
}
READY_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Recovery:
    """One recovery: start() to RUNNING (as the process measured it), process launch to RUNNING (as the
    bench saw it: interpreter or JVM start-up included), and the changelog records it restored."""

    to_running: float
    launch_to_running: float
    restored: int
    full_restore_s: float  # the first start's start() to RUNNING, on the empty state directory
    timeline: str  # kappaflow's start-up timeline of the recovery (restore_phases), "" for Java


def child_command(
    side: str, classpath: str, bootstrap: str, app_id: str, state_dir: str, before: str
) -> list[str]:
    """The side's process; "kappaflow:before" runs kappaflow with `before` (--before) over its defaults."""
    from bench.restore import RESTORE_PEER_SOURCE

    if side == "java":
        java = shutil.which("java")
        if java is None:
            raise kafka_streams_peer.PeerError("java (17+) is required to run the Kafka Streams peer")
        return [
            java,
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp",
            classpath,
            RESTORE_PEER_SOURCE.stem,
            bootstrap,
            app_id,
            f"{app_id}-source",
            state_dir,
            "0",
            "serve",
        ]
    return [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        bootstrap,
        app_id,
        state_dir,
        f"{state_dir}.timeline",
        before if side.endswith(":before") else "",
    ]


def start_until_running(
    command: list[str], log_file: Path
) -> tuple[subprocess.Popen[str], dict[str, str], float]:
    """Launch a side's process (its stderr into `log_file`) and read its lines until it reports RUNNING
    (its figures)."""
    launched = time.perf_counter()
    errors = log_file.open("w+")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True)
    values: dict[str, str] = {}
    stdout: IO[str] | None = process.stdout
    assert stdout is not None
    timer = threading.Timer(READY_TIMEOUT_S, process.kill)
    timer.start()
    try:
        for line in stdout:
            key, _, value = line.strip().partition(" ")
            values[key] = value
            if "START_TO_RUNNING_S" in values and "RESTORED" in values:
                return process, values, time.perf_counter() - launched
    finally:
        timer.cancel()
    process.kill()
    errors.seek(0)
    tail = "\n".join(errors.read().splitlines()[-15:])
    raise kafka_streams_peer.PeerError(f"{command[0]} exited {process.wait()} before RUNNING:\n{tail}")


def feed(bootstrap: str, topic: str, keys: int, value_bytes: int, rate: float, stop: threading.Event) -> int:
    """Updates to random keys of the store at `rate` records/s until `stop`; returns how many."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    pad = b"u" * value_bytes
    sent, began = 0, time.perf_counter()
    while not stop.is_set():
        due = int((time.perf_counter() - began) * rate)
        while sent < due:
            key = b"key-%010d" % random.randrange(keys)
            producer.produce(topic, key=key, value=(key + pad)[:value_bytes])
            sent += 1
        producer.poll(0)
        time.sleep(0.005)
    producer.flush(30)
    return sent


def crash_round(args: argparse.Namespace, bootstrap: str, classpath: str, side: str) -> Recovery:
    """Fill a new application's changelog, start (full restore), stream, kill -9, recover."""
    from bench.restore import STORE, create_topics, fill

    app_id = f"crash-{side.replace(':', '-')}-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, app_id, args.partitions)
    fill(bootstrap, f"{app_id}-{STORE}-changelog", args.records, args.value_bytes)
    state_dir = tempfile.mkdtemp(prefix="crash-")
    command = child_command(side, classpath, bootstrap, app_id, state_dir, args.before)
    try:
        process, first, _launch = start_until_running(command, Path(f"{state_dir}.first.log"))
        stop = threading.Event()
        fed: list[int] = []
        feeder = threading.Thread(
            target=lambda: fed.append(
                feed(bootstrap, f"{app_id}-source", args.records, args.value_bytes, args.feed_rate, stop)
            )
        )
        feeder.start()
        time.sleep(args.kill_after)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        stop.set()
        feeder.join()
        full_s = float(first["START_TO_RUNNING_S"])
        print(
            f"    full restore {first['RESTORED']} records, {full_s:.2f} s to RUNNING; killed -9 "
            f"{args.kill_after:.1f} s into a stream of {fed[0]:,} updates",
            flush=True,
        )
        process, again, launch = start_until_running(command, Path(f"{state_dir}.recovery.log"))
        process.kill()
        process.wait()
        timeline_file = Path(f"{state_dir}.timeline")
        timeline = timeline_file.read_text() if timeline_file.exists() else ""
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
        for leftover in ("timeline", "first.log", "recovery.log"):  # a failure printed its log's tail
            Path(f"{state_dir}.{leftover}").unlink(missing_ok=True)
    return Recovery(float(again["START_TO_RUNNING_S"]), launch, int(again["RESTORED"]), full_s, timeline)


def print_results(results: dict[str, list[Recovery]]) -> None:
    """Each side's best (fastest) recovery and median, then kappaflow's recovery time over Java's."""
    print(
        f"\n{'recovery after kill -9':<44}{'start->RUNNING s':>18}{'median':>8}{'launch->RUNNING s':>19}"
        f"{'restored':>11}{'full restore s':>16}{'runs':>6}"
    )
    for side, label in SIDES.items():
        runs = results.get(side, [])
        if not runs:
            print(f"{label:<44}{'n/a':>18}")
            continue
        best = min(runs, key=lambda r: r.to_running)
        median = statistics.median(r.to_running for r in runs)
        print(
            f"{label:<44}{best.to_running:>18.2f}{median:>8.2f}{best.launch_to_running:>19.2f}"
            f"{best.restored:>11,}{best.full_restore_s:>16.2f}{len(runs):>6}"
        )
    kf, java, before = results.get("kappaflow"), results.get("java"), results.get("kappaflow:before")
    if kf and before:
        now_s, before_s = min(r.to_running for r in kf), min(r.to_running for r in before)
        print(f"\nkappaflow recovery now / before (paired rounds): {now_s / before_s:.2f}")
    if kf:
        fastest = min(kf, key=lambda r: r.to_running).timeline
        print(fastest.replace("kappaflow,", "kappaflow's fastest recovery,"))
    if kf and java:
        ratio = min(r.to_running for r in java) / min(r.to_running for r in kf)
        launch = min(r.launch_to_running for r in java) / min(r.launch_to_running for r in kf)
        print(
            f"\nJava recovery time / kappaflow recovery time: {ratio:.1f}x start()->RUNNING, "
            f"{launch:.1f}x launch->RUNNING (best of each)"
        )


def main(args: argparse.Namespace, bootstrap: str, classpath: str) -> int:
    sides = ["kappaflow", "kappaflow:before", "java"] if args.before else ["kappaflow", "java"]
    if not classpath:
        sides.remove("java")
    results: dict[str, list[Recovery]] = {side: [] for side in sides}
    for round_number in range(1, max(args.repeat, 1) + 1):
        print(f"==> crash round {round_number} of {args.repeat}", flush=True)
        for side in sides:
            print(f"==> {SIDES[side]} ...", flush=True)
            try:
                recovery = crash_round(args, bootstrap, classpath, side)
            except kafka_streams_peer.PeerError as err:
                print(f"    failed: {err}", flush=True)
                continue
            took, launch = recovery.to_running, recovery.launch_to_running
            print(
                f"    recovered in {took:.2f} s (launch {launch:.2f} s), {recovery.restored:,} restored",
                flush=True,
            )
            results[side].append(recovery)
    print_results(results)
    return 0


def child(bootstrap: str, app_id: str, state_dir: str, timeline_file: str, settings: str) -> None:
    """kappaflow's side: the bench's table as the static member "<app id>-0", exactly_once_v2; prints its
    figures once RUNNING (and writes its start-up timeline to `timeline_file`), then processes until it
    is killed."""
    from bench.restore import parse_settings, table_topology
    from bench.restore_phases import Timeline, print_timeline, recorded

    from kappaflow.runner import KafkaStreams, State

    # the runtime's log lines, timed, into the side's log file (start_until_running): what the timeline
    # does not show (waits inside the loop) is there
    logging.basicConfig(level=logging.INFO, format="%(relativeCreated)8.0f ms %(name)s %(message)s")
    config: dict[str, Any] = {
        "application.id": app_id,
        "bootstrap.servers": bootstrap,
        "state.dir": state_dir,
        "processing.guarantee": "exactly_once_v2",
        "group.instance.id": f"{app_id}-0",
        "metrics.port": -1,
        **parse_settings(settings),
    }
    app = KafkaStreams(table_topology(f"{app_id}-source"), config)
    running = threading.Event()
    app.set_state_listener(lambda new, _old: running.set() if new is State.RUNNING else None)
    with recorded(Timeline()) as timeline:
        timeline.started = time.perf_counter()
        app.start()
        if not running.wait(READY_TIMEOUT_S):
            sys.exit(2)
        timeline.running = time.perf_counter() - timeline.started
    restored = app.metrics.counter("restored-records-total")
    with open(timeline_file, "w") as out, contextlib.redirect_stdout(out):
        print_timeline(f"kappaflow, {restored:,.0f} records restored", timeline)
    print(f"START_TO_RUNNING_S {timeline.running}", flush=True)
    print(f"RESTORED {restored:.0f}", flush=True)
    threading.Event().wait()  # processing, until the bench kills the process


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "--child":
        child(*sys.argv[2:7])
    else:
        sys.exit("run through bench/restore.py --crash")
