"""A split KRaft cluster for tests that crash the broker: a controller-only process that stays up and a
broker-only process that is killed and restarted, as production KRaft clusters run (dedicated controllers).

Why not the single combined node (tests.harness.kafka_broker) for broker restarts: Kafka's transaction
coordinator (4.3.1), when it sends a transaction's markers, skips every partition that has no leader -
it takes such a partition for a deleted one ("Couldn't find leader endpoint ... likely deleted already")
- and completes the transaction anyway. With one broker and single-replica topics every partition is
leaderless whenever that broker is fenced, and a combined node is fenced while its own coordinator runs:
at a graceful restart (controlled shutdown: PrepareCommit -> CompleteCommit within milliseconds, no
marker written), and after a crash, when the restarted process first leads from its old metadata and
loads the open transactions, then its previous incarnation's session expires, it is fenced and the
pending markers are dropped. Either way a transaction is left hanging (read_committed readers and
OffsetFetch(require_stable) wait for good), or an aborted transaction's records are later committed by
the producer id's next commit marker.

Split, the broker is crashed (SIGKILL) and started again only once the controller, which stays up, has
fenced it (its session expired): partitions are leaderless only while no coordinator runs, and the
restarted broker, unfenced, leads every partition before its coordinator completes anything.
"""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

from tests.harness.kafka_broker import (
    HEAP,
    BrokerError,
    LocalKafkaBroker,
    _cluster_id,
    _tail,
    broker_properties,
)

BROKER_ID = 1
CONTROLLER_ID = 1000
# The controller fences a broker this long after its last heartbeat (Kafka's default: 9 s, heartbeats
# every 2 s). Lower so that a crash costs less waiting; still 6 missed heartbeats before a live broker on
# a loaded machine would be fenced.
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 1000
CONTROLLER_HEAP = "256m"
# TransactionMarkerChannelManager's line when it completes a transaction without some of its markers.
DROPPED_MARKERS = "these partitions are likely deleted already"


def fencing_line(broker_id: int) -> str:
    """What the controller logs (ReplicationControlManager, INFO) when a broker's session expires."""
    return f"Fencing broker {broker_id} at epoch"


def split_properties(
    role: str, port: int, controller_port: int, log_dir: Path, *, session_timeout_ms: int
) -> dict[str, str]:
    """Server settings of one node of the split pair: the combined node's (broker_properties, so topic and
    coordinator defaults are the same) with the role's own ids and listeners."""
    props = broker_properties(port, controller_port, log_dir)
    props.update(
        {
            "process.roles": role,
            "controller.quorum.voters": f"{CONTROLLER_ID}@127.0.0.1:{controller_port}",
            "broker.session.timeout.ms": str(session_timeout_ms),
            "broker.heartbeat.interval.ms": str(HEARTBEAT_INTERVAL_MS),
        }
    )
    if role == "controller":
        props.update(
            {
                "node.id": str(CONTROLLER_ID),
                "listeners": f"CONTROLLER://127.0.0.1:{controller_port}",
                "listener.security.protocol.map": "CONTROLLER:PLAINTEXT",
            }
        )
        del props["advertised.listeners"], props["inter.broker.listener.name"]
    elif role == "broker":
        props.update({"node.id": str(BROKER_ID), "listeners": f"PLAINTEXT://127.0.0.1:{port}"})
    else:
        raise ValueError(f"role must be 'controller' or 'broker', not {role!r}")
    return props


def controller_answers(port: int, timeout: float = 1.0) -> bool:
    """True when the node at 127.0.0.1:``port`` answers an ApiVersions (v0) request.

    A controller serves no metadata to clients, so the broker's probe cannot tell it is up; ApiVersions
    is answered by every Kafka listener once the node processes requests. (Whether a quorum leader is
    elected shows when the broker starts: it is ready only once registered and unfenced.)"""
    client_id = b"kappaflow-probe"
    request = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(struct.pack(">i", len(request)) + request)
            header = sock.makefile("rb").read(8)
    except OSError:
        return False
    return len(header) == 8 and struct.unpack(">ii", header)[1] == 7  # size, then our correlation id


