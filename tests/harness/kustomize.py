"""Provide a pinned `kustomize` binary, built with Go from the module proxy and cached outside the clone.

Same approach as tests/harness/helm.py: `go install sigs.k8s.io/kustomize/kustomize/v5@<version>` builds
from sources the Go toolchain verifies against go.sum / the checksum database, into
`${KAPPAFLOW_CACHE:-~/.cache/kappaflow}/kustomize/<version>/kustomize`.

    python -m tests.harness.kustomize     # build ahead of time, print the binary's path
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KUSTOMIZE_VERSION = "v5.8.2"  # v5.8.3 needs Go 1.27
KUSTOMIZE_PACKAGE = "sigs.k8s.io/kustomize/kustomize/v5"


def cache_dir() -> Path:
    root = os.environ.get("KAPPAFLOW_CACHE") or str(Path.home() / ".cache" / "kappaflow")
    return Path(root) / "kustomize" / KUSTOMIZE_VERSION


def kustomize_binary(build: bool = True) -> Path | None:
    """The cached kustomize binary, built first when `build` is true and Go is available; else None."""
    target = cache_dir() / "kustomize"
    if target.is_file() and os.access(target, os.X_OK):
        return target
    if not build or shutil.which("go") is None:
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as scratch:
        env = dict(os.environ, GOBIN=scratch, CGO_ENABLED="0", GOFLAGS="-buildvcs=false")
        print(
            f"==> building kustomize {KUSTOMIZE_VERSION} with Go (cached in {target.parent})", file=sys.stderr
        )
        started = time.monotonic()
        proc = subprocess.run(
            ["go", "install", "-trimpath", "-ldflags", "-s -w", f"{KUSTOMIZE_PACKAGE}@{KUSTOMIZE_VERSION}"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            print(f"kustomize build failed:\n{proc.stdout}", file=sys.stderr)
            return None
        os.replace(Path(scratch) / "kustomize", target)
        print(f"==> kustomize built in {time.monotonic() - started:.0f}s: {target}", file=sys.stderr)
    return target


if __name__ == "__main__":
    binary = kustomize_binary()
    if binary is None:
        sys.exit("could not build kustomize (is Go installed and the module proxy reachable?)")
    print(binary)
