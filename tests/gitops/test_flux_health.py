"""What Flux's health says about a StreamApp: kstatus reading the conditions the operator computes.

A Kustomization with `wait: true` health-checks what it applied with kstatus, which knows nothing of
StreamApps: it reads `status.observedGeneration` and the Ready/Reconciling/Stalled conditions
(operator/kappaflow_operator/status.py). Here the operator runs in-process (as tests/e2e does), a fake
kubelet runs the pods as local processes (the describe Job for real, the app's pods idle), and a
cluster overlay in the fleet repository points the example at the test's broker, as a user's overlay
points it at theirs. Flux's Kustomization must then report, in order:

- InProgress while the StreamApp reconciles (Ready Unknown, reason Progressing);
- Ready True once the StreamApp is Running;
- Failed once a commit names an image that cannot be pulled (Ready False, HealthCheckFailed, naming
  the StreamApp and its Stalled message), without waiting out the Kustomization's timeout.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import pytest

from tests.e2e.operator_env import make_launcher, running_operator, wait_for
from tests.gitops.conftest import example_files

pytestmark = [pytest.mark.kube, pytest.mark.kafka, pytest.mark.gitops, pytest.mark.timeout(420)]

INPUT, OUTPUT = "wordcount-input", "wordcount-output"
MISSING_TAG = "0.2.0-not-pushed"

OVERLAY = """\
# The test cluster's overlay of the example: its broker, its application id, one-broker topics.
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
        path: /spec/kafka
        value:
          bootstrapServers: {bootstrap}
          replicationFactor: 1
      - op: replace
        path: /spec/applicationId
        value: {application_id}
      - op: replace
        path: /spec/image
        value: kappaflow-examples:{tag}
"""


def _source_topics(bootstrap: str) -> None:
    """The example's own topic names (the operator creates only internal ones); kept across tests."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.harness.kafka_fixtures import wait_for_topics

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, 2, 1) for t in (INPUT, OUTPUT)]).values():
        with contextlib.suppress(Exception):  # TOPIC_ALREADY_EXISTS from an earlier test
            future.result()
    wait_for_topics(admin, [INPUT, OUTPUT])


def test_flux_health_follows_the_streamapp(
    kube_cluster: Any, kafka_bootstrap: str, flux_objects: Any, git_server: Any, unique: Any
) -> None:
    from kubernetes import client

    from tests.harness.fake_kubelet import FakeKubelet
    from tests.harness.flux import git_repository, kustomization, ready_condition

    _source_topics(kafka_bootstrap)
    target, application_id = unique("gitops"), unique("wordcount")

    def overlay(tag: str) -> dict[str, str]:
        text = OVERLAY.format(bootstrap=kafka_bootstrap, application_id=application_id, tag=tag)
        return {"clusters/test/kustomization.yaml": text}

    first = git_server.push({**example_files(), **overlay("0.1.0")}, "examples/k8s and the test overlay")
    ns = flux_objects.namespace
    with kube_cluster.api_client() as api:
        custom = client.CustomObjectsApi(api)
        kubelet = FakeKubelet(
            api, target, make_launcher(api, INPUT, OUTPUT),
            pullable=lambda ref: not ref.endswith(MISSING_TAG), pull_backoff_seconds=1,
        )  # fmt: skip

        def app_status() -> dict[str, Any]:
            obj = custom.get_namespaced_custom_object(
                "kappaflow.io", "v1alpha1", target, "streamapps", "wordcount"
            )
            return dict(obj.get("status") or {})

        seen: list[tuple[str, str]] = []
        phases: dict[tuple[str, str], set[str]] = {}
        """The StreamApp phases seen while the Kustomization showed each (Ready status, reason)."""

        def ready_at(sha: str, status: str) -> dict[str, Any] | None:
            """Records every (Ready status, reason) the Kustomization shows; the Ready condition once it
            has `status` for revision `sha`."""
            flux_objects.flux.check_alive()
            obj = flux_objects.get("Kustomization", "examples")
            ready = ready_condition(obj)
            state = (ready.get("status", ""), ready.get("reason", ""))
            if ready and (not seen or seen[-1] != state):
                seen.append(state)
            with contextlib.suppress(Exception):  # the StreamApp is not applied yet
                phases.setdefault(state, set()).add(str(app_status().get("phase")))
            attempted = (obj.get("status") or {}).get("lastAttemptedRevision", "")
            return ready if state[0] == status and attempted.endswith(sha) else None

        with kubelet, running_operator(kube_cluster.kubeconfig, target):
            flux_objects.apply(git_repository("fleet", ns, git_server.url, interval="5s"))
            flux_objects.apply(
                kustomization("examples", ns, "fleet", "./clusters/test", interval="5s",
                              timeout="3m", target_namespace=target)
            )  # fmt: skip
            ready = wait_for(
                "Kustomization Ready", lambda: ready_at(first, "True"), timeout=240, interval=0.2
            )
            assert app_status().get("phase") == "Running", app_status()
            assert ("Unknown", "Progressing") in seen, f"never InProgress while the app reconciled: {seen}"
            assert seen.index(("Unknown", "Progressing")) < seen.index(("True", "ReconciliationSucceeded"))
            # Flux was waiting on the StreamApp itself: it was still Pending (or not yet observed).
            assert phases[("Unknown", "Progressing")] - {"Running"}, phases
            assert first in ready["message"], ready

            # A commit naming an image the registry does not have: the pods cannot start, the operator
            # reports Stalled, kstatus says Failed, and Flux fails the health check early.
            pushed = time.monotonic()
            bad = git_server.push(overlay(MISSING_TAG), f"wordcount {MISSING_TAG}")
            failed = wait_for(
                "Kustomization Failed", lambda: ready_at(bad, "False"), timeout=180, interval=0.2
            )
            took = time.monotonic() - pushed
            stalled = next(c for c in app_status()["conditions"] if c["type"] == "Stalled")
            assert stalled["status"] == "True" and stalled["reason"] == "ImagePullFailed", stalled
            assert failed["reason"] == "HealthCheckFailed", failed
            # Flux names the object and kstatus' verdict; the why is the StreamApp's Stalled condition.
            assert f"StreamApp/{target}/wordcount status: 'Failed'" in failed["message"], failed
            assert took < 150, f"Flux waited out its timeout ({took:.0f}s) instead of failing early"
        assert not kubelet.errors, kubelet.errors
    # After the operator's block: kopf's test runner swaps sys.stdout while it runs.
    print(f"Ready transitions: {seen}; StreamApp phases meanwhile: {phases}")
    print(f"Failed {took:.1f}s after the bad commit: {failed['message']}")
