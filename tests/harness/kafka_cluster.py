"""A replicated KRaft cluster on loopback: three brokers and a controller quorum, from the same jars as the
single broker (tests.harness.kafka_broker), for replication and leader-failover tests.

Why dedicated controllers (as production KRaft runs): a broker is crashed, frozen and restarted while the
quorum that fences it and moves its leaderships stays up; the controllers are never the fault injected.
`controllers` is 1 (a quorum of one: the CI tests, one JVM less on a small machine) or 3 (`make chaos`).

Every topic the brokers create themselves (`__consumer_offsets`, `__transaction_state`) has three
replicas and `min.insync.replicas=2`, like the internal topics kappaflow creates with
`replication.factor=3` (kappaflow_contract.topics.replicated_topic_config): one broker down, every
acknowledged write is still on a live replica and the topic is still writable.

Faults on one broker, by node id (1, 2, 3): `crash` (SIGKILL, then wait until the controller has fenced
it: its leaderships have moved), `start`, `freeze` (SIGSTOP: a zombie broker, alive but silent) and
`thaw` (SIGCONT), `restart` (graceful: controlled shutdown, then start, then wait for every partition to
be fully in sync again, as a rolling restart does). What to aim at: `leader_of(topic, partition)`,
`transaction_coordinator(transactional_id)` and `group_coordinator(group_id)` name the broker, so a test
can kill exactly that one.

CLI (a cluster for trying things by hand)::

    python -m tests.harness.kafka_cluster start --dir .run/kafka-cluster [--controllers 3]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from confluent_kafka.admin import AdminClient

from tests.harness.kafka_broker import BrokerError, _cluster_id, _free_port, _tail, broker_properties
from tests.harness.kafka_split import (
    DROPPED_MARKERS,
    HEARTBEAT_INTERVAL_MS,
    SESSION_TIMEOUT_MS,
    KafkaNode,
    _read_from,
)

BROKER_IDS = (1, 2, 3)
FIRST_CONTROLLER_ID = 1000
BROKER_HEAP = "256m"
CONTROLLER_HEAP = "160m"
REPLICAS = 3
START_TIMEOUT_S = 240.0
MIN_INSYNC = 2
# Both coordinators' topics: few partitions, so the first group and transaction are quick.
OFFSETS_PARTITIONS = 3
TRANSACTION_STATE_PARTITIONS = 3
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"


def java_string_hash(text: str) -> int:
    """Java's `String.hashCode()` (over UTF-16 code units, 32-bit wrap-around), signed."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition(key: str, partitions: int) -> int:
    """The partition of `__consumer_offsets` / `__transaction_state` owning a group or transactional id:
    Kafka's `Utils.abs(key.hashCode()) % partitions` (its `abs` masks the sign bit). The coordinator is
    that partition's leader."""
    return (java_string_hash(key) & 0x7FFFFFFF) % partitions


