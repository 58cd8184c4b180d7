"""The operator under test, for real: kopf in-process against the local control plane, a fake kubelet
running each Pod as a local process, and the local Kafka broker.

- Describe Job pods run the Job's script locally (`kappaflow describe` then `topology_publish`, which
  patches the topology ConfigMap with the pod's own service-account token); the entry point and input
  topic come from the pod's env and the test.
- StatefulSet pods run an idle process (`RUNTIME_POD = "idle"`) unless a test asks for `kappaflow run`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.apps import INPUT_ENV, OUTPUT_ENV

ROOT = Path(__file__).resolve().parents[2]
KAPPAFLOW = str(ROOT / ".venv" / "bin" / "kappaflow")
ENTRY = "tests.e2e.apps:wordcount"
QUERY_PORT = -1  # `RuntimePods.port(pod, QUERY_PORT)`: the pod's query port, not metrics


class JobProcess:
    """A Job container run as `/bin/sh -c <script>`; with `FallbackToLogsOnError`, the tail of its output
    becomes the termination message when it fails (what a kubelet reports)."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        fd, self._path = tempfile.mkstemp(prefix="kf-job-", suffix=".log")
        try:
            self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=fd, stderr=subprocess.STDOUT)
        finally:
            os.close(fd)
        self._message: str | None = None

    @property
    def termination_message(self) -> str | None:
        if self._message is None and self.proc.poll() is not None:
            path = Path(self._path)
            self._message = path.read_text()[-4096:] if self.proc.returncode else ""
            path.unlink()
        return self._message

    def poll(self) -> int | None:
        return self.proc.poll()

    def terminate(self) -> None:
        self.proc.terminate()

    def kill(self) -> None:
        self.proc.kill()

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout)


def make_launcher(api: Any, input_topic: str, output_topic: str) -> Callable[[Any], Any]:
    """Runs describe Job pods for real; StatefulSet pods idle (they are not what these tests check).

    A describe pod runs the Job's own script with its volumes materialized locally (the scratch
    emptyDir, the projected service-account token) and its env from the API, so `kappaflow describe`
    and `kappaflow_operator.topology_publish` publish the topology to the API server for real.
    """
    from kubernetes import client

    from tests.harness.fake_kubelet import container_env
    from tests.harness.pod_volumes import materialize_volumes, rewrite_mount_paths

    core = client.CoreV1Api(api)
    base = {k: v for k, v in os.environ.items() if not k.startswith("KAPPAFLOW_")}
    topics = {INPUT_ENV: input_topic, OUTPUT_ENV: output_topic}

    def launch(pod: Any) -> Any:
        labels = pod.metadata.labels or {}
        if labels.get("kappaflow.io/job") == "describe":
            container = pod.spec.containers[0]
            mounts = materialize_volumes(core, pod, Path(tempfile.mkdtemp(prefix="kf-pod-")))
            argv = [rewrite_mount_paths(a, mounts) for a in [*container.command, *(container.args or [])]]
            env = {**base, **topics, **container_env(core, pod)}
            env["PATH"] = f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
            return JobProcess(argv, env)
        return subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(3600)"], env={**base, **topics}
        )

    return launch


def install_crd(kube_cluster: Any) -> None:
    from kubernetes import dynamic

    crd = yaml.safe_load((ROOT / "crds" / "streamapps.kappaflow.io.yaml").read_text())
    with kube_cluster.api_client() as api:
        dyn = dynamic.DynamicClient(api)
        crds = dyn.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
        crds.server_side_apply(body=crd, field_manager="kappaflow-tests", force_conflicts=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            conditions = crds.get(name=crd["metadata"]["name"]).to_dict().get("status", {}).get("conditions")
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions or []):
                return
            time.sleep(0.2)
    raise TimeoutError("CRD not established")


