"""A real Kubernetes control plane for tests: etcd, kube-apiserver and kube-controller-manager.

Why build from source instead of downloading release binaries: the only networks this project may reach
are package registries, and the Go module proxy serves `k8s.io/kubernetes` with checksums verified by
`go.sum`/the checksum database. So `build()` writes a tiny wrapper Go module into the cache directory
that requires `k8s.io/kubernetes` at a pinned release (replacing each staging module, which the upstream
go.mod points at `./staging/...`, with its matching published `v0.Y.Z`), plus a three-line `main` that
calls etcd's own `etcdmain.Main` at the etcd version Kubernetes itself pins, and `go build`s the three
binaries into `${KAPPAFLOW_CACHE:-~/.cache/kappaflow}/kube/<version>/bin/`. A marker file makes the
build idempotent; Go's own build and module caches make a rebuild after a cache wipe cheap.

`LocalControlPlane` then generates a CA and certificates with the `openssl` CLI (no extra Python
dependency), starts the three processes on free 127.0.0.1 ports with their data in a work directory,
writes an admin kubeconfig (client certificate in `system:masters`), and waits until the API server is
ready and the controller-manager has created the `default` service account.

CLI: `python -m tests.harness.kube_control_plane build|start|stop|status [--dir .run/kube]`.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tests.harness.progress import component_line, log_dir, tree_size

K8S_VERSION = "v1.36.3"
# etcd at the version k8s.io/kubernetes v1.36.3 itself requires (go.etcd.io/etcd/server/v3), so the
# wrapper module resolves one dependency graph that upstream already compiles and tests together.
ETCD_VERSION = "v3.6.8"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager")
# The controllers an operator's tests rely on; everything else (node lifecycle, cloud, volumes, ...)
# stays off to keep memory and CPU low on small CI machines.
CONTROLLERS = (
    "statefulset-controller",
    "replicaset-controller",
    "deployment-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "disruption-controller",
    "endpoints-controller",
    "endpointslice-controller",
    "job-controller",
    "persistentvolume-binder-controller",
    # Admission puts protection finalizers on PVCs/PVs; without these controllers deletes hang forever.
    "persistentvolumeclaim-protection-controller",
    "persistentvolume-protection-controller",
    "ttl-after-finished-controller",
    "clusterrole-aggregation-controller",
    "root-ca-certificate-publisher-controller",
)


def cache_root() -> Path:
    base = os.environ.get("KAPPAFLOW_CACHE") or str(Path.home() / ".cache" / "kappaflow")
    return Path(base) / "kube" / K8S_VERSION


def bin_dir() -> Path:
    return cache_root() / "bin"


def _log(msg: str) -> None:
    print(f"[kube] {msg}", file=sys.stderr, flush=True)


def staging_modules(go_env: dict[str, str]) -> list[str]:
    """The `k8s.io/*` modules that upstream requires at v0.0.0 (i.e. served from ./staging)."""
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"k8s.io/kubernetes@{K8S_VERSION}"],
        check=True,
        capture_output=True,
        text=True,
        env=go_env,
    ).stdout
    gomod = Path(json.loads(out)["GoMod"]).read_text()
    return sorted(set(re.findall(r"^\s+(k8s\.io/[\w./-]+) v0\.0\.0\s*$", gomod, re.MULTILINE)))


def _write_wrapper(src: Path, go_env: dict[str, str]) -> None:
    staging_version = "v0." + K8S_VERSION.split(".", 1)[1]
    staging = staging_modules(go_env)
    lines = [
        "module kappaflow.local/kubebuild",
        "",
        "go 1.26.0",
        "",
        "godebug default=go1.26",
        "",
        "require (",
        f"\tk8s.io/kubernetes {K8S_VERSION}",
        f"\tgo.etcd.io/etcd/server/v3 {ETCD_VERSION}",
        ")",
        "",
        "replace (",
        *(f"\t{m} => {m} {staging_version}" for m in staging),
        ")",
        "",
    ]
    (src / "go.mod").write_text("\n".join(lines))
    (src / "tools.go").write_text(
        "//go:build tools\n\npackage tools\n\nimport (\n"
        '\t_ "k8s.io/kubernetes/cmd/kube-apiserver"\n'
        '\t_ "k8s.io/kubernetes/cmd/kube-controller-manager"\n)\n'
    )
    (src / "etcd").mkdir(exist_ok=True)
    (src / "etcd" / "main.go").write_text(
        "// etcd, built from go.etcd.io/etcd/server/v3 exactly as its own main does.\n"
        'package main\n\nimport (\n\t"os"\n\n'
        '\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\nfunc main() { etcdmain.Main(os.Args) }\n'
    )


def build(force: bool = False) -> Path:
    """Build etcd, kube-apiserver and kube-controller-manager into the cache; returns the bin dir.

    Serialised with a lock file so that parallel test processes on a fresh machine build once.
    """
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
        raise RuntimeError("the Go toolchain (>= 1.26) is needed to build the Kubernetes control plane")
    src = root / "src"
    src.mkdir(parents=True, exist_ok=True)
    (root / "bin").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-trimpath -buildvcs=false", "GOTOOLCHAIN": "local"}
    started = time.monotonic()
    _log(f"writing wrapper module for k8s.io/kubernetes {K8S_VERSION} + etcd {ETCD_VERSION} in {src}")
    _write_wrapper(src, env)
    log_path = log_dir() / f"go-build-kube-{K8S_VERSION}.log"
    _log(f"resolving modules (go mod tidy; checksum-verified via go.sum); full log {log_path}")
    with log_path.open("w") as log:
        _go(["go", "mod", "tidy"], src, env, log, log_path)
    minor = K8S_VERSION.split(".")[1]
    ver = "k8s.io/component-base/version"
    ldflags = (
        f"-s -w -X {ver}.gitVersion={K8S_VERSION} -X {ver}.gitMajor=1 -X {ver}.gitMinor={minor}"
        f" -X {ver}.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion={K8S_VERSION}"
    )
    targets = {
        "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
        "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
        "etcd": "./etcd",
    }
    for name, pkg in targets.items():
        step = time.monotonic()
        _log(f"go build {name} (minutes on a cold cache) ...")
        out = root / "bin" / name
        with log_path.open("a") as log:
            _go(["go", "build", "-ldflags", ldflags, "-o", str(out) + ".tmp", pkg], src, env, log, log_path)
        os.replace(str(out) + ".tmp", out)
        _log(f"built {name} in {time.monotonic() - step:.0f}s")
    marker.write_text(f"{K8S_VERSION} etcd {ETCD_VERSION}\n")
    _log(f"control plane binaries ready in {root / 'bin'} ({time.monotonic() - started:.0f}s)")
    return root / "bin"


def _go(cmd: list[str], cwd: Path, env: dict[str, str], log: IO[str], log_path: Path) -> None:
    """Run a go command with its output in the build log; a failure names the log and shows its tail."""
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    code = subprocess.run(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
    if code != 0:
        tail = "".join(log_path.read_text().splitlines(keepends=True)[-30:])
        raise RuntimeError(f"{cmd[:2]} failed (exit {code}); full log {log_path}:\n{tail}")


def summary_line(bins: Path, status: str) -> str:
    """The one line `make test` prints for the control plane."""
    size = tree_size(p for p in bins.iterdir() if not p.name.startswith("."))
    version = f"{K8S_VERSION} (kube-apiserver, kube-controller-manager, etcd {ETCD_VERSION})"
    return component_line("Kubernetes control plane", version, status, size)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


_EC = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


def _issue(pki: Path, name: str, subject: str, extensions: str) -> None:
    """A key and a certificate signed by the test CA, with the given X.509v3 extensions."""
    _openssl("req", "-new", *_EC, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=pki)
    (pki / f"{name}.ext").write_text(extensions)
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "3650", "-sha256", "-extfile", f"{name}.ext", "-out", f"{name}.crt", cwd=pki,
    )  # fmt: skip


def generate_pki(pki: Path) -> None:
    """CA, API server serving cert, service-account key pair and two client certs (ECDSA: fast to make).

    The admin is in `system:masters` (bypasses RBAC); the controller-manager authenticates as
    `system:kube-controller-manager`, the identity the bootstrap RBAC policy grants its permissions to.
    """
    if (pki / "admin.crt").exists():
        return
    pki.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-new", *_EC, "-keyout", "ca.key", "-out", "ca.crt", "-days", "3650",
             "-subj", "/CN=kappaflow-test-ca", cwd=pki)  # fmt: skip
    names = (
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    )
    sans = ",".join(["IP:127.0.0.1", "IP:10.0.0.1", "DNS:localhost", *(f"DNS:{n}" for n in names)])
    server_ext = f"keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName={sans}\n"
    client_ext = "keyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n"
    _issue(pki, "apiserver", "/CN=kube-apiserver", server_ext)
    _issue(pki, "admin", "/O=system:masters/CN=kappaflow-admin", client_ext)
    _issue(pki, "controller-manager", "/CN=system:kube-controller-manager", client_ext)
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "sa.key", cwd=pki)
    _openssl("ec", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)
    for leftover in pki.glob("*.csr"):
        leftover.unlink()


def write_kubeconfig(path: Path, server: str, pki: Path, user: str) -> None:
    """A kubeconfig (JSON is valid YAML) referencing the certificate files by absolute path."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "kappaflow", "cluster": {"server": server, "certificate-authority": str(pki / "ca.crt")}}
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate": str(pki / f"{user}.crt"),
                    "client-key": str(pki / f"{user}.key"),
                },
            }
        ],
        "contexts": [{"name": "kappaflow", "context": {"cluster": "kappaflow", "user": user}}],
        "current-context": "kappaflow",
    }
    path.write_text(json.dumps(config, indent=2) + "\n")


