"""The operator's process-wide context: the clients every handler works with, per-app locks, and the
deduplication of events. Its own module, so the handlers' modules can name it without importing the
reconcile loop that calls them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .admins import KafkaAdmins
from .effects import RETRY_S as RETRY_S  # where the handlers' modules and tests look for it
from .k8s import Kube
from .kafka import KafkaAdmin
from .pod_tasks import PodTasksReader
from .snapshot import PodTasks

# An event with the same object, type, reason and message is posted again only after this long.
EVENT_REPEAT_S = 600.0
KafkaFactory = Callable[..., KafkaAdmin]
#: (the app's pods, the metrics port) -> each running pod's own tasks (pod_tasks.py).
PodTasksRead = Callable[[Sequence[Mapping[str, Any]], int], list[PodTasks]]


@dataclass
class Context:
    """Process-wide clients, built once at start-up (kopf's memo)."""

    kube: Kube
    kafka_factory: KafkaFactory
    locks: dict[str, threading.Lock] = field(default_factory=dict)
    posted: dict[tuple[str, str, str, str], float] = field(default_factory=dict)
    """Events posted recently, for deduplication: a pass every few seconds must not repeat them."""
    read_pod_tasks: PodTasksRead = field(default_factory=PodTasksReader)
    """The pods' HTTP client (warm-ups, standby lags); the only code that talks to the app's pods."""

    def close(self) -> None:
        """Release the Kafka clients and the API client (kopf's cleanup)."""
        if isinstance(self.kafka_factory, KafkaAdmins):
            self.kafka_factory.close()
        self.kube.close()

    def lock(self, namespace: str, name: str) -> threading.Lock:
        """kopf runs timers beside event handlers: one pass per object at a time keeps status coherent."""
        return self.locks.setdefault(f"{namespace}/{name}", threading.Lock())

    def event(self, body: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Post an event on the StreamApp unless the same one was posted within EVENT_REPEAT_S."""
        key = (str(body["metadata"].get("uid")), type_, reason, message)
        last = self.posted.get(key)
        clock = time.monotonic()
        if last is not None and clock - last < EVENT_REPEAT_S:
            return
        self.posted[key] = clock
        if len(self.posted) > 4096:  # forget the oldest half; a repeat after that is harmless
            for old in sorted(self.posted, key=self.posted.__getitem__)[:2048]:
                del self.posted[old]
        self.kube.event(body, type_, reason, message)
