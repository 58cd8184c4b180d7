"""A kubelet stand-in that runs Pods as local processes, for end-to-end tests on the local control plane.

The test control plane has no scheduler and no kubelet, so Pods would stay Pending forever. `FakeKubelet`
plays both parts for one namespace: it registers a Ready Node, binds unscheduled Pods to it through the
`pods/binding` subresource (exactly what kube-scheduler does), starts each bound Pod with a user-supplied
`launcher(pod) -> handle` (e.g. `kappaflow run` as a subprocess with the Pod's env), and reports status the
way a kubelet does: phase Running, podIP 127.0.0.1 (or one from `sequential_pod_ips`, where a test needs
Service endpoints), and a Ready condition from a user-supplied probe.

Images: a test says which image references exist (`pullable`, default all). A pod with one that does
not is never started: it stays Pending with its containers waiting in `ErrImagePull`, then
`ImagePullBackOff`, with the messages a kubelet writes, until its image is one that exists
(`image_pull.py`).

Deletion follows the real protocol: deleting a bound Pod only sets `deletionTimestamp`; the kubelet stops
the containers (SIGTERM, SIGKILL after the grace period) and then confirms by deleting the Pod with
`gracePeriodSeconds=0`, which is when the API object disappears and the StatefulSet controller moves on.

A watch on the namespace wakes the reconcile loop; the loop also resyncs every `resync` seconds, which
is what drives readiness probing and notices processes that exited.

Where it stays, now that a real node runs the project's images (tests/harness/realnode, tests/realnode):
only where a real node cannot produce the case, or not within a test's time. A Job pod that hangs until
a deadline the test shortens, a describe Job that succeeds while the app's pod crashes at once with a
test-chosen exit, a sidecar image "missing" from a registry that must also hold its fixed tag, the
reprocessing runs whose Spark pods the tests replace, and scores of status branches in seconds each
(tests/operator/test_failures_kube.py, test_reconcile_kube.py, tests/spark/test_operator_reprocess.py,
tests/e2e/test_operator_e2e.py's reset). The real-node tier covers the rest on real containers:
admission, pulls, probes, volumes, crash loops, SIGKILL, scaling, rolling upgrades and the example
under PodSecurity `restricted` (it replaced the stand-in's scaling/rolling and restricted-example tests).
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import ipaddress
import re
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from tests.harness.image_pull import Pullable, PullFailure, every_image, missing_images, pending_status


class ProcessHandle(Protocol):
    """What a launcher returns; `subprocess.Popen` satisfies it."""

    def poll(self) -> int | None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...
    def wait(self, timeout: float | None = None) -> int: ...


Launcher = Callable[[client.V1Pod], ProcessHandle]
Readiness = Callable[[client.V1Pod, ProcessHandle], bool]

POD_IP = "127.0.0.1"
PodIP = Callable[[Any], str]
# Strategic merge patch: conditions merge by type, as a kubelet's updates do. (The client's default for a
# dict body would be a JSON patch, which wants a list of operations.)
SMP = "application/strategic-merge-patch+json"


def process_alive(_pod: client.V1Pod, handle: ProcessHandle) -> bool:
    """The default readiness probe: ready while the process runs."""
    return handle.poll() is None


def http_readiness(local_port: Callable[[client.V1Pod, int], int], timeout: float = 1.0) -> Readiness:
    """A probe that runs the pod's own `readinessProbe.httpGet` against 127.0.0.1.

    Every pod shares 127.0.0.1, so `local_port(pod, container_port)` maps the port the manifest names to
    the port that pod's process actually listens on. Pods without an httpGet probe are ready while alive.
    """

    def probe(pod: Any, handle: ProcessHandle) -> bool:
        if handle.poll() is not None:
            return False
        for container in pod.spec.containers:
            http = container.readiness_probe.http_get if container.readiness_probe else None
            if http is None:
                continue
            port = http.port
            if isinstance(port, str) and not port.isdigit():
                port = next(p.container_port for p in container.ports or [] if p.name == port)
            url = f"http://127.0.0.1:{local_port(pod, int(port))}{http.path or '/'}"
            try:
                with urllib.request.urlopen(url, timeout=timeout) as resp:
                    if not 200 <= resp.status < 400:
                        return False
            except OSError:
                return False
        return True

    return probe


def sequential_pod_ips(network: str = "10.244.0.0/16") -> PodIP:
    """Gives each pod its own address from `network`, as a CNI would.

    Why not always 127.0.0.1: the API server refuses loopback addresses in EndpointSlices and Endpoints,
    so with the default the endpoint controllers keep retrying and Services get no endpoints. Use this
    where a test needs Service endpoints; the addresses are not routable, so reach the processes through
    the launcher's own port mapping.
    """
    hosts = ipaddress.ip_network(network).hosts()
    assigned: dict[str, str] = {}
    lock = threading.Lock()

    def pod_ip(pod: Any) -> str:
        with lock:
            uid = pod.metadata.uid
            if uid not in assigned:
                assigned[uid] = str(next(hosts))
            return assigned[uid]

    return pod_ip


def container_env(
    core: client.CoreV1Api, pod: Any, container: str | None = None, pod_ip: str = POD_IP
) -> dict[str, str]:
    """The environment a kubelet would give `container` (default: the first one) of a bound pod.

    Resolves `envFrom` and `env` in the kubelet's order (later wins): literal values with `$(VAR)`
    references, the downward API (`fieldRef`: name, namespace, uid, labels/annotations, node name,
    pod/host IP, service account) and ConfigMap/Secret keys read from the API. Launchers use it to start
    the pod's process with the env the operator rendered, so the e2e test checks the real manifest.
    """
    spec = next(c for c in pod.spec.containers if container is None or c.name == container)
    ns = pod.metadata.namespace
    # A kubelet gives every container the `kubernetes` Service's address; with no kube-proxy here, that
    # is the API server's own address (pods reach it like the test does).
    server = urllib.parse.urlsplit(core.api_client.configuration.host)
    env: dict[str, str] = {
        "KUBERNETES_SERVICE_HOST": server.hostname or POD_IP,
        "KUBERNETES_SERVICE_PORT": str(server.port or 443),
    }

    def config_map(name: str) -> dict[str, str]:
        return dict(core.read_namespaced_config_map(name, ns).data or {})

    def secret(name: str) -> dict[str, str]:
        data = core.read_namespaced_secret(name, ns).data or {}
        return {k: base64.b64decode(v).decode() for k, v in data.items()}

    for source in spec.env_from or []:
        values = (
            config_map(source.config_map_ref.name)
            if source.config_map_ref
            else secret(source.secret_ref.name)
        )
        env.update({f"{source.prefix or ''}{k}": v for k, v in values.items()})
    fields = {
        "metadata.name": pod.metadata.name,
        "metadata.namespace": ns,
        "metadata.uid": pod.metadata.uid,
        "spec.nodeName": pod.spec.node_name or "",
        "spec.serviceAccountName": pod.spec.service_account_name or "",
        "status.podIP": pod_ip,
        "status.hostIP": POD_IP,
    }
    for var in spec.env or []:
        ref = var.value_from
        if ref is None:
            env[var.name] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), var.value or "")
        elif ref.field_ref is not None:
            path = ref.field_ref.field_path
            if match := re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path):
                env[var.name] = (getattr(pod.metadata, match.group(1)) or {}).get(match.group(2), "")
            else:
                env[var.name] = fields[path]
        elif ref.config_map_key_ref is not None:
            env[var.name] = config_map(ref.config_map_key_ref.name)[ref.config_map_key_ref.key]
        elif ref.secret_key_ref is not None:
            env[var.name] = secret(ref.secret_key_ref.name)[ref.secret_key_ref.key]
    return env


@dataclass
class _Running:
    handle: ProcessHandle
    started: dt.datetime
    restarts: int = 0
    reported: dict[str, Any] = field(default_factory=dict)
    stopping: bool = False
    backoff_until: dt.datetime | None = None
    """Set after a crash: until then the container waits in CrashLoopBackOff, as a kubelet reports it."""
    last_exit: int | None = None


class FakeKubelet:
    """Binds, runs and reports the Pods of one namespace; `start()`/`stop()` run the loop in threads."""

    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str,
        launcher: Launcher,
        readiness: Readiness = process_alive,
        node_name: str = "kappaflow-fake-node",
        max_grace_seconds: float = 10.0,
        resync: float = 0.5,
        pod_ip: str | PodIP = POD_IP,
        crash_backoff_seconds: float = 0.0,
        pullable: Pullable = every_image,
        pull_backoff_seconds: float = 10.0,
    ) -> None:
        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace
        self.launcher = launcher
        self.readiness = readiness
        self.node_name = node_name
        self.max_grace_seconds = max_grace_seconds
        self.resync = resync
        self.pod_ip = pod_ip
        self.crash_backoff_seconds = crash_backoff_seconds
        """Like the kubelet's 10s doubling back-off (capped at 5 minutes); 0 restarts at once."""
        self.pullable = pullable
        """Which image references exist; a pod with another one waits in ErrImagePull (image_pull.py)."""
        self.pull_backoff_seconds = pull_backoff_seconds
        self.running: dict[str, _Running] = {}  # pod uid -> process
        self.pull_failures: dict[str, PullFailure] = {}  # pod uid -> pulls of a pod not started
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._kick = threading.Event()
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        self._watch: watch.Watch | None = None
        """The watch under way, so `stop()` can cut it instead of waiting out its 2 s server timeout."""

    # ---- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> FakeKubelet:
        self.register_node()
        self._stopped.clear()
        for target in (self._watch_loop, self._reconcile_loop):
            thread = threading.Thread(target=target, name=f"fake-kubelet-{target.__name__}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, delete_pods: bool = True) -> None:
        """Stops the loops, then every process it launched.

        With `delete_pods` the Pods bound to this node are then force-deleted, so a namespace deleted
        after the test does not hang on Pods no kubelet will ever confirm; without it they stay, as on a
        node that died (which is what a node-failure test wants).
        """
        self._stopped.set()
        self._kick.set()
        current = self._watch
        if current is not None:
            current.stop()  # type: ignore[no-untyped-call]
        for thread in self._threads:
            thread.join(timeout=10)
        self._threads.clear()
        with self._lock:
            running = list(self.running.values())
            self.running.clear()
        for proc in running:
            self._terminate(proc.handle, self.max_grace_seconds)
        if delete_pods:
            selector = f"spec.nodeName={self.node_name}"
            pods: list[Any] = self.core.list_namespaced_pod(self.namespace, field_selector=selector).items
            for pod in pods:
                with contextlib.suppress(ApiException):
                    self.core.delete_namespaced_pod(pod.metadata.name, self.namespace, grace_period_seconds=0)

    def __enter__(self) -> FakeKubelet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def register_node(self) -> None:
        """Creates (or adopts) the Node and marks it Ready; no taints, so nothing is kept off it."""
        node = client.V1Node(
            metadata=client.V1ObjectMeta(
                name=self.node_name, labels={"kubernetes.io/hostname": self.node_name}
            )
        )
        try:
            self.core.create_node(node)
        except ApiException as e:
            if e.status != 409:
                raise
        # TaintNodesByCondition adds a not-ready taint at creation; no node controller will lift it.
        self.core.patch_node(self.node_name, {"spec": {"taints": None}}, _content_type=SMP)
        now = _now()
        capacity = {"cpu": "16", "memory": "64Gi", "pods": "110"}
        status = {
            "capacity": capacity,
            "allocatable": capacity,
            "addresses": [
                {"type": "InternalIP", "address": POD_IP},
                {"type": "Hostname", "address": "localhost"},
            ],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "fake kubelet",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                },
            ],
            "nodeInfo": {
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": "",
                "osImage": "local",
                "containerRuntimeVersion": "fake://1",
                "kubeletVersion": "fake",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }
        self.core.patch_node_status(self.node_name, {"status": status}, _content_type=SMP)

    # ---- loops -------------------------------------------------------------------------------------------
    def _watch_loop(self) -> None:
        while not self._stopped.is_set():
            w = watch.Watch()  # type: ignore[no-untyped-call]
            self._watch = w
            if self._stopped.is_set():  # stop() came before this watch was visible to it
                break
            try:
                for _event in w.stream(  # type: ignore[no-untyped-call]
                    self.core.list_namespaced_pod, self.namespace, timeout_seconds=2
                ):
                    self._kick.set()
                    if self._stopped.is_set():
                        break
            except Exception:  # a dropped watch is normal (timeouts, apiserver restarts): resync covers it
                self._stopped.wait(0.5)
            finally:
                w.stop()  # type: ignore[no-untyped-call]

    def _reconcile_loop(self) -> None:
        while not self._stopped.is_set():
            self._kick.wait(self.resync)
            self._kick.clear()
            if self._stopped.is_set():
                return
            try:
                self.reconcile()
            except Exception as e:  # kept for the test to inspect; the loop must survive API hiccups
                self.errors.append(e)
                self._stopped.wait(0.5)

    def reconcile(self) -> None:
        pods: list[Any] = self.core.list_namespaced_pod(self.namespace).items
        seen = set()
        for pod in pods:
            seen.add(pod.metadata.uid)
            if pod.spec.node_name is None:
                if pod.metadata.deletion_timestamp is None:
                    self._bind(pod)
            elif pod.spec.node_name != self.node_name:
                continue
            elif pod.metadata.deletion_timestamp is not None:
                self._delete(pod)
            elif pod.status.phase not in ("Succeeded", "Failed"):
                self._sync(pod)
        with self._lock:
            gone = [uid for uid in self.running if uid not in seen]
            procs = [self.running.pop(uid) for uid in gone]
            for uid in [uid for uid in self.pull_failures if uid not in seen]:
                del self.pull_failures[uid]
        for proc in procs:  # force-deleted behind our back: the containers still have to stop
            self._terminate(proc.handle, 0)

    # ---- per pod -----------------------------------------------------------------------------------------
    def _bind(self, pod: Any) -> None:
        body = client.V1Binding(
            metadata=client.V1ObjectMeta(name=pod.metadata.name, uid=pod.metadata.uid),
            target=client.V1ObjectReference(api_version="v1", kind="Node", name=self.node_name),
        )
        # The generated client cannot deserialize the Status this endpoint returns; skip decoding it.
        self.core.create_namespaced_pod_binding(
            pod.metadata.name, self.namespace, body, _preload_content=False
        )

    def _sync(self, pod: Any) -> None:
        uid = pod.metadata.uid
        with self._lock:
            proc = self.running.get(uid)
        if proc is None and self._waiting_for_images(pod):
            return
        if proc is None:
            proc = _Running(self.launcher(pod), _now_dt())
            with self._lock:
                self.running[uid] = proc
        code = None if proc.backoff_until is not None else proc.handle.poll()
        phase = "Running"
        if proc.backoff_until is not None and _now_dt() >= proc.backoff_until:
            proc.backoff_until = None
            proc.handle = self.launcher(pod)
            proc.restarts += 1
            proc.started = _now_dt()
        elif code is not None:
            policy = pod.spec.restart_policy or "Always"
            if policy == "Always" or (policy == "OnFailure" and code != 0):
                proc.last_exit = code
                if self.crash_backoff_seconds > 0:
                    delay = min(self.crash_backoff_seconds * 2 ** min(proc.restarts, 10), 300.0)
                    proc.backoff_until = _now_dt() + dt.timedelta(seconds=delay)
                else:
                    proc.handle = self.launcher(pod)
                    proc.restarts += 1
                    proc.started = _now_dt()
            else:
                phase = "Succeeded" if code == 0 else "Failed"
        waiting = proc.backoff_until is not None
        ready = phase == "Running" and not waiting and bool(self.readiness(pod, proc.handle))
        ip = self.pod_ip(pod) if callable(self.pod_ip) else self.pod_ip
        status = _pod_status(pod, phase, ready, proc, code, ip)
        if status != proc.reported:
            stamped = _stamp(status, proc.reported)
            self.core.patch_namespaced_pod_status(
                pod.metadata.name, self.namespace, {"status": stamped}, _content_type=SMP
            )
            proc.reported = status
        if phase != "Running":
            with self._lock:
                self.running.pop(uid, None)

    def _waiting_for_images(self, pod: Any) -> bool:
        """True (and the pod's status reported) while an image of a pod not started cannot be pulled."""
        uid = pod.metadata.uid
        if not missing_images(pod, self.pullable):
            self.pull_failures.pop(uid, None)
            return False
        now = _now_dt()
        failure = self.pull_failures.setdefault(uid, PullFailure(started=now, next_attempt=now))
        failure.step(now, self.pull_backoff_seconds)
        ip = self.pod_ip(pod) if callable(self.pod_ip) else self.pod_ip
        status = pending_status(pod, failure, self.pullable, ip, POD_IP)
        if status != failure.reported:
            stamped = _stamp(status, failure.reported)
            self.core.patch_namespaced_pod_status(
                pod.metadata.name, self.namespace, {"status": stamped}, _content_type=SMP
            )
            failure.reported = status
        failure.reported_error = True
        return True

    def _delete(self, pod: Any) -> None:
        uid = pod.metadata.uid
        with self._lock:
            proc = self.running.get(uid)
            if proc is not None and proc.stopping:
                return
            if proc is not None:
                proc.stopping = True
        grace = pod.metadata.deletion_grace_period_seconds
        grace = self.max_grace_seconds if grace is None else min(float(grace), self.max_grace_seconds)

        def finish() -> None:
            if proc is not None:
                self._terminate(proc.handle, grace)
            with contextlib.suppress(ApiException):  # already gone is fine
                self.core.delete_namespaced_pod(
                    pod.metadata.name,
                    self.namespace,
                    body=client.V1DeleteOptions(
                        grace_period_seconds=0, preconditions=client.V1Preconditions(uid=uid)
                    ),
                )
            with self._lock:
                self.running.pop(uid, None)

        if proc is None:
            finish()
        else:  # the grace period can be long: don't hold up the other pods
            threading.Thread(
                target=finish, name=f"fake-kubelet-stop-{pod.metadata.name}", daemon=True
            ).start()

    @staticmethod
    def _terminate(handle: ProcessHandle, grace: float) -> None:
        if handle.poll() is not None:
            return
        handle.terminate()
        try:
            handle.wait(timeout=grace)
        except Exception:  # subprocess.TimeoutExpired, or a launcher handle's own timeout error
            handle.kill()
            handle.wait(timeout=10)