def cluster_properties(node_id: int, role: str, port: int, voters: str, log_dir: Path) -> dict[str, str]:
    """One node's server.properties: the single broker's settings (topic and group defaults stay the
    same) with this node's id and listeners, the quorum, replicated coordinator topics and the quick
    fencing of the split cluster (tests.harness.kafka_split: 6 s sessions, 1 s heartbeats)."""
    props = broker_properties(port, port, log_dir)
    props.update(
        {
            "process.roles": role,
            "node.id": str(node_id),
            "controller.quorum.voters": voters,
            "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
            "broker.heartbeat.interval.ms": str(HEARTBEAT_INTERVAL_MS),
            "default.replication.factor": str(REPLICAS),
            "offsets.topic.replication.factor": str(REPLICAS),
            "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
            "transaction.state.log.replication.factor": str(REPLICAS),
            "transaction.state.log.min.isr": str(MIN_INSYNC),
            "transaction.state.log.num.partitions": str(TRANSACTION_STATE_PARTITIONS),
            "share.coordinator.state.topic.replication.factor": str(REPLICAS),
            "share.coordinator.state.topic.min.isr": str(MIN_INSYNC),
            # the cluster decides nothing unsafe for the audits to find: an out-of-sync replica never leads
            "unclean.leader.election.enable": "false",
        }
    )
    if role == "controller":
        props.update(
            {
                "listeners": f"CONTROLLER://127.0.0.1:{port}",
                "listener.security.protocol.map": "CONTROLLER:PLAINTEXT",
            }
        )
        del props["advertised.listeners"], props["inter.broker.listener.name"]
    else:
        props.update(
            {
                "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            }
        )
    return props


class ClusterNode(KafkaNode):
    """A node of the cluster: the split cluster's process handling, this cluster's settings."""

    def __init__(
        self, node_id: int, role: str, port: int, voters: str, data_dir: Path, *, heap: str, cluster_id: str
    ) -> None:
        super().__init__(
            role,
            port,
            port,
            data_dir,
            cluster_id=cluster_id,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heap=heap,
        )
        # a restarted broker loads every partition's log first: minutes on a loaded two-core machine
        self.start_timeout = START_TIMEOUT_S
        self.node_id = node_id
        self.voters = voters

    def properties(self) -> dict[str, str]:
        props = cluster_properties(self.node_id, self.role, self.port, self.voters, self.data_dir / "data")
        return {**props, **self.extra_properties}


def _progress(message: str) -> None:
    print(f"==> Kafka cluster: {message}", flush=True)


class KafkaCluster:
    """`controllers` controller-only nodes and three broker-only nodes on 127.0.0.1, free ports, storage
    and logs under `data_dir`/{controller-<id>,broker-<id>}. Every JVM is a child that dies with the
    Python process (tests.harness.kafka_broker)."""

    def __init__(self, data_dir: Path, *, controllers: int = 1, broker_heap: str = BROKER_HEAP) -> None:
        if controllers not in (1, 3):
            raise ValueError(f"controllers must be 1 or 3 (a quorum of one or three), not {controllers}")
        cluster_id = _cluster_id()
        data_dir = Path(data_dir)
        controller_ports = {FIRST_CONTROLLER_ID + i: _free_port() for i in range(controllers)}
        voters = ",".join(f"{cid}@127.0.0.1:{port}" for cid, port in controller_ports.items())
        self.controllers = [
            ClusterNode(cid, "controller", port, voters, data_dir / f"controller-{cid}",
                        heap=CONTROLLER_HEAP, cluster_id=cluster_id)
            for cid, port in controller_ports.items()
        ]  # fmt: skip
        self.brokers = {
            bid: ClusterNode(bid, "broker", _free_port(), voters, data_dir / f"broker-{bid}",
                             heap=broker_heap, cluster_id=cluster_id)
            for bid in BROKER_IDS
        }  # fmt: skip
        self.frozen: set[int] = set()
        # Every JVM is forked by this one thread, alive as long as the cluster: Linux signals a child
        # when the *thread* that forked it ends (`_die_with_parent`), so a broker restarted from a
        # short-lived thread (a fault injector) died with it.
        self._launcher = ThreadPoolExecutor(1, thread_name_prefix="kafka-cluster-launcher")

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(node.bootstrap_servers for node in self.brokers.values())

    def broker(self, broker_id: int) -> ClusterNode:
        try:
            return self.brokers[broker_id]
        except KeyError:
            raise ValueError(f"broker_id must be one of {BROKER_IDS}, not {broker_id}") from None

    def start(self) -> None:
        """Controllers first (a broker registers with the quorum), then the brokers, one progress line
        each; returns once every coordinator topic partition is fully replicated."""
        began = time.monotonic()
        try:
            _start_together(self.controllers, self._launch)
            _start_together(list(self.brokers.values()), self._launch)
            self.wait_in_sync(timeout=120.0)
        except BaseException:
            self.stop()
            raise
        _progress(f"{len(self.brokers)} brokers, {len(self.controllers)} controller(s) in "
                  f"{time.monotonic() - began:.1f}s: {self.bootstrap_servers}")  # fmt: skip

    def _launch(self, node: ClusterNode) -> None:
        """Fork `node`'s JVM on the launcher thread (see __init__); not waiting for it to be ready."""
        self._launcher.submit(node.start, wait=False).result()

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0})

    # --- faults -------------------------------------------------------------------------------------

    def crash(self, broker_id: int, timeout: float = 60.0) -> float:
        """SIGKILL the broker, then wait until a controller has fenced it (its leaderships moved to the
        in-sync replicas); the seconds that took."""
        node = self.broker(broker_id)
        marks = {c.node_id: _size(c.server_log) for c in self.controllers}
        node.stop(graceful=False)
        killed = time.monotonic()
        self._wait_fenced(broker_id, marks, killed + timeout)
        return time.monotonic() - killed

    def start_broker(self, broker_id: int) -> float:
        """Start a stopped broker on its storage; the seconds until it answers."""
        started = time.monotonic()
        node = self.broker(broker_id)
        self._launch(node)
        node.wait_ready()
        return time.monotonic() - started

    def restart(self, broker_id: int, timeout: float = 120.0) -> float:
        """Graceful: SIGTERM (controlled shutdown moves its leaderships first), start, and wait until no
        partition is under-replicated; the seconds the whole took."""
        started = time.monotonic()
        node = self.broker(broker_id)
        node.stop(graceful=True)
        self._launch(node)
        node.wait_ready()
        self.wait_in_sync(timeout=timeout)
        return time.monotonic() - started

    def freeze(self, broker_id: int) -> None:
        """SIGSTOP: the process keeps its sockets and its view of the cluster, and answers nothing."""
        pid = self._pid(broker_id)
        os.kill(pid, signal.SIGSTOP)
        self.frozen.add(broker_id)

    def thaw(self, broker_id: int) -> None:
        """SIGCONT a frozen broker: it finds itself fenced and rejoins."""
        os.kill(self._pid(broker_id), signal.SIGCONT)
        self.frozen.discard(broker_id)

    def _pid(self, broker_id: int) -> int:
        pid = self.broker(broker_id).pid
        if pid is None:
            raise BrokerError(f"broker {broker_id} is not running")
        return pid

    def _wait_fenced(self, broker_id: int, marks: dict[int, int], deadline: float) -> None:
        line = f"Fencing broker {broker_id} at epoch"
        while time.monotonic() < deadline:
            if any(line in _read_from(c.server_log, marks[c.node_id]) for c in self.controllers):
                return
            time.sleep(0.1)
        logs = "\n".join(f"{c.server_log}:\n{_tail(c.server_log)}" for c in self.controllers)
        raise BrokerError(f"no controller fenced broker {broker_id} in time:\n{logs}")

    # --- where things are ---------------------------------------------------------------------------

    def leader_of(self, topic: str, partition: int) -> int:
        """The node id leading `topic`-`partition` now (a ValueError when it has none)."""
        metadata = self.admin().list_topics(topic, timeout=15)
        described = metadata.topics.get(topic)
        if described is None or described.error is not None or partition not in described.partitions:
            raise ValueError(f"topic '{topic}' partition {partition}: not in the cluster's metadata")
        leader = int(described.partitions[partition].leader)
        if leader < 0:
            raise ValueError(f"topic '{topic}' partition {partition} has no leader")
        return leader

    def topics_led_by(self, broker_id: int, topics: Iterable[str]) -> list[str]:
        """Those of `topics` with at least one partition `broker_id` leads now (sorted; a topic missing
        from the metadata is not led)."""
        metadata = self.admin().list_topics(timeout=15)
        led = []
        for topic in topics:
            described = metadata.topics.get(topic)
            leaders = () if described is None or described.error else described.partitions.values()
            if any(int(p.leader) == broker_id for p in leaders):
                led.append(topic)
        return sorted(led)

    def transaction_coordinator(self, transactional_id: str) -> int:
        """The broker coordinating `transactional_id`'s transactions."""
        partition = coordinator_partition(transactional_id, TRANSACTION_STATE_PARTITIONS)
        return self.leader_of(TRANSACTION_STATE_TOPIC, partition)

    def group_coordinator(self, group_id: str) -> int:
        """The broker coordinating the consumer group `group_id`."""
        return self.leader_of(OFFSETS_TOPIC, coordinator_partition(group_id, OFFSETS_PARTITIONS))

    # (both coordinator topics are created on the first FindCoordinator: ask after a group or producer
    # has started, or leader_of says the topic is not in the metadata)

    def under_replicated(self) -> list[str]:
        """`topic-partition` of every partition whose in-sync replicas are fewer than its replicas."""
        metadata = self.admin().list_topics(timeout=15)
        return sorted(
            f"{name}-{pid}"
            for name, topic in metadata.topics.items()
            for pid, p in topic.partitions.items()
            if len(p.isrs) < len(p.replicas) or p.leader < 0
        )

    def wait_in_sync(self, timeout: float = 120.0) -> None:
        """Until every partition is led and fully in sync (the gate between two brokers of a rolling
        restart), and both coordinator topics exist."""
        deadline = time.monotonic() + timeout
        lagging: list[str] = []
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                lagging = self.under_replicated()
                if not lagging:
                    return
            time.sleep(0.2)
        raise BrokerError(f"partitions not in sync after {timeout:.0f}s: {lagging[:20]}")

    def dropped_markers(self) -> list[str]:
        """Every broker's log lines saying its transaction coordinator completed a transaction without
        some markers (tests.harness.kafka_split: Kafka's own hazard; empty on a healthy cluster)."""
        lines: list[str] = []
        for node in self.brokers.values():
            logs = [node.server_log.with_name(f"{node.server_log.name}.{i}") for i in (2, 1)]
            text = "".join(_read_from(log, 0) for log in [*logs, node.server_log])
            lines += [
                f"broker {node.node_id}: {line}" for line in text.splitlines() if DROPPED_MARKERS in line
            ]
        return lines

    def stop(self) -> None:
        """Brokers first (a controlled shutdown needs the quorum), then the controllers; frozen ones are
        resumed so that they can stop."""
        for broker_id in list(self.frozen):
            with contextlib.suppress(Exception):
                self.thaw(broker_id)
        for node in [*self.brokers.values(), *self.controllers]:
            with contextlib.suppress(Exception):
                node.stop(timeout=20.0)
        self._launcher.shutdown(wait=True)

    def __enter__(self) -> KafkaCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _start_together(nodes: list[ClusterNode], launch: Callable[[ClusterNode], None]) -> None:
    """Format in parallel threads, `launch` every JVM (from the cluster's launcher thread: a JVM gets
    SIGTERM when the thread that forked it ends, `_die_with_parent`), then wait for all, printing each
    one's progress line. One after another, four nodes took 96 s on a loaded machine."""
    errors: list[BaseException] = []

    def prepare(node: ClusterNode) -> None:
        try:
            node.prepare()
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=prepare, args=(node,), name=f"format-{node.node_id}") for node in nodes
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    started = time.monotonic()
    for node in nodes:
        launch(node)
    for node in nodes:
        node.wait_ready()
        what = f"{node.role} {node.node_id} on 127.0.0.1:{node.port}"
        _progress(f"{what} ready after {time.monotonic() - started:.1f}s (log {node.server_log})")


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


@contextlib.contextmanager
def running_cluster(data_dir: Path, *, controllers: int = 1) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(data_dir, controllers=controllers)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.harness.kafka_cluster")
    parser.add_argument("command", choices=["start"], help="start a cluster and keep it up until Ctrl-C")
    parser.add_argument("--dir", default=".run/kafka-cluster")
    parser.add_argument("--controllers", type=int, default=1, choices=[1, 3])
    args = parser.parse_args(argv)
    with running_cluster(Path(args.dir), controllers=args.controllers) as cluster:
        print(cluster.bootstrap_servers, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
