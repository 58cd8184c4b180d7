"""The local control plane behaves like a real cluster for what the operator relies on.

Controllers (StatefulSet, garbage collector) act on objects, CRD schemas are enforced by the server, and
the fake kubelet runs a StatefulSet's pods as local processes and stops them when the set scales down.
"""

from __future__ import annotations

import http.server
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.harness.fake_kubelet import (
    FakeKubelet,
    ProcessHandle,
    container_env,
    http_readiness,
    sequential_pod_ips,
)
from tests.harness.kube_control_plane import free_port
from tests.harness.kube_fixtures import KubeCluster

pytestmark = [pytest.mark.kube, pytest.mark.timeout(900)]

T = TypeVar("T")


def eventually(probe: Callable[[], T | None], timeout: float = 60.0, what: str = "condition") -> T:
    """Polls until `probe` returns something truthy; controllers converge asynchronously."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = probe()
        if result:
            return result
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


@pytest.fixture
def api(kube_cluster: KubeCluster) -> Iterator[client.ApiClient]:
    with kube_cluster.api_client() as api_client:
        yield api_client


@pytest.fixture
def namespace(kube_cluster: KubeCluster, api: client.ApiClient) -> Iterator[str]:
    name = kube_cluster.create_namespace("kube")
    yield name
    client.CoreV1Api(api).delete_namespace(name)


def statefulset(
    name: str, replicas: int, policy: str = "OrderedReady", env: list[client.V1EnvVar] | None = None
) -> client.V1StatefulSet:
    labels = {"app": name}
    # What the fake kubelet's launcher in these tests runs: it records its env, then sleeps until stopped.
    script = 'printf "%s %s" "$POD_NAME" "$GREETING" > "$OUT_DIR/$POD_NAME.env"; exec sleep 3600'
    command = ["sh", "-c", script] if env else ["sleep", "3600"]
    container = client.V1Container(name="main", image="kappaflow:test", command=command, env=env)
    return client.V1StatefulSet(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1StatefulSetSpec(
            replicas=replicas,
            service_name=name,
            pod_management_policy=policy,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(containers=[container], termination_grace_period_seconds=5),
            ),
        ),
    )


def pod_names(core: client.CoreV1Api, namespace: str, app: str) -> set[str]:
    return {p.metadata.name for p in core.list_namespaced_pod(namespace, label_selector=f"app={app}").items}


def test_statefulset_creates_pods_and_garbage_collection_removes_them(
    api: client.ApiClient, namespace: str
) -> None:
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    apps.create_namespaced_stateful_set(namespace, statefulset("web", 2, policy="Parallel"))

    eventually(lambda: pod_names(core, namespace, "web") == {"web-0", "web-1"}, what="StatefulSet pods")
    pod = core.read_namespaced_pod("web-0", namespace)
    owners = [(o.kind, o.name, o.controller) for o in pod.metadata.owner_references]
    assert owners == [("StatefulSet", "web", True)]
    assert pod.spec.node_name is None  # no scheduler: pods wait for the fake kubelet to bind them

    apps.delete_namespaced_stateful_set("web", namespace, propagation_policy="Background")
    eventually(lambda: not pod_names(core, namespace, "web"), what="garbage collection of the pods")


def test_crd_schema_is_enforced_by_the_server(api: client.ApiClient, namespace: str) -> None:
    ext, custom = client.ApiextensionsV1Api(api), client.CustomObjectsApi(api)
    group, plural = "test.kappaflow.io", f"widgets{namespace.replace('-', '')}"
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["replicas"],
                "properties": {"replicas": {"type": "integer", "minimum": 1}},
            }
        },
    }
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": plural[:-1], "kind": "Widget" + namespace[-8:]},
            "versions": [
                {"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}
            ],
        },
    }
    ext.create_custom_resource_definition(crd)
    try:

        def established() -> bool:
            status = ext.read_custom_resource_definition(f"{plural}.{group}").status
            return any(c.type == "Established" and c.status == "True" for c in status.conditions or [])

        eventually(established, what="CRD Established")
        kind = crd["spec"]["names"]["kind"]

        def widget(name: str, replicas: Any) -> dict[str, Any]:
            return {
                "apiVersion": f"{group}/v1",
                "kind": kind,
                "metadata": {"name": name},
                "spec": {"replicas": replicas},
            }

        def create(body: dict[str, Any]) -> Any:
            return custom.create_namespaced_custom_object(group, "v1", namespace, plural, body)

        # Discovery of a fresh CRD can lag a moment behind Established; retry until the valid one lands.
        eventually(lambda: _succeeds(lambda: create(widget("good", 3))), what="valid custom object accepted")
        for bad in (0, "three"):
            with pytest.raises(ApiException) as rejected:
                create(widget(f"bad-{bad}", bad))
            assert rejected.value.status == 422
            assert "spec.replicas" in str(rejected.value.body)
        names = [
            o["metadata"]["name"]
            for o in custom.list_namespaced_custom_object(group, "v1", namespace, plural)["items"]
        ]
        assert names == ["good"]
    finally:
        ext.delete_custom_resource_definition(f"{plural}.{group}")


def _succeeds(action: Callable[[], object]) -> bool:
    try:
        action()
    except ApiException as e:
        if e.status != 404:
            raise
        return False
    return True


def test_fake_kubelet_runs_statefulset_pods_and_stops_them_on_scale_down(
    api: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="greeting"), data={"text": "hello"})
    )
    env = [
        client.V1EnvVar(name="OUT_DIR", value=str(tmp_path)),
        _env_from("POD_NAME", field_ref=client.V1ObjectFieldSelector(field_path="metadata.name")),
        _env_from("GREETING", config_map_key_ref=client.V1ConfigMapKeySelector(name="greeting", key="text")),
    ]
    processes: dict[str, subprocess.Popen[bytes]] = {}

    def launch(pod: client.V1Pod) -> ProcessHandle:
        proc = subprocess.Popen(
            pod.spec.containers[0].command, env=container_env(core, pod), start_new_session=True
        )
        processes[pod.metadata.name] = proc
        return proc

    node = f"node-{namespace}"
    with FakeKubelet(api, namespace, launch, node_name=node, max_grace_seconds=5) as kubelet:
        apps.create_namespaced_stateful_set(namespace, statefulset("app", 2, env=env))

        def all_ready() -> bool:
            return apps.read_namespaced_stateful_set("app", namespace).status.ready_replicas == 2

        eventually(all_ready, what="2 ready replicas")  # OrderedReady: app-1 only after app-0 is Ready
        for name in ("app-0", "app-1"):
            pod = core.read_namespaced_pod(name, namespace)
            assert pod.spec.node_name == node
            assert pod.status.phase == "Running"
            assert pod.status.pod_ip == "127.0.0.1"
            assert {c.type: c.status for c in pod.status.conditions}["Ready"] == "True"
            assert processes[name].poll() is None
            recorded = eventually(lambda n=name: _read(tmp_path / f"{n}.env"), what="the pod's env file")
            assert recorded == f"{name} hello"
        assert {c.type: c.status for c in core.read_node(node).status.conditions}["Ready"] == "True"

        apps.patch_namespaced_stateful_set_scale(
            namespace=namespace,
            name="app",
            body={"spec": {"replicas": 1}},
            _content_type="application/merge-patch+json",
        )
        eventually(lambda: pod_names(core, namespace, "app") == {"app-0"}, what="app-1 deleted")
        assert processes["app-1"].poll() == -signal.SIGTERM  # stopped before the deletion was confirmed
        assert processes["app-0"].poll() is None
        assert kubelet.errors == []
    assert processes["app-0"].poll() == -signal.SIGTERM  # stop() stops everything it launched
    core.delete_node(node)


def test_fake_kubelet_pod_ips_give_services_endpoints(api: client.ApiClient, namespace: str) -> None:
    core, discovery = client.CoreV1Api(api), client.DiscoveryV1Api(api)
    core.create_namespaced_service(
        namespace,
        client.V1Service(
            metadata=client.V1ObjectMeta(name="web"),
            spec=client.V1ServiceSpec(
                cluster_ip="None", selector={"app": "web"}, ports=[client.V1ServicePort(port=8080)]
            ),
        ),
    )
    node = f"node-{namespace}"

    def launch(pod: client.V1Pod) -> ProcessHandle:
        return subprocess.Popen(["sleep", "3600"], start_new_session=True)

    with FakeKubelet(api, namespace, launch, node_name=node, pod_ip=sequential_pod_ips("10.244.0.0/24")):
        client.AppsV1Api(api).create_namespaced_stateful_set(
            namespace, statefulset("web", 2, policy="Parallel")
        )

        def ready_endpoints() -> set[tuple[str, str]]:
            slices = discovery.list_namespaced_endpoint_slice(
                namespace, label_selector="kubernetes.io/service-name=web"
            )
            found = {
                (e.target_ref.name, e.addresses[0])
                for s in slices.items
                for e in s.endpoints or []
                if e.conditions.ready
            }
            return found if len(found) == 2 else set()

        endpoints = eventually(ready_endpoints, what="two ready endpoints")
        assert {name for name, _ in endpoints} == {"web-0", "web-1"}
        assert {ip for _, ip in endpoints} <= {"10.244.0.1", "10.244.0.2"}
    core.delete_node(node)


def test_fake_kubelet_ready_condition_follows_the_http_readiness_probe(
    api: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api)
    port = free_port()  # where the "pod" really listens; the manifest says container port 8080
    container = client.V1Container(
        name="main",
        image="kappaflow:test",
        ports=[client.V1ContainerPort(name="http", container_port=8080)],
        readiness_probe=client.V1Probe(http_get=client.V1HTTPGetAction(path="/ready", port="http")),
    )
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="probed"), spec=client.V1PodSpec(containers=[container])
    )
    mapped: list[int] = []

    def local_port(_pod: client.V1Pod, container_port: int) -> int:
        mapped.append(container_port)
        return port

    def launch(_pod: client.V1Pod) -> ProcessHandle:
        return subprocess.Popen(["sleep", "3600"], start_new_session=True)

    def ready() -> str | None:
        status = core.read_namespaced_pod("probed", namespace).status
        conditions = {c.type: c.status for c in status.conditions or []}
        return conditions.get("Ready") if status.phase == "Running" else None

    node = f"node-{namespace}"
    with FakeKubelet(api, namespace, launch, readiness=http_readiness(local_port), node_name=node):
        core.create_namespaced_pod(namespace, pod)
        assert eventually(ready, what="pod Running") == "False"  # nothing listens yet
        server = http.server.HTTPServer(("127.0.0.1", port), _ReadyHandler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            eventually(lambda: ready() == "True", what="Ready once the probe answers")
        finally:
            server.shutdown()
            server.server_close()
        eventually(lambda: ready() == "False", what="not Ready once the probe fails")
        assert set(mapped) == {8080}  # the named port was resolved through the container's ports
    core.delete_node(node)


class _ReadyHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/ready" else 404)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _env_from(name: str, **source: Any) -> client.V1EnvVar:
    return client.V1EnvVar(name=name, value_from=client.V1EnvVarSource(**source))


def _read(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        (None, "BestEffort"),
        (client.V1ResourceRequirements(requests={"cpu": "250m"}, limits={"memory": "64Mi"}), "Burstable"),
        (client.V1ResourceRequirements(limits={"cpu": "1", "memory": "64Mi"}), "Guaranteed"),
    ],
)
def test_fake_kubelet_reports_the_qos_class_the_api_server_assigned(
    api: client.ApiClient, namespace: str, resources: client.V1ResourceRequirements | None, expected: str
) -> None:
    """The API server fixes status.qosClass at creation and refuses a status update that changes it."""
    core = client.CoreV1Api(api)
    container = client.V1Container(name="main", image="kappaflow:test", resources=resources)
    pod = client.V1Pod(metadata=client.V1ObjectMeta(name="q"), spec=client.V1PodSpec(containers=[container]))
    assert core.create_namespaced_pod(namespace, pod).status.qos_class == expected
    node = f"node-{namespace}"

    def launch(_pod: client.V1Pod) -> ProcessHandle:
        return subprocess.Popen(["sleep", "3600"])

    with FakeKubelet(api, namespace, launch, node_name=node, max_grace_seconds=2) as kubelet:
        eventually(lambda: core.read_namespaced_pod("q", namespace).status.phase == "Running", what="Running")
        assert core.read_namespaced_pod("q", namespace).status.qos_class == expected
        assert kubelet.errors == []
    core.delete_node(node)
