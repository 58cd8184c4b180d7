"""The operator under test, for real: kopf in-process against the local control plane, a fake kubelet
running each Pod as a local process, and the local Kafka broker.

- Describe Job pods run `kappaflow describe <entry> --json` locally (the entry point and input topic come
  from the pod's env and the test); the output becomes the container's termination message, as the
  real kubelet would report it from /dev/termination-log.
- StatefulSet pods run an idle process (`RUNTIME_POD = "idle"`) unless a test asks for `kappaflow run`.
"""

from __future__ import annotations

import os
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


class DescribeProcess:
    """A Popen whose stdout (the topology JSON) is the termination message once it has exited."""

    def __init__(self, entry: str, env: dict[str, str]) -> None:
        self._out = tempfile.NamedTemporaryFile(prefix="kf-describe-", suffix=".json", delete=False)
        self.proc = subprocess.Popen(
            [KAPPAFLOW, "describe", entry, "--json"],
            cwd=ROOT,
            env=env,
            stdout=self._out,
            stderr=subprocess.STDOUT,
        )

    @property
    def termination_message(self) -> str | None:
        if self.proc.poll() is None:
            return None
        return Path(self._out.name).read_text()

    def poll(self) -> int | None:
        return self.proc.poll()

    def terminate(self) -> None:
        self.proc.terminate()

    def kill(self) -> None:
        self.proc.kill()

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout)


def make_launcher(input_topic: str, output_topic: str) -> Callable[[Any], Any]:
    """Runs describe Job pods for real; StatefulSet pods idle (they are not what these tests check)."""

    def launch(pod: Any) -> Any:
        labels = pod.metadata.labels or {}
        env = {**os.environ, INPUT_ENV: input_topic, OUTPUT_ENV: output_topic}
        if labels.get("kappaflow.io/job") == "describe":
            container = pod.spec.containers[0]
            entry = next(e.value for e in container.env if e.name == "KAPPAFLOW_ENTRY_POINT")
            return DescribeProcess(entry, env)
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"], env=env)

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

    os.environ["KUBECONFIG"] = str(kubeconfig)
    os.environ.setdefault("KAPPAFLOW_OPERATOR_RESYNC_SECONDS", "2")
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
