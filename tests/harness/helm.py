"""Provide a pinned `helm` binary, built with Go from the module proxy and cached outside the clone.

helm is not packaged for this environment, but it is a plain Go module (`helm.sh/helm/v3`), so
`go install helm.sh/helm/v3/cmd/helm@<version>` builds it from sources that the Go toolchain verifies
against go.sum / the checksum database. The binary lands in
`${KAPPAFLOW_CACHE:-~/.cache/kappaflow}/helm/<version>/helm`, so a fresh clone reuses it and only a fresh
machine pays for the build (a few minutes on two cores).

Run as a script to build ahead of time (prints the binary's path):

    python -m tests.harness.helm
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HELM_VERSION = "v3.22.0"
HELM_PACKAGE = "helm.sh/helm/v3/cmd/helm"
#: The Kubernetes version helm assumes offline (`helm template`, `helm lint`). helm's Makefile derives it
#: from its client-go (v0.37 -> 1.37) and injects it with -X; a plain `go install` would leave 1.20.
K8S_MAJOR, K8S_MINOR = "1", "37"
_LDFLAGS = " ".join(
    [
        "-s -w",
        f"-X helm.sh/helm/v3/internal/version.version={HELM_VERSION}",
        f"-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor={K8S_MAJOR}",
        f"-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor={K8S_MINOR}",
        f"-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor={K8S_MAJOR}",
        f"-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor={K8S_MINOR}",
    ]
)


def cache_dir() -> Path:
    root = os.environ.get("KAPPAFLOW_CACHE") or str(Path.home() / ".cache" / "kappaflow")
    return Path(root) / "helm" / HELM_VERSION


def helm_binary(build: bool = True) -> Path | None:
    """Return the cached helm binary, building it first when `build` is true and Go is available.

    Returns None (never raises) when the binary is absent and cannot be built, so tests can skip with a
    clear reason instead of failing on machines without Go.
    """
    target = cache_dir() / "helm"
    if target.is_file() and os.access(target, os.X_OK):
        return target
    if not build or shutil.which("go") is None:
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    # Build into a scratch GOBIN and move into place atomically: an interrupted build never leaves a
    # half-written binary that a later run would trust.
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as scratch:
        env = dict(os.environ, GOBIN=scratch, CGO_ENABLED="0", GOFLAGS="-buildvcs=false")
        print(f"==> building helm {HELM_VERSION} with Go (cached in {target.parent})", file=sys.stderr)
        started = time.monotonic()
        proc = subprocess.run(
            ["go", "install", "-trimpath", "-ldflags", _LDFLAGS, f"{HELM_PACKAGE}@{HELM_VERSION}"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            print(f"helm build failed:\n{proc.stdout}", file=sys.stderr)
            return None
        os.replace(Path(scratch) / "helm", target)
        print(f"==> helm built in {time.monotonic() - started:.0f}s: {target}", file=sys.stderr)
    return target


if __name__ == "__main__":
    binary = helm_binary()
    if binary is None:
        sys.exit("could not build helm (is Go installed and the module proxy reachable?)")
    print(binary)
