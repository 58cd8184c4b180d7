"""A stand-in for the Spark operator on the test control plane: the SparkApplication CRD, and a watcher
that runs each SparkApplication's job the way its spec says, with Spark in local mode.

What a real Spark operator would do with the operator's manifest: spark-submit the launcher (which runs
`kappaflow reprocess <arguments>`) with the ConfigMaps in `spec.driver.configMaps` mounted and the
driver's env, then report `status.applicationState.state` (SUBMITTED, RUNNING, COMPLETED or FAILED with
an `errorMessage`). Here the launcher's command runs as a local process; the mounted ConfigMap becomes a
local file, and `state.dir` points at a scratch directory (an executor's disk, thrown away).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

GROUP, VERSION, PLURAL = "sparkoperator.k8s.io", "v1beta2", "sparkapplications"
ROOT = Path(__file__).resolve().parents[2]
KAPPAFLOW = str(ROOT / ".venv" / "bin" / "kappaflow")

CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    # *.k8s.io groups are protected; the real Spark operator's CRD carries this annotation too.
    "metadata": {
        "name": f"{PLURAL}.{GROUP}",
        "annotations": {"api-approved.kubernetes.io": "unapproved, stand-in for the Spark operator's CRD"},
    },
    "spec": {
        "group": GROUP,
        "names": {"kind": "SparkApplication", "plural": PLURAL, "singular": "sparkapplication"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": VERSION,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
            }
        ],
    },
}


def install_spark_crd(kube_cluster: Any) -> None:
    from kubernetes import dynamic

    with kube_cluster.api_client() as api:
        crds = dynamic.DynamicClient(api).resources.get(
            api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition"
        )
        crds.server_side_apply(body=CRD, field_manager="kappaflow-tests", force_conflicts=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            conditions = crds.get(name=CRD["metadata"]["name"]).to_dict().get("status", {}).get("conditions")
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions or []):
                return
            time.sleep(0.2)
    raise TimeoutError("SparkApplication CRD not established")


class SparkOperatorStandIn:
    """Runs SparkApplications of one namespace as local `kappaflow reprocess` processes."""

    def __init__(self, api: Any, namespace: str, workdir: Path, env: dict[str, str]) -> None:
        from kubernetes import client

        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.workdir = workdir
        self.env = env
        """Extra environment for the jobs (the test's topic names), as an image would bake in."""
        self.env_for_image: dict[str, dict[str, str]] = {}
        """Per-image overrides: lets a test give one image a broken environment."""
        self.running: dict[str, subprocess.Popen[bytes]] = {}
        self.finished: set[str] = set()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="spark-operator-standin", daemon=True)

    def __enter__(self) -> SparkOperatorStandIn:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        for proc in self.running.values():
            proc.kill()
            proc.wait(10)

    def _set_state(self, name: str, state: str, message: str = "") -> None:
        body = {"status": {"applicationState": {"state": state, "errorMessage": message}}}
        self.custom.patch_namespaced_custom_object_status(GROUP, VERSION, self.namespace, PLURAL, name, body)

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            try:
                listed = self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL)
                for app in listed["items"]:
                    name = app["metadata"]["name"]
                    if name not in self.running and name not in self.finished:
                        self.running[name] = self._submit(app)
                        self._set_state(name, "RUNNING")
                for name, proc in list(self.running.items()):
                    if proc.poll() is None:
                        continue
                    del self.running[name]
                    self.finished.add(name)
                    log = (self.workdir / name / "driver.log").read_text(errors="replace")
                    if proc.returncode == 0:
                        self._set_state(name, "COMPLETED")
                    else:
                        self._set_state(name, "FAILED", f"driver exited {proc.returncode}: {log[-400:]}")
            except Exception as err:  # keep serving; the test asserts there were none
                self.errors.append(f"{type(err).__name__}: {err}")

    def _submit(self, app: dict[str, Any]) -> subprocess.Popen[bytes]:
        spec = app["spec"]
        name = app["metadata"]["name"]
        assert spec["type"] == "Python" and spec["mainApplicationFile"].endswith("/reprocess.py")
        assert spec["restartPolicy"] == {"type": "Never"}
        job_dir = self.workdir / name
        job_dir.mkdir(parents=True, exist_ok=True)
        argv = [KAPPAFLOW, "reprocess", *spec["arguments"]]
        driver = spec["driver"]
        for mount in driver.get("configMaps", []):
            data = self.core.read_namespaced_config_map(mount["name"], self.namespace).data or {}
            for key, text in data.items():
                (job_dir / key).write_text(text)
                argv = [str(job_dir / key) if a == f"{mount['path']}/{key}" else a for a in argv]
        env = {k: v for k, v in os.environ.items() if not k.startswith("KAPPAFLOW_")}
        env.update({e["name"]: e["value"] for e in driver.get("env", [])})
        env.update(self.env)
        env.update(self.env_for_image.get(spec["image"], {}))
        env["KAPPAFLOW_STATE_DIR"] = str(job_dir / "executor-disk")
        log = (job_dir / "driver.log").open("ab")
        try:
            return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()
