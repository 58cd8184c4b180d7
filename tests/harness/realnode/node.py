"""Start and tear down the real one-node cluster.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler, a real kubelet, kube-proxy (iptables mode),
a second containerd with runc and the CNI bridge, CoreDNS for the cluster zone, and local-path-provisioner
as the default StorageClass. The recipe and every gotcha are in shared/real-node/README.md; what differs
here, and why:

- The API server serves on the bridge address, not 127.0.0.1, and advertises it: the `kubernetes`
  Service then has a real endpoint and a pod (the operator, a Spark driver) reaches the API through
  its in-cluster config like on any cluster, with no hostNetwork and no environment override.
- CoreDNS (built from its Go module, run on the host) answers the cluster zone on the bridge address,
  where the kubelet points every pod: Services and StatefulSet pod names resolve as everywhere; every
  other name is NXDOMAIN, so no query leaves the machine.
- The default StorageClass is local-path, named `standard` like kind's, so a non-root pod's volume is
  writable (the in-tree hostPath provisioner makes root-only 0750 directories and ignores fsGroup).

Traffic stays on loopback, the bridge and the pods' own network namespaces; every image pull goes to a
closed loopback port, so only images imported from the local docker (`make images`) can run.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import string
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.harness.realnode import binaries, daemons, host
from tests.harness.realnode import settings as s
from tests.harness.realnode.images_store import drop_cri_dirs, drop_orphans, import_images, purge_containers

T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[real-node {time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def render(template: str, **extra: object) -> str:
    values: dict[str, object] = {
        "IMAGE_STORE": s.IMAGE_STORE,
        "RUN": s.RUN,
        "CONF": s.CONF,
        "STATE": s.STATE,
        "CNI_BIN": s.CNI_BIN,
        "BRIDGE": s.BRIDGE,
        "POD_CIDR": s.POD_CIDR,
        "HOST_IP": s.HOST_IP,
        "SERVICE_CIDR": s.SERVICE_CIDR,
        "PAUSE_IMAGE": s.PAUSE_IMAGE,
        "BASE_IMAGE": s.BASE_IMAGE,
        "CLUSTER_DOMAIN": s.CLUSTER_DOMAIN,
        "STORAGE_CLASS": s.STORAGE_CLASS,
        **extra,
    }
    text = (s.TEMPLATES / template).read_text()
    return string.Template(text).substitute({k: str(v) for k, v in values.items()})


def kubectl_argv() -> list[str]:
    return [str(s.BIN / "kubectl"), f"--kubeconfig={s.ADMIN_KUBECONFIG}"]


def kubectl(*args: str, check: bool = True, **kw: Any) -> subprocess.CompletedProcess[str]:
    return host.run(*kubectl_argv(), "--request-timeout=30s", *args, check=check, **kw)


def _kubeconfig(user: str, server: str) -> Path:
    path = s.STATE / f"{user}.kubeconfig"
    cluster = {"server": server, "certificate-authority": str(s.PKI / "ca.crt")}
    credentials = {"client-certificate": str(s.PKI / f"{user}.crt"), "client-key": str(s.PKI / f"{user}.key")}
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "real-node",
                "clusters": [{"name": "real-node", "cluster": cluster}],
                "users": [{"name": user, "user": credentials}],
                "contexts": [{"name": "real-node", "context": {"cluster": "real-node", "user": user}}],
            },
            indent=1,
        )
    )
    return path


def _api(server: str, path: str) -> bytes:
    ctx = ssl.create_default_context(cafile=str(s.PKI / "ca.crt"))
    ctx.load_cert_chain(str(s.PKI / "admin.crt"), str(s.PKI / "admin.key"))
    with urllib.request.urlopen(server + path, context=ctx, timeout=3) as r:
        body: bytes = r.read()
        return body


def _tcp_open(address: str, port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex((address, port)) == 0


def preflight() -> None:
    """Root, the capabilities, binaries, runc and CNI plugins, overlay, and a node name that resolves to
    127.0.0.1; each missing piece named."""
    problems = []
    if os.geteuid() != 0:
        problems.append("a real node needs root")
    problems += binaries.missing()
    problems += [
        n for n in ("runc", "ip", "iptables", "ip6tables", "openssl", "sysctl") if not shutil.which(n)
    ]
    cni = ("bridge", "host-local", "portmap", "loopback")
    problems += [str(s.CNI_BIN / n) for n in cni if not (s.CNI_BIN / n).exists()]
    if "overlay" not in Path("/proc/filesystems").read_text():
        problems.append("the kernel has no overlay filesystem")
    try:
        address = socket.gethostbyname(s.NODE)
    except OSError:
        address = "nothing"
    if not address.startswith("127."):
        problems.append(
            f"node name {s.NODE!r} resolves to {address}, not 127.0.0.1 (KAPPAFLOW_REAL_NODE_NODE_NAME)"
        )
    if problems:
        raise RuntimeError("the real node cannot start: " + "; ".join(problems))


def _leftovers() -> bool:
    return (
        any(s.STATE.glob("*.pid"))
        or (s.STATE / "host-before.json").exists()
        or s.RUN.exists()
        or host.quiet("ip", "link", "show", s.BRIDGE) == 0
    )


def _write_configs(kubelet_port: int, kubelet_healthz: int, server: str) -> None:
    for d in (s.STATE, s.LOGS, s.RUN, s.CONF / "certs.d" / "_default", s.CONF / "cni", s.IMAGE_STORE):
        d.mkdir(parents=True, exist_ok=True)
    os.chmod(s.RUN, 0o700)
    host.run(s.HERE / "pki.sh", s.PKI, s.NODE, s.KUBERNETES_SERVICE_IP, s.HOST_IP)
    for user in ("admin", "controller-manager", "scheduler", "kubelet", "kube-proxy"):
        _kubeconfig(user, server)
    (s.CONF / "containerd-2.toml").write_text(render("containerd-2.toml"))
    (s.CONF / "certs.d" / "_default" / "hosts.toml").write_text((s.TEMPLATES / "hosts.toml").read_text())
    (s.CONF / "cni" / "10-kappaflow-real-node.conflist").write_text(render("cni.conflist"))
    (s.CONF / "resolv.conf").write_text((s.TEMPLATES / "resolv.conf").read_text())
    (s.CONF / "Corefile").write_text(render("Corefile", KUBECONFIG=s.ADMIN_KUBECONFIG))
    (s.CONF / "kubelet-config.yaml").write_text(
        render("kubelet-config.yaml", KUBELET_PORT=kubelet_port, KUBELET_HEALTHZ_PORT=kubelet_healthz)
    )


def _containerd(procs: daemons.Daemons) -> None:
    env = {**os.environ, "PATH": f"{s.CONTAINERD_BIN}:{os.environ.get('PATH', '')}"}  # its own shim first
    procs.spawn(
        "containerd", [s.CONTAINERD_BIN / "containerd", "--config", s.CONF / "containerd-2.toml"], env
    )
    ctr = [s.CONTAINERD_BIN / "ctr", "-a", s.SOCK]
    procs.wait("containerd up", lambda: host.quiet(*ctr, "version") == 0, 60, log)
    if ids := purge_containers():  # records of a node that crashed: start clean
        daemons.stop("containerd", log)
        drop_cri_dirs(ids)
        procs.started.clear()
        procs.spawn(
            "containerd", [s.CONTAINERD_BIN / "containerd", "--config", s.CONF / "containerd-2.toml"], env
        )
        procs.wait(
            "containerd restarted without an earlier node's containers",
            lambda: host.quiet(*ctr, "version") == 0,
            60,
            log,
        )


def _control_plane(procs: daemons.Daemons, server: str, api_port: int) -> None:
    etcd_port, peer_port = free_port(), free_port()
    client, peer = f"http://127.0.0.1:{etcd_port}", f"http://127.0.0.1:{peer_port}"
    procs.spawn(
        "etcd",
        [
            s.BIN / "etcd",
            "--name=real-node",
            f"--data-dir={s.STATE / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=real-node={peer}",
            "--log-level=warn",
            "--unsafe-no-fsync",
            "--quota-backend-bytes=1073741824",
        ],
    )
    procs.wait("etcd listening", lambda: _tcp_open("127.0.0.1", etcd_port), 60, log)
    pki = s.PKI
    procs.spawn(
        "kube-apiserver",
        [
            s.BIN / "kube-apiserver",
            f"--etcd-servers={client}",
            f"--bind-address={s.HOST_IP}",
            f"--advertise-address={s.HOST_IP}",
            f"--secure-port={api_port}",
            f"--cert-dir={s.STATE / 'apiserver-certs'}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            f"--service-account-issuer=https://kubernetes.default.svc.{s.CLUSTER_DOMAIN}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={s.SERVICE_CIDR}",
            "--allow-privileged=true",
            f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
            "--kubelet-preferred-address-types=Hostname",
            "--profiling=false",
            "--v=1",
        ],
    )
    procs.wait("API server ready", lambda: _api(server, "/readyz") == b"ok", 180, log)
    procs.spawn(
        "kube-controller-manager",
        [
            s.BIN / "kube-controller-manager",
            f"--kubeconfig={s.STATE / 'controller-manager.kubeconfig'}",
            "--secure-port=0",
            "--leader-elect=false",
            "--controllers=*",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}",
            f"--cluster-signing-key-file={pki / 'ca.key'}",
            "--cluster-name=real-node",
            f"--flex-volume-plugin-dir={s.STATE / 'volume-plugins'}",
            "--profiling=false",
            "--v=1",
        ],
    )
    kubeconfig = s.STATE / "scheduler.kubeconfig"
    procs.spawn(
        "kube-scheduler",
        [
            s.BIN / "kube-scheduler",
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            "--profiling=false",
            "--v=1",
        ],
    )


def kubelet_argv() -> list[object]:
    return [
        s.BIN / "kubelet",
        f"--config={s.CONF / 'kubelet-config.yaml'}",
        f"--kubeconfig={s.STATE / 'kubelet.kubeconfig'}",
        f"--root-dir={s.STATE / 'kubelet'}",
        f"--hostname-override={s.NODE}",
        "--v=1",
    ]


def _node(procs: daemons.Daemons) -> None:
    procs.spawn("kubelet", kubelet_argv())
    (s.STATE / "kube-proxy.used").touch()
    procs.spawn(
        "kube-proxy",
        [
            s.BIN / "kube-proxy",
            f"--kubeconfig={s.STATE / 'kube-proxy.kubeconfig'}",
            "--proxy-mode=iptables",
            f"--cluster-cidr={s.POD_CIDR}",
            f"--hostname-override={s.NODE}",
            "--bind-address=127.0.0.1",
            f"--metrics-bind-address=127.0.0.1:{free_port()}",
            f"--healthz-bind-address=127.0.0.1:{free_port()}",
            # zeros leave the host's conntrack sysctls alone; NodePorts only on the bridge address
            "--conntrack-max-per-core=0",
            "--conntrack-tcp-timeout-established=0",
            "--conntrack-tcp-timeout-close-wait=0",
            f"--nodeport-addresses={s.HOST_IP}/32",
            "--v=1",
        ],
    )
    procs.spawn("coredns", [s.COREDNS_BIN / "coredns", "-conf", s.CONF / "Corefile", "-dns.port", "53"])


def start(images: list[str], attached: bool) -> dict[str, Any]:
    """Start the node and import IMAGES (docker names) into its containerd; returns state.json's
    content. `attached`: the daemons die with this process (tests); otherwise they keep running."""
    started = time.monotonic()
    preflight()
    if running := daemons.running():
        raise RuntimeError(
            f"a real node is running ({', '.join(running)}): use it, or `make cluster-down` first"
        )
    if _leftovers():
        log("found leftovers of an earlier node: tearing down first")
        teardown()
    if any(host.under(m, s.STATE, s.RUN) for m in host.mountpoints()):
        raise RuntimeError(f"mounts remain under {s.STATE} or {s.RUN}; run `make cluster-down`")
    for d in (
        "etcd",
        "kubelet",
        "cni-ipam",
        "local-path",
        "logs",
        "pod-logs",
        "volume-plugins",
        "apiserver-certs",
    ):
        host.safe_rmtree(s.STATE / d)
    s.STATE.mkdir(parents=True, exist_ok=True)
    (s.STATE / "host-before.json").write_text(json.dumps(host.record()))
    api_port = free_port()
    server = f"https://{s.HOST_IP}:{api_port}"
    kubelet_port, kubelet_healthz = free_port(), free_port()
    _write_configs(kubelet_port, kubelet_healthz, server)
    procs = daemons.Daemons(attached)
    host.network_up()  # before the API server: it serves on the bridge address
    _containerd(procs)
    import_images([s.PAUSE_IMAGE, s.BASE_IMAGE, *images], log)
    _control_plane(procs, server, api_port)
    _node(procs)

    def node_ready() -> bool:
        node = json.loads(_api(server, f"/api/v1/nodes/{s.NODE}"))
        return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])

    procs.wait(f"node {s.NODE} Ready", node_ready, 180, log)
    kubectl("apply", "-f", "-", input=render("local-path.yaml", LOCAL_PATH_DIR=s.STATE / "local-path"))
    procs.spawn(
        "local-path-provisioner",
        [
            s.LOCAL_PATH_BIN / "local-path-provisioner",
            "start",
            f"--kubeconfig={s.ADMIN_KUBECONFIG}",
            "--namespace=local-path-storage",
            "--configmap-name=local-path-config",
            "--service-account-name=local-path-provisioner",
            f"--helper-image={s.BASE_IMAGE}",
            "--provisioner-name=rancher.io/local-path",
        ],
    )
    procs.wait(
        "default service account",
        lambda: _api(server, "/api/v1/namespaces/default/serviceaccounts/default"),
        120,
        log,
    )
    info = {
        "server": server,
        "kubeconfig": str(s.ADMIN_KUBECONFIG),
        "node": s.NODE,
        "host_ip": s.HOST_IP,
        "pod_cidr": str(s.POD_CIDR),
        "service_cidr": str(s.SERVICE_CIDR),
        "cluster_dns": s.HOST_IP,
        "storage_class": s.STORAGE_CLASS,
        "images": images,
        "attached_to": os.getpid() if attached else None,
    }
    s.STATE_FILE.write_text(json.dumps(info, indent=1))
    log(f"ready in {time.monotonic() - started:.1f}s: export KUBECONFIG={s.ADMIN_KUBECONFIG}")
    return info


def running_info() -> dict[str, Any] | None:
    """state.json of a node whose API server answers, else None."""
    if not s.STATE_FILE.exists() or not daemons.pid_of("kube-apiserver") or not daemons.pid_of("kubelet"):
        return None
    info: dict[str, Any] = json.loads(s.STATE_FILE.read_text())
    try:
        return info if _api(info["server"], "/readyz") == b"ok" else None
    except OSError:
        return None


def restart_kubelet() -> None:
    """SIGKILL the kubelet and start it again, as a node agent crash and restart would."""
    daemons.kill("kubelet")
    while daemons.pid_of("kubelet"):
        time.sleep(0.05)
    info = json.loads(s.STATE_FILE.read_text())
    daemons.Daemons(attached=info.get("attached_to") == os.getpid()).spawn("kubelet", kubelet_argv())


def teardown() -> None:
    """Delete the workloads, end the daemons and undo every host change; also works after a crash."""
    started = time.monotonic()
    before_file = s.STATE / "host-before.json"
    before = json.loads(before_file.read_text()) if before_file.exists() else {}
    if daemons.pid_of("kube-apiserver") and daemons.pid_of("kubelet") and s.ADMIN_KUBECONFIG.exists():
        # the kubelet unmounts volumes and removes sandboxes (and their network namespaces) itself
        kinds = "statefulsets,deployments,replicasets,daemonsets,jobs,pods"
        kubectl(
            "delete", kinds, "--all", "-A", "--grace-period=1", "--wait=true", "--timeout=60s", check=False
        )
        kubectl("delete", "pvc", "--all", "-A", "--wait=true", "--timeout=30s", check=False)
        kubectl("wait", "--for=delete", "pv", "--all", "--timeout=30s", check=False)
    for name in daemons.ORDER[:-1]:
        daemons.stop(name, log)
    ids = purge_containers() if daemons.pid_of("containerd") else []
    daemons.stop("containerd", log)
    drop_cri_dirs(ids)
    drop_orphans(log)
    proxy_ran = (s.STATE / "kube-proxy.used").exists()
    host.restore(before, proxy_ran, log)
    (s.STATE / "kube-proxy.used").unlink(missing_ok=True)
    host.safe_rmtree(s.RUN)
    for d in ("etcd", "kubelet", "cni-ipam", "local-path", "volume-plugins"):
        host.safe_rmtree(s.STATE / d)
    for f in ("host-before.json", "state.json"):
        (s.STATE / f).unlink(missing_ok=True)
    log(f"teardown done in {time.monotonic() - started:.1f}s")
