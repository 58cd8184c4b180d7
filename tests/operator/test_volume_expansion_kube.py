"""A larger state.size on the real control plane: claims of an expandable StorageClass grow in place,
the StatefulSet is replaced so later replicas get the new size, and a class that does not allow
expansion ends in a status condition naming it - until the class is fixed, when the claims grow after all.

The claims bind for real: kube-controller-manager's PV binder binds them to static PersistentVolumes of
the test's own StorageClasses (pre-bound by claimRef), and the API server's PersistentVolumeClaimResize
admission is what accepts or refuses the operator's resize. There is no storage driver, so a claim's
`status.capacity` stays as it was: the test checks what the operator asks for (the claims' requests).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.operator_env import wait_for
from tests.operator.test_reconcile_kube import Env, operator_env

pytestmark = [pytest.mark.kube, pytest.mark.kafka, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def crd_installed(kube_cluster: Any) -> Any:
    from tests.e2e.operator_env import install_crd

    install_crd(kube_cluster)
    return kube_cluster


@pytest.fixture
def env(crd_installed: Any, kafka_bootstrap: str, kafka_topics: Any) -> Iterator[Env]:
    yield from operator_env(crd_installed, kafka_bootstrap, kafka_topics)


class Storage:
    """Cluster-scoped StorageClasses and PersistentVolumes for one test, removed afterwards."""

    def __init__(self, api: Any, namespace: str) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api)
        self.storage = client.StorageV1Api(api)
        self.namespace = namespace
        self.suffix = uuid.uuid4().hex[:6]
        self.classes: list[str] = []
        self.volumes: list[str] = []

    def storage_class(self, name: str, *, expandable: bool) -> str:
        full = f"{name}-{self.suffix}"
        body = {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": full},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "Immediate",
            "allowVolumeExpansion": expandable,
        }
        self.storage.create_storage_class(body)
        self.classes.append(full)
        return full

    def volume_for(self, claim: str, storage_class: str) -> None:
        """A 10Gi volume of `storage_class` reserved for the claim of that name (claimRef)."""
        name = f"pv-{claim}-{self.suffix}"
        body = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": storage_class,
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": f"/tmp/{name}"},
                "claimRef": {"namespace": self.namespace, "name": claim},
            },
        }
        self.core.create_persistent_volume(body)
        self.volumes.append(name)

    def close(self) -> None:
        for name in self.volumes:
            self.core.delete_persistent_volume(name)
        for name in self.classes:
            self.storage.delete_storage_class(name)


def _claims(env: Env, app: str) -> dict[str, Any]:
    items = env.core.list_namespaced_persistent_volume_claim(env.namespace).items
    return {c.metadata.name: c for c in items if c.metadata.name.startswith(f"state-{app}-")}


def _requests(env: Env, app: str) -> dict[str, str]:
    return {n: c.spec.resources.requests["storage"] for n, c in _claims(env, app).items()}


def _template_size(env: Env, app: str) -> str:
    sts = env.apps.read_namespaced_stateful_set(app, env.namespace)
    return str(sts.spec.volume_claim_templates[0].spec.resources.requests["storage"])


def test_state_size_growth_expands_claims_the_storage_class_allows(env: Env) -> None:
    storage = Storage(env.api, env.namespace)
    try:
        grow = storage.storage_class("kf-grow", expandable=True)
        fixed = storage.storage_class("kf-fixed", expandable=False)
        for claim in ("state-big-0", "state-big-1"):
            storage.volume_for(claim, grow)
        storage.volume_for("state-small-0", fixed)
        env.create(
            "big", env.spec(f"big-{uuid.uuid4().hex[:6]}", replicas=2, state={"storageClassName": grow})
        )
        env.create("small", env.spec(f"sm-{uuid.uuid4().hex[:6]}", state={"storageClassName": fixed}))
        env.wait_running("big", 2)
        env.wait_running("small", 1)

        def bound() -> bool:
            claims = {**_claims(env, "big"), **_claims(env, "small")}
            return len(claims) == 3 and all(c.status.phase == "Bound" for c in claims.values())

        wait_for("the three state claims bound to their volumes", bound)
        uids = {n: c.metadata.uid for n, c in _claims(env, "big").items()}

        env.patch_spec("big", {"state": {"size": "2Gi"}})
        env.patch_spec("small", {"state": {"size": "3Gi"}})

        wait_for(
            "big's claims requesting 2Gi",
            lambda: _requests(env, "big") == {"state-big-0": "2Gi", "state-big-1": "2Gi"},
        )
        assert {n: c.metadata.uid for n, c in _claims(env, "big").items()} == uids, "resized, not replaced"
        wait_for("big's StatefulSet with a 2Gi claim template", lambda: _template_size(env, "big") == "2Gi")
        env.wait_running("big", 2)
        assert env.condition("big", "VolumesMatchSpec")["status"] == "True"
        assert {"VolumeExpansionRequested", "RecreatingStatefulSet"} <= env.event_reasons("big")

        cond = wait_for(
            "small's claim reported: its class does not allow expansion",
            lambda: (
                (c := env.condition("small", "VolumesMatchSpec")).get("reason") == "VolumeExpansionNotAllowed"
                and c
            ),
        )
        assert cond["status"] == "False"
        assert f"StorageClass '{fixed}' does not allow volume expansion" in cond["message"]
        assert "claims state-small-0 keep 1Gi" in cond["message"]
        # the pass that first reports the claim is the one that recreated the StatefulSet (Pending until
        # the StatefulSet reports its pods); the app then runs on, only the claim is smaller
        env.wait_running("small", 1)
        assert env.condition("small", "VolumesMatchSpec")["status"] == "False"
        assert _requests(env, "small") == {"state-small-0": "1Gi"}
        assert _template_size(env, "small") == "3Gi", "the template follows the spec (documented choice)"
        assert "VolumeExpansionNotAllowed" in env.event_reasons("small")

        # A replica added later gets a claim of the new size from the new template.
        env.patch_spec("big", {"replicas": 3})
        wait_for("state-big-2 created at 2Gi", lambda: _requests(env, "big").get("state-big-2") == "2Gi")

        # The class is fixed: the next periodic pass grows the claim, and the condition clears.
        storage.storage.patch_storage_class(fixed, {"allowVolumeExpansion": True})
        wait_for("small's claim requesting 3Gi", lambda: _requests(env, "small") == {"state-small-0": "3Gi"})
        wait_for(
            "VolumesMatchSpec True again",
            lambda: env.condition("small", "VolumesMatchSpec").get("status") == "True",
            timeout=30,
        )
    finally:
        storage.close()