def _now_dt() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def _now() -> str:
    return _now_dt().strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod_status(
    pod: Any, phase: str, ready: bool, proc: _Running, code: int | None, pod_ip: str
) -> dict[str, Any]:
    """The status a kubelet would report, without timestamps (so unchanged status is not re-sent)."""
    started = proc.started.strftime("%Y-%m-%dT%H:%M:%SZ")
    if phase == "Running" and proc.backoff_until is not None:
        message = f"back-off restarting failed container {pod.spec.containers[0].name}"
        state: dict[str, Any] = {"waiting": {"reason": "CrashLoopBackOff", "message": message}}
    elif phase == "Running":
        state = {"running": {"startedAt": started}}
    else:
        terminated = {"exitCode": code, "startedAt": started, "finishedAt": _now(), "reason": phase}
        # A real kubelet reads terminationMessagePath; a launcher handle may offer the text instead.
        message = getattr(proc.handle, "termination_message", None)
        if message:
            terminated["message"] = str(message)[:4096]
        state = {"terminated": terminated}
    containers = [
        {
            "name": c.name,
            "image": c.image,
            "imageID": "",
            "containerID": f"fake://{pod.metadata.uid}/{c.name}",
            "ready": ready,
            "started": phase == "Running" and proc.backoff_until is None,
            "restartCount": proc.restarts,
            "state": state,
            **(
                {"lastState": {"terminated": {"exitCode": proc.last_exit, "reason": "Error"}}}
                if proc.last_exit
                else {}
            ),
        }
        for c in pod.spec.containers
    ]
    flag = "True" if ready else "False"
    conditions = {"PodScheduled": "True", "Initialized": "True", "PodReadyToStartContainers": "True"}
    conditions.update({"ContainersReady": flag, "Ready": flag})
    return {
        "phase": phase,
        "hostIP": POD_IP,
        "hostIPs": [{"ip": POD_IP}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": started,
        "qosClass": qos_class(pod),
        "conditions": [{"type": t, "status": s} for t, s in conditions.items()],
        "containerStatuses": containers,
    }


_QOS_RESOURCES = ("cpu", "memory")


def qos_class(pod: Any) -> str:
    """The pod's QoS class by the kubelet's rules (`GetPodQOS`): the API server fixes it at creation and
    refuses a status update that changes it, so a kubelet must report exactly this.

    Guaranteed: every container (init containers included) has cpu and memory limits equal to its
    requests (a request left out defaults to the limit); BestEffort: no container requests or limits
    cpu or memory; Burstable otherwise. Pod-level `spec.resources`, when set, decides alone.
    """
    pod_level = getattr(pod.spec, "resources", None)
    holders = (
        [pod_level]
        if pod_level is not None
        else [c.resources for c in [*(pod.spec.init_containers or []), *pod.spec.containers]]
    )
    any_set = False
    guaranteed = True
    for res in holders:
        requests = {k: v for k, v in ((res.requests if res else None) or {}).items() if k in _QOS_RESOURCES}
        limits = {k: v for k, v in ((res.limits if res else None) or {}).items() if k in _QOS_RESOURCES}
        any_set = any_set or bool(requests) or bool(limits)
        for name in _QOS_RESOURCES:
            limit = limits.get(name)
            if limit is None or _quantity(requests.get(name, limit)) != _quantity(limit):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


_SUFFIXES = {
    "n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}  # fmt: skip


def _quantity(text: str) -> float:
    """A resource quantity as a number, enough to compare a request with a limit ("1" == "1000m")."""
    match = re.fullmatch(r"([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)", str(text).strip())
    if match is None or match.group(2) not in _SUFFIXES:
        raise ValueError(f"not a resource quantity: {text!r}")
    return float(match.group(1)) * _SUFFIXES[match.group(2)]


def _stamp(status: dict[str, Any], previous: dict[str, Any]) -> dict[str, Any]:
    """Adds lastTransitionTime to conditions whose status changed since the last report."""
    before = {c["type"]: c["status"] for c in previous.get("conditions", [])}
    now = _now()
    conditions = [
        {**c, "lastTransitionTime": now} if before.get(c["type"]) != c["status"] else c
        for c in status["conditions"]
    ]
    return {**status, "conditions": conditions}
