"""Pytest fixtures for the real one-node Kubernetes (tests/harness/realnode).

`real_node` is session-scoped and lazy: the node starts when the first real-node test asks for it (on a
fresh machine after building its binaries and `make images`), and is torn down at the end of the session,
the host put back as it was. A node already running (`make cluster-up`) is used as it is and left running.
One node per machine: tests share it and each gets namespaces of its own.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from kubernetes import client


@dataclass(frozen=True)
class RealNode:
    """What a test gets: the admin kubeconfig, the API server URL and the bridge address."""

    kubeconfig: Path
    server: str
    host_ip: str
    kubectl_path: Path

    def kubectl(self, *args: str, check: bool = True, input: str | None = None, timeout: float = 120) -> str:
        argv = [str(self.kubectl_path), f"--kubeconfig={self.kubeconfig}", *args]
        p = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout, check=False)
        if check and p.returncode:
            raise RuntimeError(f"kubectl {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}")
        return p.stdout

    def get(self, kind: str, name: str, namespace: str) -> dict[str, Any]:
        scope = ["-n", namespace] if namespace else []
        out: dict[str, Any] = json.loads(self.kubectl("get", kind, name, *scope, "-o", "json"))
        return out

    def api_client(self) -> client.ApiClient:
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(self.kubeconfig), client_configuration=configuration
        )
        return client.ApiClient(configuration)

    def create_namespace(self, prefix: str = "t", labels: dict[str, str] | None = None) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        meta = {"name": name, "labels": labels or {}}
        self.kubectl(
            "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
        )
        return name


@contextlib.contextmanager
def node_session() -> Iterator[RealNode]:
    """A running node with the project's current images: the user's own (`make cluster-up`, left running)
    or one started for this session and torn down at its end, the host checked to be as before."""
    from tests.harness import images
    from tests.harness.realnode import binaries, host, node
    from tests.harness.realnode import settings as s
    from tests.harness.realnode.images_store import import_images

    def handle(info: dict[str, Any]) -> RealNode:
        return RealNode(Path(info["kubeconfig"]), info["server"], info["host_ip"], s.BIN / "kubectl")

    names = list(images.ensure_images(list(images.ALL_IMAGES)))
    info = node.running_info()
    if info is not None:  # the user's node: its images brought up to date, the node left running
        import_images(names, node.log)
        yield handle(info)
        return
    binaries.build()
    before = host.snapshot()
    info = node.start(names, attached=True)
    try:
        yield handle(info)
    finally:
        node.teardown()
    # the node's promise: the host after teardown is the host before start (an error of the session if not)
    changed = host.compare(before, host.snapshot())
    assert not changed, "the real node left the host changed: " + "; ".join(changed)


@pytest.fixture(scope="session")
def real_node() -> Iterator[RealNode]:
    with node_session() as handle:
        yield handle
