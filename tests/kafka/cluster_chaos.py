"""Broker faults on the three-broker cluster (tests.harness.kafka_cluster) during a chaos run
(tests.kafka.chaos), each aimed at the broker that matters and each timed.

Fault kinds (`FAULT_KINDS`):
  - `leader-input`, `leader-repartition`, `leader-changelog`: the leader of a random partition of the
    input topic, the repartition topic or the store's changelog crashed (SIGKILL) and, once fenced,
    started again;
  - `txn-coordinator`: the broker coordinating a random instance's transactional id crashed, restarted;
  - `group-coordinator`: the broker coordinating the application's consumer group crashed, restarted;
  - `rolling-restart`: every broker restarted gracefully in turn, each once all partitions are in sync;
  - `freeze`: the leader of a changelog partition stopped (SIGSTOP) for longer than the broker session,
    the consumer session and the transaction timeouts, then resumed (a zombie broker).
After each fault the injector waits until every partition is fully in sync again (as an operator would
before the next maintenance step), so two faults never take two replicas of one partition.

What is measured per fault (`FaultRecord`): `outage_s`, from the fault until the broker is back and
every partition in sync; `recovery_s`, from the fault until the committed output reflects every input
record acknowledged before it - what a user would call "caught up again". Instance kill -9s go on
meanwhile (the chaos loop), so a recovery time includes whatever rebalance a kill caused.
"""

from __future__ import annotations

import random
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.harness.kafka_cluster import KafkaCluster

FAULT_KINDS = (
    "leader-input",
    "leader-repartition",
    "leader-changelog",
    "txn-coordinator",
    "group-coordinator",
    "rolling-restart",
    "freeze",
)
# Longer than the broker session (6 s: the controller fences it), the consumer session (6 s in the
# chaos config: its members are evicted if their coordinator was frozen... or not) and the transaction
# timeout (10 s: the runtime's exactly_once_v2 default), so each of those expires while it is frozen.
FREEZE_S = 14.0
PROCESS_ID_FILE = "kappaflow-process-id"  # kappaflow.runner.process_id: the dynamic member's identity


@dataclass(frozen=True)
class FaultRecord:
    kind: str
    broker: int  # the broker hit (the first one, for a rolling restart)
    target: str  # what made it the one: the partition it led, the id it coordinated
    outage_s: float
    recovery_s: float | None  # None: not caught up within the wait
    # which of the application's topics (input, repartition, changelog) had a partition led by the
    # broker hit when it was hit: with more partitions than brokers a crash usually takes leaders of all
    led: tuple[str, ...] = ()


def plan_faults(kinds: Sequence[str], count: int) -> list[str]:
    """`count` faults cycling through `kinds` in order, so a short run still hits every kind once
    (pure; a ValueError naming an unknown kind)."""
    unknown = sorted(set(kinds) - set(FAULT_KINDS))
    if unknown:
        raise ValueError(f"faults: unknown kind(s) {unknown}; known: {', '.join(FAULT_KINDS)}")
    if not kinds:
        return []
    return [kinds[i % len(kinds)] for i in range(count)]


def transactional_id(app_id: str, state_dir: Path, group_instance_id: str) -> str | None:
    """The instance's transactional id, as kappaflow.clients.kafka makes it: `<app>-<group.instance.id>`
    for a static member, `<app>-<process id>` (persisted in its state dir) for a dynamic one; None
    before a dynamic instance has written its id."""
    if group_instance_id:
        return f"{app_id}-{group_instance_id}"
    path = state_dir / app_id / PROCESS_ID_FILE
    stored = path.read_text().strip() if path.exists() else ""
    return f"{app_id}-{stored}" if stored else None


