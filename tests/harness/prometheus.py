"""Real Prometheus for the tests: the Prometheus Operator's CRDs and a Prometheus server.

- `monitoring_crds()` returns the `monitoring.coreos.com` CRDs (PodMonitor, ServiceMonitor,
  PrometheusRule) of a pinned Prometheus Operator release. They come from the Go module proxy: the module
  zip of github.com/prometheus-operator/prometheus-operator carries `example/prometheus-operator-crd/`,
  the same files the release publishes. The zip is checked against a pinned SHA-256 and only the CRDs
  are kept, under ~/.cache/kappaflow/prometheus-operator/<version>/.
- `PrometheusServer` runs Debian's `prometheus` binary (`apt-get install prometheus`, done by the
  Makefile's `prometheus` target) with a generated config that scrapes the given targets every second,
  and answers PromQL through its HTTP API.

    python -m tests.harness.prometheus crds   # fetch the CRDs, print where they are
"""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

from tests.harness.downloads import fetch_verified

OPERATOR_VERSION = "v0.85.0"
OPERATOR_ZIP_SHA256 = "0bdb88ed823d0f2e86cf909638439b6ad1da744a228172c7411d9987527dc5d1"
MODULE = "github.com/prometheus-operator/prometheus-operator"
CRD_DIR = "example/prometheus-operator-crd"
CRDS = ("podmonitors", "servicemonitors", "prometheusrules")


def cache_dir() -> Path:
    root = Path(os.environ.get("KAPPAFLOW_CACHE", Path.home() / ".cache" / "kappaflow"))
    return root / "prometheus-operator" / OPERATOR_VERSION


def monitoring_crds() -> list[Path]:
    """The pinned CRD files, downloaded once (about 4 MB) and cached."""
    target = cache_dir()
    paths = [target / f"monitoring.coreos.com_{name}.yaml" for name in CRDS]
    if all(p.exists() for p in paths):
        return paths
    proxy = os.environ.get("GOPROXY", "https://proxy.golang.org").split(",")[0].rstrip("/")
    url = f"{proxy}/{MODULE}/@v/{OPERATOR_VERSION}.zip"
    data = fetch_verified(url, OPERATOR_ZIP_SHA256, f"prometheus-operator CRDs {OPERATOR_VERSION}")
    target.mkdir(parents=True, exist_ok=True)
    prefix = f"{MODULE}@{OPERATOR_VERSION}/{CRD_DIR}/"
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for path in paths:
            partial = path.with_suffix(".part")
            partial.write_bytes(archive.read(prefix + path.name))
            partial.replace(path)
    return paths


def prometheus_binary() -> Path | None:
    """Debian installs it in /usr/bin, which a minimal PATH may lack."""
    found = shutil.which("prometheus") or shutil.which("prometheus", path="/usr/bin")
    return Path(found) if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrometheusServer:
    """One Prometheus process with its own data dir, scraping `targets` (host:port) every second."""

    def __init__(
        self,
        workdir: Path,
        targets: list[str],
        rule_files: list[Path] | None = None,
        scrape_configs: list[dict[str, Any]] | None = None,
    ) -> None:
        """`scrape_configs` replaces the one static job over `targets` (e.g. Kubernetes service discovery)."""
        binary = prometheus_binary()
        if binary is None:
            raise RuntimeError("prometheus is not installed: `make prometheus` (apt-get install prometheus)")
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(p) for p in rule_files or []],
            "scrape_configs": scrape_configs
            or [{"job_name": "kappaflow", "static_configs": [{"targets": targets}]}],
        }
        workdir.mkdir(parents=True, exist_ok=True)
        # JSON is YAML: no YAML library needed to write the config
        (workdir / "prometheus.yml").write_text(json.dumps(config))
        self.log = workdir / "prometheus.log"
        self._args = [
            str(binary),
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> None:
        with self.log.open("wb") as log:
            self._proc = subprocess.Popen(self._args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        raise TimeoutError(f"prometheus not ready after {timeout}s: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(5)

    def _get(self, path: str, params: dict[str, str]) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.loads(response.read())
        if body.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector (raises with Prometheus' message on a PromQL error)."""
        data = self._get("/api/v1/query", {"query": expr})
        result: list[dict[str, Any]] = data["result"]
        return result

    def rules(self) -> list[dict[str, Any]]:
        groups: list[dict[str, Any]] = self._get("/api/v1/rules", {})["groups"]
        return groups

    def __enter__(self) -> PrometheusServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if args[:1] == ["crds"]:
        for path in monitoring_crds():
            print(path)
        return 0
    print("usage: python -m tests.harness.prometheus crds", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
