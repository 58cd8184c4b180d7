"""The Kubeflow Spark operator for real: its controller built from its Go module, its chart and CRDs
from the same module zip, cached by version under `${KAPPAFLOW_CACHE:-~/.cache/kappaflow}/spark-operator`.

Why from the module: no container registry or GitHub download is reachable here, but the Go module proxy
serves `github.com/kubeflow/spark-operator/v2` with checksums, and its zip carries everything a user
installs: `cmd/operator` (the controller), `charts/spark-operator-chart` (its Helm chart, CRDs
included). `go install pkg@version` refuses the module (its go.mod has `replace` directives), so
`build()` copies the module out of Go's cache and `go build`s `./cmd/operator` there, as
tests/harness/flux.py does for Flux. The binary goes into the `kappaflow-spark-operator` image
(runtime/Dockerfile.spark-operator: FROM the kappaflow Spark image, whose PySpark is the SPARK_HOME the
controller's spark-submit runs); `chart_dir()` is what `helm install` takes.

v2.5.0: the newest v2 release the proxy serves at the time of writing; it passes the driver and
executor pod templates (`spec.driver.template`, `spec.executor.template`, since v2.1) to spark-submit,
which is what lets kappaflow's SparkApplications run without the operator's mutating webhook.

CLI: `python -m tests.harness.spark_operator build` (or `chart`: builds, then prints the chart's path).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import sys
import time
from pathlib import Path

from tests.harness.flux import _download, _go, _go_env, _writable_copy
from tests.harness.progress import component_line, log_dir

VERSION = "v2.5.0"
MODULE = "github.com/kubeflow/spark-operator/v2"
CHART = "charts/spark-operator-chart"

__all__ = ["MODULE", "VERSION", "binary", "build", "chart_dir"]


def cache_root() -> Path:
    base = os.environ.get("KAPPAFLOW_CACHE") or str(Path.home() / ".cache" / "kappaflow")
    return Path(base) / "spark-operator" / VERSION


def binary() -> Path:
    return cache_root() / "bin" / "spark-operator"


def chart_dir() -> Path:
    """The operator's Helm chart (with its CRDs under crds/), as the module ships it."""
    return cache_root() / "chart"


def _log(msg: str) -> None:
    print(f"[spark-operator] {msg}", file=sys.stderr, flush=True)


def build(force: bool = False) -> Path:
    """Build the controller and copy the chart into the cache (once, under a lock); the binary's path."""
    root = cache_root()
    marker = root / ".complete"
    if marker.exists() and not force:
        return binary()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists() and not force:
            return binary()
        marker.unlink(missing_ok=True)
        if shutil.which("go") is None:
            raise RuntimeError("the Go toolchain is needed to build the Spark operator")
        env = _go_env()
        started = time.monotonic()
        log_path = log_dir() / f"go-build-spark-operator-{VERSION}.log"
        log_path.write_text("")
        src = root / "src"
        shutil.rmtree(src, ignore_errors=True)
        _log(f"go mod download {MODULE}@{VERSION}")
        _writable_copy(_download(MODULE, VERSION, env), src)
        shutil.rmtree(chart_dir(), ignore_errors=True)
        shutil.copytree(src / CHART, chart_dir())
        out = binary()
        out.parent.mkdir(parents=True, exist_ok=True)
        _log(f"go build ./cmd/operator (minutes on a cold cache); full log {log_path}")
        with log_path.open("a") as log:
            argv = ["go", "build", "-ldflags", "-s -w", "-o", f"{out}.tmp", "./cmd/operator"]
            _go(argv, src, env, log, log_path)
        os.replace(f"{out}.tmp", out)
        shutil.rmtree(src, ignore_errors=True)  # the module stays in Go's cache
        marker.write_text(f"{MODULE}@{VERSION}\n")
        _log(f"built in {time.monotonic() - started:.0f}s: {out}")
        return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.harness.spark_operator")
    parser.add_argument("command", choices=["build", "chart"], help="build it; or print the chart's path")
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    args = parser.parse_args(argv)
    out = build(force=args.force)
    if args.command == "chart":
        print(chart_dir())
    else:
        print(component_line("Spark operator", VERSION, "ready", out.stat().st_size), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
