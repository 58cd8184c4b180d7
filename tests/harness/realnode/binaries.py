"""The real node's binaries, built from Go modules and cached by version.

Why from source: the only networks this project may reach are package registries, and the Go module
proxy serves Kubernetes, containerd, CoreDNS and local-path-provisioner with checksums verified by the
checksum database. The Kubernetes node binaries are built in one `go build` through a wrapper module
(the control-plane harness's trick: require k8s.io/kubernetes, replace each staging module by its
published v0.Y.Z), so they share their package compiles with each other and, through Go's build cache,
with the control plane's three binaries, which are hard-linked from that harness's cache.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from pathlib import Path

from tests.harness import kube_control_plane
from tests.harness.progress import component_line, log_dir, tree_size
from tests.harness.realnode import settings as s

_GO_ENV = {"CGO_ENABLED": "0", "GOFLAGS": "-trimpath -buildvcs=false", "GOTOOLCHAIN": "local"}


def _log(msg: str) -> None:
    print(f"[real-node] {msg}", flush=True)


def _go(argv: list[str], cwd: Path | None, env: dict[str, str], what: str) -> None:
    """A go command with its output in a build log; a failure shows the log's tail."""
    log_path = log_dir() / f"go-build-real-node-{what}.log"
    with log_path.open("a") as log:
        log.write(f"$ {' '.join(argv)}\n")
        log.flush()
        code = subprocess.run(
            argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, check=False
        ).returncode
    if code:
        tail = "".join(log_path.read_text().splitlines(keepends=True)[-30:])
        raise RuntimeError(f"{' '.join(argv[:3])} failed (exit {code}); full log {log_path}:\n{tail}")


def _node_wrapper(src: Path, env: dict[str, str]) -> None:
    staging = kube_control_plane.staging_modules(env)  # the same K8S_VERSION as the control plane's
    published = "v0." + s.K8S_VERSION.split(".", 1)[1]
    src.mkdir(parents=True, exist_ok=True)
    (src / "go.mod").write_text(
        "\n".join(
            [
                "module kappaflow.local/realnode",
                "",
                "go 1.26.0",
                "",
                "godebug default=go1.26",
                "",
                f"require k8s.io/kubernetes {s.K8S_VERSION}",
                "",
                "replace (",
                *(f"\t{m} => {m} {published}" for m in staging),
                ")",
                "",
            ]
        )
    )
    imports = "".join(f'\t_ "k8s.io/kubernetes/cmd/{n}"\n' for n in s.NODE_BINARIES)
    (src / "tools.go").write_text(f"//go:build tools\n\npackage tools\n\nimport (\n{imports})\n")


def _kubernetes(env: dict[str, str]) -> None:
    control_plane = kube_control_plane.build()
    s.BIN.mkdir(parents=True, exist_ok=True)
    for name in s.CONTROL_PLANE_BINARIES:
        target = s.BIN / name
        if not target.exists():
            try:
                os.link(control_plane / name, target)
            except OSError:
                shutil.copy2(control_plane / name, target)
    missing = [n for n in s.NODE_BINARIES if not (s.BIN / n).exists()]
    if not missing:
        return
    src = s.CACHE / "src" / f"kubernetes-{s.K8S_VERSION}"
    _node_wrapper(src, env)
    _log("go mod tidy for the node binaries")
    _go(["go", "mod", "tidy"], src, env, "kubernetes")
    version = "k8s.io/component-base/version"
    minor = s.K8S_VERSION.split(".")[1]
    ldflags = (
        f"-s -w -X {version}.gitVersion={s.K8S_VERSION} -X {version}.gitMajor=1 -X {version}.gitMinor={minor}"
        f" -X {version}.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion={s.K8S_VERSION}"
    )
    started = time.monotonic()
    _log(f"go build {' '.join(missing)} (a few minutes on a cold Go build cache)")
    tmp = s.BIN / ".tmp"
    tmp.mkdir(exist_ok=True)
    _go(
        [
            "go",
            "build",
            "-ldflags",
            ldflags,
            "-o",
            f"{tmp}/",
            *(f"k8s.io/kubernetes/cmd/{n}" for n in missing),
        ],
        src,
        env,
        "kubernetes",
    )
    for name in missing:
        os.replace(tmp / name, s.BIN / name)
    _log(f"built {' '.join(missing)} in {time.monotonic() - started:.0f}s")