class FaultInjector(threading.Thread):
    """Injects `faults` in order, `gap_s` apart, into `cluster` while the chaos loop runs.

    `caught_up(snapshot)` says whether the committed output reflects the per-key input counts in
    `snapshot`; `acked()` is the snapshot of the input acknowledged so far (both from the chaos run)."""

    def __init__(
        self,
        cluster: KafkaCluster,
        faults: list[str],
        *,
        app_id: str,
        source: str,
        partitions: int,
        transactional_ids: Callable[[], list[str]],
        acked: Callable[[], dict[str, int]],
        caught_up: Callable[[dict[str, int]], bool],
        rng: random.Random,
        first_at_s: float = 5.0,
        gap_s: float = 3.0,
        recovery_timeout_s: float = 180.0,
    ) -> None:
        super().__init__(name="chaos-faults", daemon=True)
        self._cluster, self._faults, self._rng = cluster, faults, rng
        self._topics = {
            "leader-input": source,
            "leader-repartition": f"{app_id}-counts-repartition",
            "leader-changelog": f"{app_id}-counts-changelog",
            "freeze": f"{app_id}-counts-changelog",
        }
        self._app_id, self._partitions = app_id, partitions
        self._transactional_ids, self._acked, self._caught_up = transactional_ids, acked, caught_up
        self._first_at_s, self._gap_s, self._recovery_timeout_s = first_at_s, gap_s, recovery_timeout_s
        self.records: list[FaultRecord] = []
        self.error = ""  # the traceback of what stopped it, if anything did
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            self.stop.wait(self._first_at_s)
            for kind in self._faults:
                if self.stop.is_set():
                    return
                self.records.append(self._inject(kind))
                print(f"chaos fault: {self.records[-1]}", flush=True)
                self.stop.wait(self._gap_s)
        except BaseException:  # reported by the run, which fails on it
            self.error = traceback.format_exc()

    def _aim(self, kind: str) -> tuple[int, str]:
        if kind in self._topics:
            for topic in sorted(set(self._topics.values())):  # all created (ValueError: not yet), so
                self._cluster.leader_of(topic, 0)  # what the broker hit leads is known in full
            partition = self._rng.randrange(self._partitions)
            topic = self._topics[kind]
            return self._cluster.leader_of(topic, partition), f"leader of {topic}-{partition}"
        if kind == "txn-coordinator":
            ids = self._transactional_ids()
            if not ids:
                raise RuntimeError("no instance has a transactional id yet to aim the fault at")
            txn = self._rng.choice(ids)
            return self._cluster.transaction_coordinator(txn), f"transaction coordinator of {txn}"
        if kind == "group-coordinator":
            return self._cluster.group_coordinator(self._app_id), f"group coordinator of {self._app_id}"
        broker = self._rng.choice(sorted(self._cluster.brokers))
        return broker, "every broker in turn, starting here"  # rolling-restart

    def _aim_when_there(self, kind: str, timeout_s: float = 180.0) -> tuple[int, str]:
        """`_aim`, retried while the target does not exist yet: the application creates its internal
        topics and transactional ids once it has started (tens of seconds on a loaded machine)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self._aim(kind)
            except (ValueError, RuntimeError):
                if time.monotonic() > deadline or self.stop.is_set():
                    raise
                self.stop.wait(1.0)

    def _inject(self, kind: str) -> FaultRecord:
        broker, target = self._aim_when_there(kind)
        led = tuple(self._cluster.topics_led_by(broker, sorted(set(self._topics.values()))))
        snapshot = self._acked()
        began = time.monotonic()
        if kind == "rolling-restart":
            ids = sorted(self._cluster.brokers)
            for b in ids[ids.index(broker) :] + ids[: ids.index(broker)]:
                self._cluster.restart(b)
        elif kind == "freeze":
            self._cluster.freeze(broker)
            self.stop.wait(FREEZE_S)
            self._cluster.thaw(broker)
        else:
            self._cluster.crash(broker)
            self.stop.wait(self._rng.uniform(0.0, 2.0))
            self._cluster.start_broker(broker)
        self._cluster.wait_in_sync(timeout=180.0)
        outage = time.monotonic() - began
        recovery: float | None = None
        deadline = began + self._recovery_timeout_s
        while time.monotonic() < deadline and not self.stop.is_set():
            if self._caught_up(snapshot):
                recovery = time.monotonic() - began
                break
            time.sleep(0.2)
        return FaultRecord(
            kind, broker, target, round(outage, 1), None if recovery is None else round(recovery, 1), led
        )


def recovery_table(records: Sequence[FaultRecord]) -> str:
    """Per fault kind: how many, and the outage and recovery seconds (min / max) - for the report."""
    lines = []
    for kind in FAULT_KINDS:
        hit = [r for r in records if r.kind == kind]
        if not hit:
            continue
        recovered = [r.recovery_s for r in hit if r.recovery_s is not None]
        outage = [r.outage_s for r in hit]
        rec = f"{min(recovered):.1f}-{max(recovered):.1f}s" if recovered else "never"
        missing = len(hit) - len(recovered)
        lines.append(
            f"{kind}: {len(hit)}x, outage {min(outage):.1f}-{max(outage):.1f}s, caught up after {rec}"
            + (f" ({missing} not caught up)" if missing else "")
        )
    return "\n".join(lines)