class KafkaNode(LocalKafkaBroker):
    """One node of the split pair: LocalKafkaBroker's process handling with the role's settings."""

    def __init__(
        self,
        role: str,
        port: int,
        controller_port: int,
        data_dir: Path,
        *,
        cluster_id: str,
        session_timeout_ms: int,
        heap: str = HEAP,
    ) -> None:
        super().__init__(port, data_dir, controller_port=controller_port, heap=heap, cluster_id=cluster_id)
        self.role = role
        self.session_timeout_ms = session_timeout_ms

    def properties(self) -> dict[str, str]:
        props = split_properties(
            self.role,
            self.port,
            self.controller_port,
            self.data_dir / "data",
            session_timeout_ms=self.session_timeout_ms,
        )
        return {**props, **self.extra_properties}

    def ready(self) -> bool:
        if self.role == "controller":
            return controller_answers(self.controller_port)
        return super().ready()


class SplitKafkaCluster:
    """A controller-only node and a broker-only node on 127.0.0.1 under ``data_dir``/{controller,broker}.

    ``start()`` brings up both (the controller first); ``crash_broker()`` SIGKILLs the broker and returns
    once the controller has fenced it, ``start_broker()`` starts it again on the same storage; ``stop()``
    stops the broker (a controlled shutdown needs the controller), then the controller. Both JVMs are
    children that die with the Python process (LocalKafkaBroker)."""

    def __init__(
        self, port: int, controller_port: int, data_dir: Path, *, session_timeout_ms: int = SESSION_TIMEOUT_MS
    ) -> None:
        cluster_id = _cluster_id()
        data_dir = Path(data_dir)
        self.session_timeout_ms = session_timeout_ms
        self.controller = KafkaNode(
            "controller",
            controller_port,
            controller_port,
            data_dir / "controller",
            heap=CONTROLLER_HEAP,
            cluster_id=cluster_id,
            session_timeout_ms=session_timeout_ms,
        )
        self.broker = KafkaNode(
            "broker",
            port,
            controller_port,
            data_dir / "broker",
            cluster_id=cluster_id,
            session_timeout_ms=session_timeout_ms,
        )

    @property
    def bootstrap_servers(self) -> str:
        return self.broker.bootstrap_servers

    def start(self) -> None:
        self.controller.start()
        try:
            self.broker.start()
        except BaseException:
            self.controller.stop()
            raise

    def start_broker(self) -> None:
        self.broker.start()

    def crash_broker(self, timeout: float = 60.0) -> float:
        """SIGKILL the broker, then wait until the controller has fenced it; the seconds that took.

        Starting it again before that would let the new process lead from the old metadata and load the
        open transactions until the old session expires and fences it (the module docstring)."""
        log = self.controller.server_log
        seen = log.stat().st_size if log.exists() else 0
        self.broker.stop(graceful=False)
        killed = time.monotonic()
        deadline = killed + timeout
        line = fencing_line(BROKER_ID)
        while time.monotonic() < deadline:
            if line in _read_from(log, seen):
                return time.monotonic() - killed
            time.sleep(0.1)
        raise BrokerError(
            f"the controller did not fence the crashed broker within {timeout:.0f}s "
            f"(broker.session.timeout.ms={self.session_timeout_ms}); {log}:\n{_tail(log)}"
        )

    def dropped_markers(self) -> list[str]:
        """The broker's log lines saying its transaction coordinator skipped markers of partitions with no
        leader (what this split setup is there to prevent; empty when it works)."""
        logs = [self.broker.server_log.with_name(f"{self.broker.server_log.name}.{i}") for i in (2, 1)]
        text = "".join(_read_from(log, 0) for log in [*logs, self.broker.server_log])
        return [line for line in text.splitlines() if DROPPED_MARKERS in line]

    def stop(self) -> None:
        try:
            self.broker.stop()
        finally:
            self.controller.stop()

    def __enter__(self) -> SplitKafkaCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _read_from(path: Path, offset: int) -> str:
    """The log text past ``offset`` (all of it when the log rolled over and is now shorter)."""
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(offset if offset <= size else 0)
            return handle.read().decode(errors="replace")
    except OSError:
        return ""
