"""Flux for real: source-controller and kustomize-controller built from their Go modules, run out of cluster.

Why build from the modules: no container registry or GitHub download is reachable, but the Go module
proxy serves `github.com/fluxcd/source-controller` and `github.com/fluxcd/kustomize-controller` with
checksums. `go install pkg@version` refuses both (their go.mod has `replace` directives, one pointing at
`./api`), and a module zip leaves out `./api` because it is a module of its own. So `build()` downloads
each controller module and its `/api` module, lays them out as upstream's tree (`<src>/<name>/api`) in a
writable copy, and `go build`s there into `${KAPPAFLOW_CACHE:-~/.cache/kappaflow}/flux/<version>/bin`,
with a lock, a completeness marker and one progress line, as tests/harness/kube_control_plane.py does.
The CRDs (GitRepository, OCIRepository, Bucket, HelmRepository/HelmChart, ExternalArtifact,
Kustomization) come from the same module zips' `config/crd/bases`.

`FluxControllers(kubeconfig)` installs those CRDs and runs both controllers as host processes against
any cluster given by a kubeconfig (the local control plane, or a real node): leader election off,
metrics/health on free loopback ports, and source-controller's artifact server on 127.0.0.1 so that
kustomize-controller fetches artifacts over loopback (`--storage-adv-addr`). `GitServer` serves bare
repositories over git's smart HTTP protocol (go-git, which Flux uses, does not speak the dumb one) from
`git http-backend` behind a tiny threaded Python HTTP server on 127.0.0.1.

CLI: `python -m tests.harness.flux build`.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from tests.harness.gitserver import GitServer
from tests.harness.kube_control_plane import _die_with_parent, free_port
from tests.harness.progress import component_line, log_dir, tree_size

#: Flux v2.9.5 ships source-controller v1.9.5 and kustomize-controller v1.9.5 (flux2's go.mod pins
#: both APIs at those versions). That pair is the newest built against k8s.io/client-go v0.36 (the
#: control plane is v1.36) and with `go 1.26` in its go.mod: v1.10 needs Go 1.27 and client-go v0.37.
FLUX_VERSION = "v2.9.5"
CONTROLLERS = {
    "source-controller": "v1.9.5",
    "kustomize-controller": "v1.9.5",
}
MODULE = "github.com/fluxcd/{name}"
#: Dependencies whose pinned version the Go module proxy reachable here does not serve (403 "not
#: available"), replaced by the nearest one it does. source-controller v1.9.5 pins
#: github.com/fluxcd/pkg/artifact v0.18.3, of which the proxy has only v0.18.0 in that minor: it compiles
#: against source-controller unchanged, and tests/gitops exercises its artifact server end to end.
REPLACE = {
    "source-controller": {"github.com/fluxcd/pkg/artifact": "v0.18.0"},
}

__all__ = ["FLUX_VERSION", "FluxControllers", "GitServer", "bin_dir", "build", "crd_dir"]


def cache_root() -> Path:
    base = os.environ.get("KAPPAFLOW_CACHE") or str(Path.home() / ".cache" / "kappaflow")
    return Path(base) / "flux" / FLUX_VERSION


def bin_dir() -> Path:
    return cache_root() / "bin"


def crd_dir() -> Path:
    return cache_root() / "crds"


def _log(msg: str) -> None:
    print(f"[flux] {msg}", file=sys.stderr, flush=True)


def _go_env() -> dict[str, str]:
    return {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-trimpath -buildvcs=false", "GOTOOLCHAIN": "local"}


def _download(module: str, version: str, env: dict[str, str]) -> Path:
    """`go mod download -json`: the module's extracted (read-only) directory in Go's module cache."""
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        check=False,
        capture_output=True,
        text=True,
        env=env,
    )
    info = json.loads(out.stdout or "{}")
    if out.returncode != 0 or "Dir" not in info:
        raise RuntimeError(f"go mod download {module}@{version} failed: {info.get('Error') or out.stderr}")
    return Path(info["Dir"])


def _writable_copy(source: Path, target: Path) -> None:
    """Module cache files are read-only; the build tree must be writable (and removable) again."""
    shutil.copytree(source, target, dirs_exist_ok=True)
    for path in [target, *target.rglob("*")]:
        mode = path.stat().st_mode
        path.chmod(mode | stat.S_IWUSR | (stat.S_IXUSR if path.is_dir() else 0))


def build(force: bool = False) -> Path:
    """Build both controllers into the cache (once; serialised with a lock file); returns the bin dir."""
    root = cache_root()
    marker = root / "bin" / ".complete"
    if marker.exists() and not force:
        return root / "bin"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists() and not force:
            return root / "bin"
        marker.unlink(missing_ok=True)
        return _build(root, marker)


def _build(root: Path, marker: Path) -> Path:
    if shutil.which("go") is None:
        raise RuntimeError("the Go toolchain (>= 1.26) is needed to build Flux's controllers")
    env = _go_env()
    started = time.monotonic()
    log_path = log_dir() / f"go-build-flux-{FLUX_VERSION}.log"
    log_path.write_text("")
    (root / "bin").mkdir(parents=True, exist_ok=True)
    crds = root / "crds"
    shutil.rmtree(crds, ignore_errors=True)
    crds.mkdir(parents=True)
    for name, version in CONTROLLERS.items():
        step = time.monotonic()
        module = MODULE.format(name=name)
        src = root / "src" / name
        if src.exists():
            shutil.rmtree(src)
        _log(f"go mod download {module}@{version} and its ./api module")
        _writable_copy(_download(module, version, env), src)
        _writable_copy(_download(f"{module}/api", version, env), src / "api")
        for dep, dep_version in REPLACE.get(name, {}).items():
            with log_path.open("a") as log:
                _go(["go", "mod", "edit", f"-replace={dep}={dep}@{dep_version}"], src, env, log, log_path)
                # go.sum must gain the replacement's checksums (verified against the checksum database).
                _go(["go", "mod", "download", f"{dep}@{dep_version}"], src, env, log, log_path)
        for crd in sorted((src / "config" / "crd" / "bases").glob("*.yaml")):
            shutil.copy(crd, crds / crd.name)
        _log(f"go build {name} {version} (minutes on a cold cache); full log {log_path}")
        out = root / "bin" / name
        ldflags = "-s -w"
        with log_path.open("a") as log:
            _go(["go", "build", "-ldflags", ldflags, "-o", f"{out}.tmp", "."], src, env, log, log_path)
        os.replace(f"{out}.tmp", out)
        _log(f"built {name} in {time.monotonic() - step:.0f}s")
    marker.write_text(" ".join(f"{n}={v}" for n, v in CONTROLLERS.items()) + "\n")
    _log(f"Flux controllers ready in {root / 'bin'} ({time.monotonic() - started:.0f}s)")
    return root / "bin"


def _go(cmd: list[str], cwd: Path, env: dict[str, str], log: IO[str], log_path: Path) -> None:
    """Run a go command at the lowest CPU priority (builds share the machine with test runs)."""
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    code = subprocess.run(
        ["nice", "-n", "19", *cmd], cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, check=False
    ).returncode
    if code != 0:
        tail = "".join(log_path.read_text().splitlines(keepends=True)[-30:])
        raise RuntimeError(f"{cmd[:2]} failed (exit {code}); full log {log_path}:\n{tail}")


def summary_line(bins: Path, status: str) -> str:
    """The one line `make test` prints for Flux."""
    size = tree_size(p for p in bins.iterdir() if not p.name.startswith("."))
    versions = ", ".join(f"{n} {v}" for n, v in CONTROLLERS.items())
    return component_line("Flux", f"{FLUX_VERSION} ({versions})", status, size)


# ---- the controllers, out of cluster ------------------------------------------------------------------
def install_crds(kubeconfig: Path | str, timeout: float = 60.0) -> list[str]:
    """Server-side apply every Flux CRD from the module zips; waits until each is Established."""
    import yaml
    from kubernetes import client, config, dynamic

    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)  # type: ignore[no-untyped-call]
    names = []
    with client.ApiClient(configuration) as api:
        crds = dynamic.DynamicClient(api).resources.get(
            api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition"
        )
        build()
        for path in sorted(crd_dir().glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if doc:
                    crds.server_side_apply(body=doc, field_manager="kappaflow-flux", force_conflicts=True)
                    names.append(doc["metadata"]["name"])
        deadline = time.monotonic() + timeout
        for name in names:
            while True:
                conditions = (crds.get(name=name).to_dict().get("status") or {}).get("conditions") or []
                if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"CRD {name} not Established after {timeout:.0f}s")
                time.sleep(0.2)
    return names


class FluxControllers:
    """source-controller and kustomize-controller as host processes against the cluster of `kubeconfig`.

    Nothing but the kubeconfig ties them to a cluster, so the same harness drives the local control
    plane and a real node. Each controller gets free 127.0.0.1 ports for metrics and health (a
    controller-runtime default of :8080 would collide with anything else on the machine), leader
    election off (one replica of each), and the artifact server binds and advertises 127.0.0.1 so
    kustomize-controller downloads tarballs from source-controller over loopback. The kernel SIGTERMs
    them if the test process dies (PR_SET_PDEATHSIG), so a killed run leaves no controller reconciling.
    """

    def __init__(
        self,
        kubeconfig: Path | str,
        workdir: Path | str | None = None,
        *,
        log_level: str = "info",
        requeue_dependency: str = "5s",
    ) -> None:
        self.kubeconfig = Path(kubeconfig).resolve()
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="kf-flux-")).resolve()
        self.log_level = log_level
        self.requeue_dependency = requeue_dependency
        self.storage_addr = ""
        self.health: dict[str, int] = {}
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, timeout: float = 60.0) -> FluxControllers:
        bins = build()
        install_crds(self.kubeconfig)
        # source-controller refuses a storage path that does not exist yet.
        (self.workdir / "storage").mkdir(parents=True, exist_ok=True)
        storage_port = free_port()
        self.storage_addr = f"127.0.0.1:{storage_port}"
        common = [f"--log-level={self.log_level}", "--enable-leader-election=false", "--watch-all-namespaces"]
        try:
            self._spawn(bins, "source-controller", [
                *common, f"--storage-path={self.workdir / 'storage'}",
                f"--storage-addr={self.storage_addr}", f"--storage-adv-addr={self.storage_addr}",
                f"--requeue-dependency={self.requeue_dependency}",
            ])  # fmt: skip
            self._spawn(bins, "kustomize-controller", [
                *common, f"--requeue-dependency={self.requeue_dependency}",
                "--no-remote-bases=true",
            ])  # fmt: skip
            deadline = time.monotonic() + timeout
            for name in self._procs:
                self._wait_ready(name, deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM both (controller-runtime drains its workers), SIGKILL after `grace` seconds."""
        for popen in self._procs.values():
            with contextlib.suppress(ProcessLookupError):
                popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for popen in self._procs.values():
            try:
                popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait()
        self._procs.clear()

    def __enter__(self) -> FluxControllers:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log(self, name: str) -> str:
        """A controller's log so far (for a failing test's message)."""
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def check_alive(self) -> None:
        for name, popen in self._procs.items():
            if popen.poll() is not None:
                raise RuntimeError(f"{name} exited with {popen.returncode}:\n{self.log(name)[-3000:]}")

    def _spawn(self, bins: Path, name: str, args: list[str]) -> None:
        metrics, health = free_port(), free_port()
        self.health[name] = health
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            # Where a controller looks for its own namespace's objects (SOPS keys); none are used here.
            "RUNTIME_NAMESPACE": "flux-system",
        }
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child from here on
        try:
            self._procs[name] = subprocess.Popen(
                [str(bins / name), f"--metrics-addr=127.0.0.1:{metrics}",
                 f"--health-addr=127.0.0.1:{health}", *args],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.workdir, env=env,
                preexec_fn=_die_with_parent,
            )  # fmt: skip
        finally:
            log.close()

    def _wait_ready(self, name: str, deadline: float) -> None:
        import urllib.error
        import urllib.request

        url = f"http://127.0.0.1:{self.health[name]}/readyz"
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.2)
        raise TimeoutError(f"{name} not ready; see {self.workdir / (name + '.log')}")