def _go_install(
    target: Path, names: tuple[str, ...], packages: list[str], env: dict[str, str], what: str
) -> None:
    if all((target / n).exists() for n in names):
        return
    started = time.monotonic()
    _log(f"go install {what}")
    _go(["go", "install", "-ldflags", "-s -w", *packages], None, {**env, "GOBIN": str(target)}, what)
    _log(f"built {what} in {time.monotonic() - started:.0f}s")


#: Debian packages the node needs on the host: runc (the container runtime containerd calls), the CNI
#: plugins (bridge, host-local, portmap, loopback), iptables for kube-proxy and conntrack for its clean-up.
HOST_PACKAGES = {
    "runc": "runc",
    str(s.CNI_BIN / "bridge"): "containernetworking-plugins",
    "iptables": "iptables",
    "conntrack": "conntrack",
}


def host_packages() -> None:
    """Install the node's Debian packages that are missing (a fresh machine has none of them)."""
    from tests.harness.docker_host import apt_install

    missing = sorted(
        {pkg for tool, pkg in HOST_PACKAGES.items() if not (shutil.which(tool) or Path(tool).exists())}
    )
    if missing:
        apt_install(*missing)


def build() -> None:
    """Every binary the node runs, built once per version (a lock serialises parallel callers), and the
    host packages it needs."""
    host_packages()
    if shutil.which("go") is None:
        raise RuntimeError("the Go toolchain (>= 1.26) is needed to build the real node's binaries")
    env = {**os.environ, **_GO_ENV}
    s.CACHE.mkdir(parents=True, exist_ok=True)
    with open(s.CACHE / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _kubernetes(env)
        containerd = [
            f"github.com/containerd/containerd/v2/cmd/{n}@{s.CONTAINERD_VERSION}"
            for n in s.CONTAINERD_BINARIES
        ]
        _go_install(
            s.CONTAINERD_BIN,
            s.CONTAINERD_BINARIES,
            ["-tags", "no_btrfs no_devmapper no_zfs", *containerd],
            env,
            f"containerd-{s.CONTAINERD_VERSION}",
        )
        _go_install(
            s.COREDNS_BIN, ("coredns",), [f"github.com/coredns/coredns@{s.COREDNS_VERSION}"], env, "coredns"
        )
        _go_install(
            s.LOCAL_PATH_BIN,
            ("local-path-provisioner",),
            [f"github.com/rancher/local-path-provisioner@{s.LOCAL_PATH_VERSION}"],
            env,
            "local-path-provisioner",
        )


def missing() -> list[str]:
    """The binaries a start needs that are not built yet."""
    wanted = [s.BIN / n for n in (*s.CONTROL_PLANE_BINARIES, *s.NODE_BINARIES)]
    wanted += [s.CONTAINERD_BIN / n for n in s.CONTAINERD_BINARIES]
    wanted += [s.COREDNS_BIN / "coredns", s.LOCAL_PATH_BIN / "local-path-provisioner"]
    return [str(p) for p in wanted if not p.exists()]


def summary_line() -> str:
    dirs = (s.BIN, s.CONTAINERD_BIN, s.COREDNS_BIN, s.LOCAL_PATH_BIN)
    size = tree_size(p for d in dirs if d.is_dir() for p in d.iterdir())
    return component_line(
        "Kubernetes node (kubelet, containerd, CoreDNS, local-path)",
        s.K8S_VERSION,
        "built",
        size,
        str(s.CACHE / "bin"),
    )
