"""GitOps with Flux, for real: examples/k8s committed to a git server, applied by Flux's own controllers.

source-controller clones the loopback git server over smart HTTP and packs the revision as an artifact;
kustomize-controller downloads it over loopback, runs kustomize (the example's `images:` reaching the
StreamApp through its kustomizeconfig.yaml) and server-side applies the Namespace and the StreamApp. A
commit that changes the replicas reaches the cluster within the GitRepository's interval. No operator
runs here, so the Kustomization does not `wait`: an app no operator has observed is InProgress to
kstatus (its status defaults to `observedGeneration: 0`), and a health check would rightly wait it out.
tests/gitops/test_flux_health.py runs the operator and reads what Flux's health then says.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.e2e.operator_env import wait_for
from tests.gitops.conftest import example_files

pytestmark = [pytest.mark.kube, pytest.mark.gitops, pytest.mark.timeout(300)]

INTERVAL_S = 5


def test_flux_applies_examples_and_follows_a_commit(
    kube_cluster: Any, flux_objects: Any, git_server: Any, unique: Any
) -> None:
    from kubernetes import client

    from tests.harness.flux import git_repository, kustomization, ready_condition

    files = example_files()
    first = git_server.push(files, "examples/k8s as in the kappaflow repository")
    target = unique("gitops")
    interval = f"{INTERVAL_S}s"
    flux_objects.apply(git_repository("fleet", flux_objects.namespace, git_server.url, interval=interval))
    flux_objects.apply(
        kustomization(
            "examples", flux_objects.namespace, "fleet", "./examples/k8s",
            interval=interval, target_namespace=target, wait=False,
        )
    )  # fmt: skip
    source = flux_objects.wait_revision("GitRepository", "fleet", first)
    assert source["status"]["artifact"]["revision"] == f"main@sha1:{first}"
    applied = flux_objects.wait_revision("Kustomization", "examples", first)
    ready = ready_condition(applied)
    assert (ready.get("status"), ready.get("reason")) == ("True", "ReconciliationSucceeded"), ready

    with kube_cluster.api_client() as api:
        custom = client.CustomObjectsApi(api)
        namespace = client.CoreV1Api(api).read_namespace(target)
        # The Namespace object itself is the example's, renamed by the target namespace.
        assert namespace.metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"
        assert namespace.metadata.labels["kustomize.toolkit.fluxcd.io/name"] == "examples"
        app = custom.get_namespaced_custom_object(
            "kappaflow.io", "v1alpha1", target, "streamapps", "wordcount"
        )
        assert app["spec"]["replicas"] == 2
        assert app["spec"]["image"] == "kappaflow-examples:0.1.0"
        assert app["metadata"]["labels"]["app.kubernetes.io/part-of"] == "kappaflow-examples"

        streamapp = "examples/k8s/wordcount-streamapp.yaml"
        assert "  replicas: 2\n" in files[streamapp]
        second = git_server.push(
            {streamapp: files[streamapp].replace("  replicas: 2\n", "  replicas: 3\n")},
            "wordcount: 3 replicas",
        )
        pushed = time.monotonic()

        def replicas() -> bool:
            obj = custom.get_namespaced_custom_object(
                "kappaflow.io", "v1alpha1", target, "streamapps", "wordcount"
            )
            return bool(obj["spec"]["replicas"] == 3)

        # One GitRepository interval to see the commit, one Kustomization interval to apply it, and
        # the controllers' jitter; a slower path would mean Flux waited for something else.
        wait_for("replicas 3 applied from Git", replicas, timeout=4 * INTERVAL_S + 10, interval=0.2)
        took = time.monotonic() - pushed
        applied = flux_objects.wait_revision("Kustomization", "examples", second, timeout=30)
        assert ready_condition(applied).get("status") == "True"
        print(f"commit -> cluster in {took:.1f}s (interval {interval})")
