"""Pytest fixtures for the local Kubernetes control plane (etcd + kube-apiserver + kube-controller-manager).

`kube_cluster` is session-scoped and lazy: the plane (and, on a fresh machine, the Go build of its
binaries) starts only when the first test asks for it, and stops when the session ends. Set
`KAPPAFLOW_KUBECONFIG` to run the tests against a plane that is already up (e.g. one started with
`python -m tests.harness.kube_control_plane start`) instead of starting another.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from kubernetes import client


@dataclass(frozen=True)
class KubeCluster:
    """What a test gets: the admin kubeconfig and ready-made API clients for it."""

    kubeconfig: Path
    server: str

    def api_client(self) -> client.ApiClient:
        """A fresh `kubernetes.client.ApiClient` with admin (system:masters) credentials."""
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(self.kubeconfig), client_configuration=configuration
        )
        return client.ApiClient(configuration)

    def create_namespace(self, prefix: str = "t") -> str:
        """A uniquely named namespace, so tests sharing the session's cluster never collide."""
        from kubernetes import client

        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        with self.api_client() as api:
            client.CoreV1Api(api).create_namespace(
                client.V1Namespace(metadata=client.V1ObjectMeta(name=name))
            )
        return name


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    external = os.environ.get("KAPPAFLOW_KUBECONFIG")
    if external:
        import yaml

        server = yaml.safe_load(Path(external).read_text())["clusters"][0]["cluster"]["server"]
        yield KubeCluster(Path(external), server)
        return
    from tests.harness.kube_control_plane import LocalControlPlane

    plane = LocalControlPlane(tmp_path_factory.mktemp("kube"), tie_to_parent=True)
    plane.start()
    try:
        yield KubeCluster(plane.kubeconfig, plane.server)
    finally:
        plane.stop()
