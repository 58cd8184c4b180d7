"""`python -m tests.harness.lanes`: `make test`'s tiers in two lanes that run at the same time.

Most of the suite's wall time is waiting, not computing: brokers electing leaders, consumer groups
settling, session and transaction timeouts running out, control planes and operators reconciling. One
lane runs the tests of tests/kafka (and the few others that use the fixed ports of the getting-started
page and `make kafka-up`); the other runs everything else and then the in-process tiers again with the
Python drain loop. Each lane starts its own servers from the session fixtures (brokers and control
planes pick free ports), so the lanes share nothing but the machine; on CI's two cores that takes the
suite from one lane's sum to about the longer lane.

Every line a lane prints is prefixed with its name and written as it comes; each lane's whole output
is also kept in .run/logs/test-<lane>.log. A lane runs all its commands even after one fails, so one
run reports every failure; the exit status is 1 when any command failed. The three-broker cluster's
fault campaigns run after both lanes, alone (`ALONE`).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / ".run" / "logs"

#: Test directories the kafka lane runs: tests/kafka, and the directories whose tests bind the fixed
#: ports of a user's local broker (127.0.0.1:9092 in the getting-started page, `make kafka-up`, the
#: Kafka image's listeners), so that those never run at the same time.
KAFKA_LANE_DIRS = ("tests/kafka", "tests/images", "tests/docs", "tests/bench")

#: Tests that run after both lanes, with the machine to themselves: the three-broker cluster's fault
#: campaigns, whose brokers restart and elect leaders within the session and transaction timeouts they
#: audit (on two cores under both lanes' load a broker restart took minutes).
ALONE = ("tests/kafka/test_cluster_chaos.py",)


@dataclass
class Lane:
    """A name and the commands it runs one after the other."""

    name: str
    commands: list[list[str]]
    failed: list[str] = field(default_factory=list)
    #: pytest's lines naming a failed test (`-v`'s "tests/...::name FAILED", a short summary's
    #: "FAILED tests/...::name - reason"), kept so the
    #: run's last lines name every failure: CI often shows only the tail of a long interleaved log
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0


def lanes(python: str, pytest_args: list[str], drain_tests: list[str]) -> tuple[list[Lane], Lane]:
    """The two lanes of `make test`, and what runs alone after them (the real-node tier runs after
    that, on its own)."""
    # -v: a line per test as it ends (with -q a lane shows nothing until 72 tests have ended)
    pytest = [python, "-u", "-m", "pytest", "-v", "-p", "no:cacheprovider"]
    others_ignore = [f"--ignore={d}" for d in (*KAFKA_LANE_DIRS, "tests/realnode")]
    alone_ignore = [f"--ignore={t}" for t in ALONE]
    both = [
        Lane(
            "kafka",
            [[*pytest, "--durations=15", "-m", "not chaos", *KAFKA_LANE_DIRS, *alone_ignore, *pytest_args]],
        ),
        Lane(
            "others",
            [
                [*pytest, "--durations=15", "-m", "not chaos", "tests", *others_ignore, *pytest_args],
                [*pytest, "--python-drain", *drain_tests, *pytest_args],
            ],
        ),
    ]
    return both, Lane("alone", [[*pytest, "--durations=5", "-m", "not chaos", *ALONE, *pytest_args]])


def _names_a_failure(line: str) -> bool:
    """A pytest line that names a failed or erroring test: `-v`'s per-test line (`tests/x.py::t FAILED
    [ 64%]`) or a short-summary line (`FAILED tests/x.py::t - reason`)."""
    if line.startswith(("FAILED ", "ERROR ")):
        return True
    head, _, rest = line.partition(" ")
    return "::" in head and rest.startswith(("FAILED", "ERROR"))


def _run_lane(lane: Lane, out_lock: threading.Lock) -> None:
    started = time.monotonic()
    width = len("others")  # the longest lane name
    LOGS.mkdir(parents=True, exist_ok=True)
    with (LOGS / f"test-{lane.name}.log").open("w") as log:
        for command in lane.commands:
            line = f"$ {shlex.join(command)}\n"
            log.write(line)
            with out_lock:
                sys.stdout.write(f"[{lane.name:<{width}}] {line}")
                sys.stdout.flush()
            env = {**os.environ, "PYTHONUNBUFFERED": "1"}
            proc = subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            assert proc.stdout is not None
            for text in proc.stdout:
                if _names_a_failure(text):
                    lane.failures.append(text.rstrip("\n"))
                log.write(text)
                log.flush()
                with out_lock:
                    sys.stdout.write(f"[{lane.name:<{width}}] {text}")
                    sys.stdout.flush()
            if proc.wait() != 0:
                lane.failed.append(shlex.join(command))
    lane.seconds = time.monotonic() - started


def run(both: list[Lane], alone: Lane) -> int:
    """Run the lanes at once, then `alone`; a summary line per lane; 1 when any command failed."""
    out_lock = threading.Lock()
    threads = [threading.Thread(target=_run_lane, args=(lane, out_lock), daemon=True) for lane in both]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    _run_lane(alone, out_lock)
    all_lanes = [*both, alone]
    for lane in all_lanes:
        verdict = "passed" if not lane.failed else f"FAILED: {'; '.join(lane.failed)}"
        print(
            f"==> lane {lane.name}: {verdict} in {lane.seconds:.0f}s (log .run/logs/test-{lane.name}.log)",
            flush=True,
        )
        for failure in lane.failures:
            print(f"==>   {failure}", flush=True)
    return 1 if any(lane.failed for lane in all_lanes) else 0


def main() -> int:
    pytest_args = shlex.split(os.environ.get("PYTEST_ARGS", ""))
    drain_tests = shlex.split(os.environ.get("PYTHON_DRAIN_TESTS", ""))
    if not drain_tests:
        print("PYTHON_DRAIN_TESTS is empty: set it as the Makefile does", file=sys.stderr)
        return 2
    return run(*lanes(sys.executable, pytest_args, drain_tests))


if __name__ == "__main__":
    sys.exit(main())
