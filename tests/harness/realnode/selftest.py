"""The node's own check, run by `python -m tests.harness.realnode selftest` and by the real-node tier:
start, a pod from a local image, cluster DNS, a Service through kube-proxy, a volume from the default
StorageClass, no route off the machine, a pull that fails at the loopback registry, teardown, and the
host compared with its state before start."""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Callable

from tests.harness.realnode import host, node
from tests.harness.realnode import settings as s

PYTHON_IMAGE = "kappaflow-runtime:0.1.0"
POD = """
apiVersion: v1
kind: Pod
metadata: {name: py, labels: {app: py}}
spec:
  terminationGracePeriodSeconds: 1
  securityContext: {runAsNonRoot: true, runAsUser: 1000, fsGroup: 1000}
  containers:
  - name: py
    image: IMAGE
    imagePullPolicy: Never
    command: [python3, -c, "import http.server as h; h.HTTPServer(('', 8080), h.SimpleHTTPRequestHandler)
      .serve_forever()"]
    workingDir: /data
    readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
    volumeMounts: [{name: data, mountPath: /data}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
---
apiVersion: v1
kind: Service
metadata: {name: py}
spec: {selector: {app: py}, ports: [{port: 80, targetPort: 8080}]}
"""


def _until(what: str, fn: Callable[[], object], timeout: float = 90) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if fn():
                return
        except (OSError, RuntimeError):
            pass
        time.sleep(0.3)
    raise TimeoutError(f"selftest: timed out waiting for {what}")


def _exec(ns: str, code: str) -> str:
    return node.kubectl("exec", "-n", ns, "py", "--", "python3", "-c", code).stdout.strip()


def check(ns: str) -> dict[str, float]:
    """The checks on a running node, in namespace NS; the timings."""
    times: dict[str, float] = {}
    started = time.monotonic()
    node.kubectl("apply", "-n", ns, "-f", "-", input=POD.replace("IMAGE", PYTHON_IMAGE))

    def ready() -> bool:
        pod = json.loads(node.kubectl("get", "pod", "-n", ns, "py", "-o", "json").stdout)
        return any(
            c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", [])
        )

    _until("pod py Ready (volume provisioned, probe passing)", ready)
    times["pod with a provisioned volume Ready"] = time.monotonic() - started
    write = "open('/data/hello', 'w').write('kept'); print(open('/data/hello').read())"
    assert _exec(ns, write) == "kept", "the volume is not writable by uid 1000"
    fetch = (
        "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())"
    )
    url = f"http://py.{ns}.svc.{s.CLUSTER_DOMAIN}/hello"
    _until(
        "the Service answers by its DNS name from a pod",
        lambda: (
            node.kubectl("exec", "-n", ns, "py", "--", "python3", "-c", fetch, url).stdout.strip() == "kept"
        ),
        30,
    )
    outside = "import socket\ntry: print(socket.gethostbyname('example.com'))\nexcept OSError: print('nx')"
    assert _exec(ns, outside) == "nx", "a name outside the cluster resolved"
    probe = (
        "import socket\ntry: socket.create_connection(('203.0.113.1', 80), timeout=3)\n"
        "except OSError as e: print(e.errno)"
    )
    assert _exec(ns, probe) == "101", "a pod has a route off the machine"
    node.kubectl("run", "-n", ns, "absent", "--image=kappaflow.local/absent:1", "--restart=Never")

    def pull_failed() -> bool:
        pod = json.loads(node.kubectl("get", "pod", "-n", ns, "absent", "-o", "json").stdout)
        waiting = pod["status"].get("containerStatuses", [{}])[0].get("state", {}).get("waiting", {})
        return waiting.get("reason") in ("ErrImagePull", "ImagePullBackOff") and "127.0.0.1:9" in waiting.get(
            "message", ""
        )

    _until("ErrImagePull from the loopback registry", pull_failed, 60)
    times["checks"] = time.monotonic() - started
    return times


def run(images: list[str]) -> int:
    before = host.snapshot()
    times: dict[str, float] = {}
    failed = False
    try:
        started = time.monotonic()
        node.start(images, attached=True)
        times["start"] = time.monotonic() - started
        node.kubectl("create", "namespace", "selftest")
        times.update(check("selftest"))
    except BaseException:
        traceback.print_exc()
        failed = True
    started = time.monotonic()
    node.teardown()
    times["teardown"] = time.monotonic() - started
    changed = host.compare(before, host.snapshot())
    for line in changed:
        print(f"host changed: {line}")
    print("timings: " + ", ".join(f"{k} {v:.1f}s" for k, v in times.items()))
    if failed or changed:
        print("selftest FAILED")
        return 1
    print("selftest passed: the host after teardown equals the host before start")
    return 0
