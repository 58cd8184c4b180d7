"""The operator's one HTTP client of the app's pods: each pod's own tasks, from its health endpoint.

I/O only; what an answer means is movement.parse_pod_tasks (pure). Why the health endpoint on the
metrics port and not the query server's `/v1/tasks`: see movement.py.

Bounded so a pass never waits long on a pod: one GET per running pod, all at once, each with
`TIMEOUT_S` (the kubelet's default probe timeout is 1 s; a loaded pod gets a little more). A pod that
does not answer is reported with why, and the decision counts what it could not read as unverified.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .movement import HEALTH_PATH, parse_pod_tasks
from .snapshot import PodTasks

TIMEOUT_S = 2.0
#: Pods read at once: a pass over a large app stays within a few timeouts.
PARALLEL = 16
#: An answer larger than this is not a health answer (thousands of tasks fit in far less).
MAX_BYTES = 4 * 1024 * 1024


def _address(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


class PodTasksReader:
    """Reads `GET http://<podIP>:<port>/health/ready` of each running pod (200 and 503 carry the same
    body: a pod warming up is not ready yet)."""

    def __init__(self, timeout_s: float = TIMEOUT_S) -> None:
        self.timeout_s = timeout_s

    def read_one(self, pod: str, ip: str, port: int) -> PodTasks:
        url = f"http://{_address(ip, port)}{HEALTH_PATH}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_s) as response:
                body = response.read(MAX_BYTES)
        except urllib.error.HTTPError as err:  # 503: not ready, the body still lists its tasks
            try:
                body = err.read(MAX_BYTES)
            except OSError as read_err:
                return PodTasks(pod, error=f"HTTP {err.code}, body unreadable: {read_err}")
            if err.code != 503:
                return PodTasks(pod, error=f"HTTP {err.code} from {url}")
        except (OSError, ValueError) as err:  # refused, timed out, reset
            return PodTasks(pod, error=f"{url}: {err}")
        return parse_pod_tasks(pod, body)

    def __call__(self, pods: Sequence[Mapping[str, Any]], port: int) -> list[PodTasks]:
        """The tasks of every pod that runs (phase Running, an IP, not being deleted), by pod name."""
        targets = []
        for pod in pods:
            meta, status = pod.get("metadata") or {}, pod.get("status") or {}
            if meta.get("deletionTimestamp") or status.get("phase") != "Running" or not status.get("podIP"):
                continue
            targets.append((str(meta.get("name")), str(status["podIP"])))
        if not targets:
            return []
        with ThreadPoolExecutor(max_workers=min(PARALLEL, len(targets))) as pool:
            found = list(pool.map(lambda t: self.read_one(t[0], t[1], port), targets))
        return sorted(found, key=lambda p: p.pod)
