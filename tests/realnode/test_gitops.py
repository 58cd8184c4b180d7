"""GitOps on the real node: Flux's own source- and kustomize-controller (built from their Go modules, run
against the node's API server) apply examples/k8s from a git server on loopback, through a cluster overlay
as a fleet repository would have one. The chart's operator runs the app on real pods with Kafka in the
cluster, and Flux's health check (kstatus over the StreamApp's conditions) says Ready once the app runs, a
pushed replica change rolls it, a pushed image that was never built makes it Failed with the StreamApp
Stalled on the kubelet's pull error, and the fix pushed after it makes it Ready again.

The overlay runs the example's image with `examples.windowed_fraud` under an application id of its own,
so this app never writes the word count output that test_wordcount_lifecycle audits.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.realnode_fixtures import RealNode
from tests.realnode.cluster import ROOT, ClusterKafka, condition, wait_for

pytestmark = [pytest.mark.realnode, pytest.mark.timeout(600)]

EXAMPLE_FILES = ("kustomization.yaml", "kustomizeconfig.yaml", "namespace.yaml", "wordcount-streamapp.yaml")
MISSING_TAG = "0.2.0-never-built"
OVERLAY = """\
# The real node's overlay of the example: another topology of the example image, its own application id.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../../examples/k8s
patches:
  - target:
      kind: StreamApp
      name: wordcount
    patch: |
      - op: replace
        path: /spec/entryPoint
        value: examples.windowed_fraud:build_topology
      - op: replace
        path: /spec/applicationId
        value: {application_id}
      - op: replace
        path: /spec/image
        value: kappaflow-examples:{tag}
      - op: replace
        path: /spec/replicas
        value: {replicas}
"""


@pytest.fixture
def flux(real_node: RealNode, tmp_path: Path) -> Iterator[Any]:
    from tests.harness.flux import FluxControllers, build

    build()
    with FluxControllers(real_node.kubeconfig, tmp_path / "flux") as controllers:
        yield controllers


def _files(application_id: str, tag: str, replicas: int) -> dict[str, str]:
    examples = ROOT / "examples" / "k8s"
    files = {f"examples/k8s/{name}": (examples / name).read_text() for name in EXAMPLE_FILES}
    overlay = OVERLAY.format(application_id=application_id, tag=tag, replicas=replicas)
    return {**files, "clusters/realnode/kustomization.yaml": overlay}


def test_flux_deploys_rolls_fails_and_recovers_the_example(
    real_node: RealNode, cluster_kafka: ClusterKafka, operator_release: str, flux: Any, tmp_path: Path
) -> None:
    from tests.harness.flux import git_repository, kustomization, ready_condition
    from tests.harness.gitserver import GitServer
    from tests.realnode.test_bad_input import cluster_kafka_topics

    cluster_kafka_topics(cluster_kafka)
    suffix = uuid.uuid4().hex[:6]
    flux_ns, target, app_id = f"flux-{suffix}", f"gitops-{suffix}", f"fraud-gitops-{suffix}"
    real_node.kubectl("create", "namespace", flux_ns)

    def kustomization_ready(sha: str, status: str) -> dict[str, Any] | None:
        flux.check_alive()
        obj = real_node.get("kustomization", "examples", flux_ns)
        ready = ready_condition(obj)
        attempted = (obj.get("status") or {}).get("lastAttemptedRevision", "")
        return ready if ready.get("status") == status and attempted.endswith(sha) else None

    def app() -> dict[str, Any]:
        return real_node.get("streamapp", "wordcount", target)

    with GitServer(tmp_path / "git") as git:
        try:
            first = git.push(_files(app_id, "0.1.0", 1), "the example, as the fleet repository holds it")
            source = git_repository("fleet", flux_ns, git.url, interval="5s")
            apply = kustomization(
                "examples",
                flux_ns,
                "fleet",
                "./clusters/realnode",
                interval="5s",
                timeout="4m",
                target_namespace=target,
            )
            for obj in (source, apply):
                real_node.kubectl("apply", "-f", "-", input=json.dumps(obj))
            started = time.monotonic()
            ready = wait_for(
                "Flux Ready: the app runs", lambda: kustomization_ready(first, "True"), 300, interval=1
            )
            print(f"Flux Ready {time.monotonic() - started:.0f}s after the first commit: {ready['message']}")
            assert app()["status"]["phase"] == "Running"
            labels = real_node.get("namespace", target, "")["metadata"]["labels"]
            assert labels["pod-security.kubernetes.io/enforce"] == "restricted"

            scaled = git.push(_files(app_id, "0.1.0", 2), "fraud: 2 replicas")
            wait_for("Flux Ready at 2 replicas", lambda: kustomization_ready(scaled, "True"), 240, interval=1)
            sts = real_node.get("statefulset", "wordcount", target)
            assert sts["spec"]["replicas"] == 2 and sts["status"].get("readyReplicas") == 2, sts["status"]

            pushed = time.monotonic()
            bad = git.push(_files(app_id, MISSING_TAG, 2), f"fraud {MISSING_TAG}")
            failed = wait_for("Flux Failed", lambda: kustomization_ready(bad, "False"), 240, interval=1)
            print(f"Flux Failed {time.monotonic() - pushed:.0f}s after the bad commit: {failed['message']}")
            assert failed["reason"] == "HealthCheckFailed", failed
            assert f"StreamApp/{target}/wordcount" in failed["message"], failed
            stalled = condition(app(), "Stalled")
            assert stalled and stalled["status"] == "True" and stalled["reason"] == "ImagePullFailed", stalled
            assert "127.0.0.1:9" in stalled["message"], "the kubelet's own pull error"

            fixed = git.push(_files(app_id, "0.1.0", 2), "fraud: back on 0.1.0")
            wait_for("Flux Ready after the fix", lambda: kustomization_ready(fixed, "True"), 300, interval=1)
        finally:
            # deleting the Kustomization prunes what it applied (the namespace and the StreamApp)
            real_node.kubectl(
                "delete", "namespace", flux_ns, "--wait=true", "--timeout=120s", check=False, timeout=150
            )
            real_node.kubectl(
                "delete", "namespace", target, "--wait=true", "--timeout=120s", check=False, timeout=150
            )
