"""Fixtures for the GitOps tier: Flux's controllers and a loopback git server, against `kube_cluster`.

`flux` is session-scoped: the controllers (built once from their Go modules, tests/harness/flux.py)
start when the first GitOps test asks and watch every namespace; each test keeps its Flux objects and
its applied objects in namespaces of its own. `git_server` is one bare repository per test.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.operator_env import ROOT, wait_for

EXAMPLES = ROOT / "examples" / "k8s"
#: What `kubectl apply -k examples/k8s` applies: the Kustomization and what it names (not the Kafka or
#: kind assets next to it, which are separate kustomizations of their own).
EXAMPLE_FILES = ("kustomization.yaml", "kustomizeconfig.yaml", "namespace.yaml", "wordcount-streamapp.yaml")


@pytest.fixture(scope="session")
def flux(kube_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from tests.e2e.operator_env import install_crd
    from tests.harness.flux import FluxControllers

    install_crd(kube_cluster)  # the StreamApp CRD first, as the chart would have installed it
    controllers = FluxControllers(kube_cluster.kubeconfig, tmp_path_factory.mktemp("flux"))
    controllers.start()
    try:
        yield controllers
    finally:
        controllers.stop()


@pytest.fixture
def git_server(tmp_path: Path) -> Iterator[Any]:
    from tests.harness.gitserver import GitServer

    with GitServer(tmp_path / "git") as server:
        yield server


def example_files() -> dict[str, str]:
    """examples/k8s as a user commits it to their fleet repository."""
    return {f"examples/k8s/{name}": (EXAMPLES / name).read_text() for name in EXAMPLE_FILES}


class FluxObjects:
    """Creates and reads the Flux objects of one test (in a namespace of their own), and cleans up."""

    def __init__(self, kube_cluster: Any, flux: Any) -> None:
        from kubernetes import client

        self.api = kube_cluster.api_client()
        self.custom = client.CustomObjectsApi(self.api)
        self.namespace = kube_cluster.create_namespace("flux")
        self.flux = flux
        self.created: list[tuple[str, str, str]] = []

    def apply(self, obj: dict[str, Any]) -> None:
        group, version = obj["apiVersion"].split("/")
        plural = obj["kind"].lower() + "s" if obj["kind"] != "GitRepository" else "gitrepositories"
        obj["metadata"]["namespace"] = self.namespace
        self.custom.create_namespaced_custom_object(group, version, self.namespace, plural, obj)
        self.created.append((group, version, plural))

    def get(self, kind: str, name: str) -> dict[str, Any]:
        from tests.harness.flux import KUSTOMIZE_API, SOURCE_API

        api = SOURCE_API if kind == "GitRepository" else KUSTOMIZE_API
        group, version = api.split("/")
        plural = "gitrepositories" if kind == "GitRepository" else "kustomizations"
        obj: dict[str, Any] = self.custom.get_namespaced_custom_object(
            group, version, self.namespace, plural, name
        )
        return obj

    def wait_revision(self, kind: str, name: str, sha: str, timeout: float = 60.0) -> dict[str, Any]:
        """Until `kind/name` reports `sha` as its applied (Kustomization) or fetched (GitRepository) one."""
        field = "lastAppliedRevision" if kind == "Kustomization" else "artifact"

        def probe() -> dict[str, Any] | None:
            self.flux.check_alive()
            obj = self.get(kind, name)
            status = obj.get("status") or {}
            revision = status.get(field) or {}
            revision = revision.get("revision", "") if isinstance(revision, dict) else revision
            return obj if str(revision).endswith(sha) else None

        try:
            result: dict[str, Any] = wait_for(
                f"{kind} {name} at {sha[:8]}", probe, timeout=timeout, interval=0.2
            )
        except AssertionError as err:
            status = (self.get(kind, name).get("status") or {}).get("conditions")
            logs = {n: self.flux.log(n)[-2000:] for n in ("source-controller", "kustomize-controller")}
            raise AssertionError(f"{err}\nconditions: {status}\ncontroller logs (tail): {logs}") from None
        return result

    def close(self) -> None:
        """Delete the Kustomizations first (prune removes what they applied), then the sources."""
        from kubernetes.client.exceptions import ApiException

        for group, version, plural in sorted(set(self.created), key=lambda c: c[2] != "kustomizations"):
            with contextlib.suppress(ApiException):
                self.custom.delete_collection_namespaced_custom_object(group, version, self.namespace, plural)
        self.api.close()


@pytest.fixture
def flux_objects(kube_cluster: Any, flux: Any) -> Iterator[FluxObjects]:
    objects = FluxObjects(kube_cluster, flux)
    try:
        yield objects
    finally:
        objects.close()


@pytest.fixture
def unique() -> Callable[[str], str]:
    return lambda prefix: f"{prefix}-{uuid.uuid4().hex[:8]}"