def _alive(pid: int, binary: str) -> bool:
    """True when `pid` is running and is still our binary (pids get reused after a crash)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return Path(cmdline).name == binary and stat.rsplit(")", 1)[1].split()[0] != "Z"


def _die_with_parent() -> None:
    """Runs in the child between fork and exec: prctl(PR_SET_PDEATHSIG, SIGTERM)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)


@dataclass
class _Proc:
    name: str
    pid: int
    popen: subprocess.Popen[bytes] | None = None


class LocalControlPlane:
    """etcd + kube-apiserver + kube-controller-manager on 127.0.0.1, state under `workdir`.

    Processes run in their own sessions with pid files in `workdir`, so a different Python process
    (the CLI's `stop`) can stop a plane that `start` left running. There is no kubelet and no scheduler:
    see tests/harness/fake_kubelet.py for the stand-in that runs pods as local processes.
    """

    def __init__(
        self, workdir: Path | str, binaries: Path | None = None, tie_to_parent: bool = False
    ) -> None:
        """`tie_to_parent`: the kernel SIGTERMs the processes if this Python process dies (a test run that
        is killed must not leave an API server behind); the CLI's detached `start` leaves it off."""
        self.workdir = Path(workdir).resolve()
        self.binaries = binaries
        self.tie_to_parent = tie_to_parent
        self.pki = self.workdir / "pki"
        self.kubeconfig = self.workdir / "admin.kubeconfig"
        self.server = ""
        self._procs: list[_Proc] = []

    # ---- lifecycle -------------------------------------------------------------------------------------
    def start(self, timeout: float = 120.0) -> None:
        bins = self.binaries or build()
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.running():
            raise RuntimeError(f"a control plane is already running in {self.workdir}")
        started = time.monotonic()
        generate_pki(self.pki)
        etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
        self.server = f"https://127.0.0.1:{api_port}"
        write_kubeconfig(self.kubeconfig, self.server, self.pki, "admin")
        kcm_kubeconfig = self.workdir / "controller-manager.kubeconfig"
        write_kubeconfig(kcm_kubeconfig, self.server, self.pki, "controller-manager")
        etcd_url, peer_url = f"http://127.0.0.1:{etcd_port}", f"http://127.0.0.1:{peer_port}"
        try:
            self._spawn(bins, "etcd", [
                "--name=kappaflow", f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=kappaflow={peer_url}", "--log-level=warn",
                # A test cluster's data is disposable: skipping fsync makes every write much cheaper.
                "--unsafe-no-fsync", "--quota-backend-bytes=1073741824", "--snapshot-count=5000",
            ])  # fmt: skip
            self._wait_tcp(etcd_port, timeout)
            pki = self.pki
            self._spawn(bins, "kube-apiserver", [
                f"--etcd-servers={etcd_url}", "--bind-address=127.0.0.1", f"--secure-port={api_port}",
                "--advertise-address=127.0.0.1", f"--cert-dir={self.workdir / 'certs'}",
                f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}", "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-cluster-ip-range=10.0.0.0/24", "--allow-privileged=true",
                # A loopback address may not appear in Endpoints, so the "kubernetes" Service gets none.
                "--endpoint-reconciler-type=none", "--profiling=false", "--v=1",
            ])  # fmt: skip
            self._wait_ready(timeout - (time.monotonic() - started))
            self._spawn(bins, "kube-controller-manager", [
                f"--kubeconfig={kcm_kubeconfig}", "--secure-port=0", "--leader-elect=false",
                f"--controllers={','.join(CONTROLLERS)}", "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'ca.crt'}",
                "--cluster-name=kappaflow", "--profiling=false", "--v=1",
            ])  # fmt: skip
            self._wait_api_object("/api/v1/namespaces/default/serviceaccounts/default", timeout, started)
        except BaseException:
            self.stop()
            raise
        (self.workdir / "state.json").write_text(
            json.dumps({"server": self.server, "kubeconfig": str(self.kubeconfig), "version": K8S_VERSION})
        )
        _log(f"control plane ready at {self.server} in {time.monotonic() - started:.1f}s")

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM in reverse start order (controller-manager, apiserver, etcd), SIGKILL after `grace`."""
        for name in reversed(BINARIES):
            proc = self._find(name)
            if proc is None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while _alive(proc.pid, name) and time.monotonic() < deadline:
                if proc.popen is not None and proc.popen.poll() is not None:
                    break
                time.sleep(0.05)
            if _alive(proc.pid, name):
                os.kill(proc.pid, signal.SIGKILL)
            if proc.popen is not None:
                proc.popen.wait()
            (self.workdir / f"{name}.pid").unlink(missing_ok=True)
        self._procs.clear()
        (self.workdir / "state.json").unlink(missing_ok=True)

    def running(self) -> dict[str, int]:
        """name -> pid of the components that are alive (from this object or the pid files)."""
        return {n: p.pid for n in BINARIES if (p := self._find(n)) is not None and _alive(p.pid, n)}

    def ready(self) -> bool:
        state = self.workdir / "state.json"
        if not state.exists():
            return False
        self.server = json.loads(state.read_text())["server"]
        try:
            return self._get("/readyz", timeout=2.0) == b"ok"
        except (OSError, urllib.error.URLError):
            return False

    def __enter__(self) -> LocalControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- internals ---------------------------------------------------------------------------------------
    def _spawn(self, bins: Path, name: str, args: list[str]) -> None:
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child from here on
        try:
            popen = subprocess.Popen(
                [str(bins / name), *args], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=self.workdir, start_new_session=True,
                preexec_fn=_die_with_parent if self.tie_to_parent else None,
            )  # fmt: skip
        finally:
            log.close()
        (self.workdir / f"{name}.pid").write_text(str(popen.pid))
        self._procs.append(_Proc(name, popen.pid, popen))

    def _find(self, name: str) -> _Proc | None:
        for proc in self._procs:
            if proc.name == name:
                return proc
        pidfile = self.workdir / f"{name}.pid"
        if pidfile.exists() and _alive(pid := int(pidfile.read_text()), name):
            return _Proc(name, pid)
        return None

    def _check_alive(self) -> None:
        for proc in self._procs:
            if proc.popen is not None and proc.popen.poll() is not None:
                tail = (self.workdir / f"{proc.name}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode}:\n{tail}")

    def _wait_tcp(self, port: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.1)
        raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout:.0f}s")

    def _ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return ctx

    def _get(self, path: str, timeout: float = 5.0) -> bytes:
        with urllib.request.urlopen(self.server + path, context=self._ssl_context(), timeout=timeout) as resp:
            return bytes(resp.read())

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                if self._get("/readyz", timeout=2.0) == b"ok":
                    return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.2)
        raise TimeoutError(
            f"kube-apiserver not ready after {timeout:.0f}s; see {self.workdir}/kube-apiserver.log"
        )

    def _wait_api_object(self, path: str, timeout: float, started: float) -> None:
        deadline = started + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                self._get(path)
                return
            except (OSError, urllib.error.URLError):
                time.sleep(0.2)
        raise TimeoutError(f"{path} did not appear; see {self.workdir}/kube-controller-manager.log")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.harness.kube_control_plane", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("command", choices=["build", "start", "stop", "status"])
    parser.add_argument("--dir", default=".run/kube", help="work directory (pid files, logs, etcd data)")
    parser.add_argument("--force", action="store_true", help="build: rebuild even if the marker exists")
    args = parser.parse_args(argv)
    if args.command == "build":
        cached = (bin_dir() / ".complete").exists() and not args.force
        print(summary_line(build(force=args.force), "cached" if cached else "built"), flush=True)
        return 0
    plane = LocalControlPlane(args.dir)
    if args.command == "start":
        plane.start()
        print(plane.kubeconfig)
    elif args.command == "stop":
        plane.stop()
    else:
        running = plane.running()
        ready = plane.ready()
        print(json.dumps({"running": running, "ready": ready, "server": plane.server or None}))
        return 0 if ready else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
