"""Where the real node keeps things, and the fixed facts of its network: one owner for every path and
address the other modules use.

All settings come from `KAPPAFLOW_REAL_NODE_*` environment variables with defaults under
`${KAPPAFLOW_CACHE:-~/.cache/kappaflow}/real-node` (kept between runs: binaries, PKI, the containerd image
store) and `/run/kappaflow-real-node` (sockets and runtime state, removed by teardown).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path

K8S_VERSION = "v1.36.3"
CONTAINERD_VERSION = "v2.4.2"
COREDNS_VERSION = "v1.14.7"
LOCAL_PATH_VERSION = "v0.0.30"
#: The node's own binaries; etcd, kube-apiserver and kube-controller-manager come from the control-plane
#: harness's cache (tests/harness/kube_control_plane.py builds them; the Go build cache is shared).
NODE_BINARIES = ("kube-scheduler", "kubelet", "kube-proxy", "kubectl")
CONTROL_PLANE_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager")
CONTAINERD_BINARIES = ("containerd", "containerd-shim-runc-v2", "ctr")
HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"


def _env(name: str, default: object) -> str:
    return os.environ.get(f"KAPPAFLOW_REAL_NODE_{name}") or str(default)


KAPPAFLOW_CACHE = Path(os.environ.get("KAPPAFLOW_CACHE") or Path.home() / ".cache" / "kappaflow")
CACHE = Path(_env("CACHE", KAPPAFLOW_CACHE / "real-node"))
BIN = Path(_env("BIN", CACHE / "bin" / f"kubernetes-{K8S_VERSION}"))
CONTAINERD_BIN = Path(_env("CONTAINERD_BIN", CACHE / "bin" / f"containerd-{CONTAINERD_VERSION}"))
COREDNS_BIN = CACHE / "bin" / f"coredns-{COREDNS_VERSION}"
LOCAL_PATH_BIN = CACHE / "bin" / f"local-path-provisioner-{LOCAL_PATH_VERSION}"
CONF = Path(_env("CONF", CACHE / "conf"))
STATE = Path(_env("STATE", CACHE / "state"))
RUN = Path(_env("RUN", "/run/kappaflow-real-node"))
CNI_BIN = Path(_env("CNI_BIN", "/usr/lib/cni"))
IMAGE_STORE = Path(_env("IMAGE_STORE", CACHE / "images" / "containerd-2"))
PKI = STATE / "pki"
LOGS = STATE / "logs"
SOCK = RUN / "containerd.sock"
STATE_FILE = STATE / "state.json"
ADMIN_KUBECONFIG = STATE / "admin.kubeconfig"

POD_CIDR = ipaddress.ip_network(_env("POD_CIDR", "10.244.0.0/24"))
#: The bridge's address. Pods reach the host's servers here (the API server, cluster DNS, a broker on
#: the host), and the host reaches the API server here too, so there is one server URL for both.
HOST_IP = str(next(POD_CIDR.hosts()))
SERVICE_CIDR = ipaddress.ip_network(_env("SERVICE_CIDR", "10.96.0.0/16"))
KUBERNETES_SERVICE_IP = str(next(SERVICE_CIDR.hosts()))
CLUSTER_DOMAIN = "cluster.local"
BRIDGE = _env("BRIDGE", "kfnode0")
#: The node name must resolve to 127.0.0.1: the API server dials the kubelet by that name.
NODE = _env("NODE_NAME", socket.gethostname())
PAUSE_IMAGE = "kappaflow.local/pause:3.10"
#: The image local-path-provisioner runs its volume set-up pods from (never pulled).
BASE_IMAGE = "kappaflow.local/debian:bookworm"
STORAGE_CLASS = "standard"  # kind's name for its default (local-path) class: the same manifests work on both