@contextmanager
def running_operator(kubeconfig: Path, namespace: str) -> Iterator[Any]:
    """kopf in a thread, watching only `namespace` (tests run side by side in one cluster)."""
    import kopf.testing

    from kappaflow_operator import context, main

    # Both periods were fixed when the operator was first imported (tests/conftest.py sets them first); a
    # slower one would not fail the tests, only make every wait for a pass or a retry silently longer.
    for name, seconds in (("RESYNC", main.RESYNC_S), ("RETRY", context.RETRY_S)):
        wanted = float(os.environ[f"KAPPAFLOW_OPERATOR_{name}_SECONDS"])
        assert wanted == seconds, f"operator {name.lower()} period is {seconds}s, the tests expect {wanted}s"
    os.environ["KUBECONFIG"] = str(kubeconfig)
    args = ["run", "--standalone", "--namespace", namespace, "-m", "kappaflow_operator.main", "--verbose"]
    with kopf.testing.KopfRunner(args, timeout=60) as runner:
        yield runner


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 60.0, interval: float = 0.3) -> Any:
    """Polls `probe` until it returns something truthy; the failure says what was awaited."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except Exception as err:  # an object not there yet, a transient API error
            last = err
        if last and not isinstance(last, Exception):
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


class RuntimePods:
    """Runs StatefulSet pods as real `kappaflow run` processes, the way the manifest says to.

    The pod's env comes from the API (`container_env`: downward API, ConfigMap/Secret refs), the
    mounted ConfigMap becomes a local file, and what only a real node would isolate is remapped per pod:
    each pod name gets its own state directory (kept across restarts, like its PersistentVolumeClaim)
    and its own metrics port (all pods share 127.0.0.1), which the readiness probe follows.
    """

    def __init__(self, api: Any, namespace: str, workdir: Path, input_topic: str, output_topic: str) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.workdir = workdir
        self.topics = {INPUT_ENV: input_topic, OUTPUT_ENV: output_topic}
        self.ports: dict[str, int] = {}
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.wipe_next: set[str] = set()
        """Pod names whose state directory is dropped before their next start (a lost volume)."""
        self.describe = make_launcher(api, input_topic, output_topic)

    def port(self, pod: Any, container_port: int = 0) -> int:
        """The local port of `pod`'s metrics port (any container port) or, with QUERY_PORT, its
        query port: all pods share 127.0.0.1, so each gets its own."""
        from tests.harness.kafka_fixtures import free_port

        key = f"{pod.metadata.name}/query" if container_port == QUERY_PORT else pod.metadata.name
        return self.ports.setdefault(key, free_port())

    def launch(self, pod: Any) -> Any:
        from tests.harness.fake_kubelet import container_env

        job = (pod.metadata.labels or {}).get("kappaflow.io/job")
        if job == "describe":
            return self.describe(pod)
        container = pod.spec.containers[0]
        name = pod.metadata.name
        pod_dir = self.workdir / name
        pod_dir.mkdir(parents=True, exist_ok=True)
        state = pod_dir / "state"
        for volume in pod.spec.volumes or []:
            if volume.persistent_volume_claim is not None:
                # The state lives as long as the claim: a new claim (after a reset) is an empty volume.
                claim = volume.persistent_volume_claim.claim_name
                uid = self.core.read_namespaced_persistent_volume_claim(claim, self.namespace).metadata.uid
                state = self.workdir / "volumes" / uid
        if name in self.wipe_next:
            self.wipe_next.discard(name)
            shutil.rmtree(state, ignore_errors=True)
        # The test process's own KAPPAFLOW_* settings (cache, kubeconfig) are not the pod's config.
        base = {k: v for k, v in os.environ.items() if not k.startswith("KAPPAFLOW_")}
        env = {**base, **self.topics, **container_env(self.core, pod)}
        env["KAPPAFLOW_STATE_DIR"] = str(state)
        env["PATH"] = f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["KAPPAFLOW_METRICS_PORT"] = str(self.port(pod))
        if "KAPPAFLOW_APPLICATION_SERVER" in env:  # the query server's port, also shared: one per pod
            host = env["KAPPAFLOW_APPLICATION_SERVER"].rsplit(":", 1)[0]
            env["KAPPAFLOW_APPLICATION_SERVER"] = f"{host}:{self.port(pod, QUERY_PORT)}"
            env["KAPPAFLOW_QUERY_HTTP_HOST"] = "127.0.0.1"
        # A run pod: `kappaflow run ...` as args; a reset Job: `/bin/sh -c "exec kappaflow reset ..."`.
        argv = [*(container.command or []), *(container.args or [])]
        for volume in pod.spec.volumes or []:
            if volume.config_map is not None:
                data = self.core.read_namespaced_config_map(volume.config_map.name, self.namespace).data
                for key, text in data.items():
                    local = pod_dir / key
                    local.write_text(text)
                    mounted = f"{volume_mount(container, volume.name)}/{key}"
                    argv = [a.replace(mounted, str(local)) for a in argv]
        log = (pod_dir / "run.log").open("ab")
        try:
            proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()
        self.processes[name] = proc
        return proc


def volume_mount(container: Any, volume: str) -> str:
    return str(next(m.mount_path for m in container.volume_mounts or [] if m.name == volume))