# ---- the objects a user applies ------------------------------------------------------------------------
SOURCE_API = "source.toolkit.fluxcd.io/v1"
KUSTOMIZE_API = "kustomize.toolkit.fluxcd.io/v1"


def git_repository(
    name: str, namespace: str, url: str, *, interval: str = "10s", branch: str = "main"
) -> dict[str, Any]:
    """A GitRepository following `branch` of `url`."""
    return {
        "apiVersion": SOURCE_API,
        "kind": "GitRepository",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"url": url, "interval": interval, "ref": {"branch": branch}, "timeout": "20s"},
    }


def kustomization(
    name: str,
    namespace: str,
    source: str,
    path: str,
    *,
    interval: str = "10s",
    wait: bool = True,
    timeout: str = "2m",
    retry_interval: str = "5s",
    target_namespace: str | None = None,
    health_checks: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A Flux Kustomization applying `path` of the GitRepository `source` (pruning what leaves Git).

    `wait: true` makes kustomize-controller health-check everything it applied with kstatus; the
    StreamApp's Ready/Reconciling/Stalled conditions are what kstatus reads."""
    spec: dict[str, Any] = {
        "interval": interval,
        "retryInterval": retry_interval,
        "path": path,
        "prune": True,
        "wait": wait,
        "timeout": timeout,
        "sourceRef": {"kind": "GitRepository", "name": source},
    }
    if target_namespace:
        spec["targetNamespace"] = target_namespace
    if health_checks:
        spec["healthChecks"] = health_checks
    return {
        "apiVersion": KUSTOMIZE_API,
        "kind": "Kustomization",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def ready_condition(obj: dict[str, Any]) -> dict[str, Any]:
    """The Ready condition of a Flux object (empty until the controller first reports)."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "Ready"), {})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.harness.flux", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("command", choices=["build"])
    parser.add_argument("--force", action="store_true", help="rebuild even if the marker exists")
    args = parser.parse_args(argv)
    cached = (bin_dir() / ".complete").exists() and not args.force
    print(summary_line(build(force=args.force), "cached" if cached else "built"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
