"""What the node changes on the host, and how teardown puts it back.

The node adds a bridge, a route, three FORWARD rules; the kubelet, kube-proxy and the CNI plugins add
iptables chains and set sysctls; the kubelet and containerd create a few fixed host paths. `snapshot()`
records all of it before start; `restore(before)` undoes what differs; `compare()` is the selftest's
check that the host after teardown equals the host before start.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tests.harness.realnode import settings as s

FWD_RULES = (  # inserted at the top of FORWARD, in this order
    f"-i {s.BRIDGE} -o {s.BRIDGE} -m comment --comment kappaflow-real-node:pod-to-pod -j ACCEPT",
    f"-i {s.BRIDGE} -m comment --comment kappaflow-real-node:pods-stay-local -j DROP",
    f"-o {s.BRIDGE} -m comment --comment kappaflow-real-node:nothing-routed-in -j DROP",
)
# Set by the kubelet (vm.*, kernel.*), the CNI bridge plugin (ip_forward) or kube-proxy (the rest, which
# its flags leave alone): saved before start, restored by teardown.
SYSCTLS = (
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "net.ipv4.ip_forward",
    "net.ipv4.conf.all.route_localnet",
    "net.bridge.bridge-nf-call-iptables",
    "net.bridge.bridge-nf-call-ip6tables",
    "net.netfilter.nf_conntrack_max",
    "net.netfilter.nf_conntrack_tcp_timeout_established",
    "net.netfilter.nf_conntrack_tcp_timeout_close_wait",
)
# Host paths fixed in upstream code (no setting moves them), deepest first: "tree" = remove with contents,
# "empty" = remove when empty; only when the node created them.
FIXED_PATHS = (
    ("/var/lib/kubelet/device-plugins", "tree"),
    ("/var/lib/kubelet", "empty"),
    ("/var/log/containers", "tree"),
    ("/var/lib/cni/results", "tree"),
    ("/var/lib/cni", "empty"),
    ("/run/netns", "empty"),
    ("/run/containerd/s", "empty"),
    ("/run/containerd", "empty"),
)


def run(*argv: object, check: bool = True, **kw: Any) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=False, **kw)
    if check and p.returncode:
        raise RuntimeError(f"failed ({p.returncode}): {shlex.join(str(a) for a in argv)}\n{p.stderr[-3000:]}")
    return p


def quiet(*argv: object) -> int:
    return subprocess.run([str(a) for a in argv], capture_output=True, check=False).returncode


def under(path: str, *roots: Path) -> bool:
    return any(path == str(r) or path.startswith(str(r) + "/") for r in roots)


def mountpoints() -> list[str]:
    lines = Path("/proc/self/mounts").read_text().splitlines()
    return [line.split()[1].replace("\\040", " ") for line in lines]


def safe_rmtree(path: Path) -> None:
    """rm -rf, refused while anything is mounted below (a bind mount would take host data with it)."""
    if not any(under(m, path) for m in mountpoints()):
        shutil.rmtree(path, ignore_errors=True)


def chains() -> list[list[str]]:
    """[iptables binary, table, chain] for every chain of the host."""
    out = []
    for ipt in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle", "raw"):
            lines = run(ipt, "-w", "-t", table, "-S", check=False).stdout.splitlines()
            out += [[ipt, table, line.split()[1]] for line in lines if line.startswith(("-N ", "-P "))]
    return out


def sysctls() -> dict[str, str]:
    out = {}
    for key in SYSCTLS:
        p = run("sysctl", "-n", key, check=False)
        if p.returncode == 0:
            out[key] = p.stdout.strip()
    return out


def netns_names() -> list[str]:
    return sorted(p.name for p in Path("/run/netns").glob("*")) if Path("/run/netns").is_dir() else []


def kubepods_dirs() -> list[Path]:
    """The kubelet's top cgroup in every hierarchy (cgroup v1 controllers, or the v2 root)."""
    root = Path("/sys/fs/cgroup")
    return [d / "kubepods" for d in [root, *root.iterdir()] if (d / "kubepods").is_dir()]


def record() -> dict[str, Any]:
    """Everything teardown must put back, taken before anything changes the host."""
    return {
        "sysctls": sysctls(),
        "chains": chains(),
        "netns": netns_names(),
        "paths": [p for p, _ in FIXED_PATHS if os.path.lexists(p)],
        "kubepods": [str(p) for p in kubepods_dirs()],
    }


def network_up() -> None:
    """The CNI bridge with the host's address on it (the CNI bridge plugin adopts it), a route that keeps
    Service IPs on it, and FORWARD rules: bridge to bridge accepted (docker sets FORWARD's policy to
    DROP), nothing forwarded out of or into the bridge (pods have no default route either)."""
    if quiet("ip", "link", "show", s.BRIDGE):
        run("ip", "link", "add", s.BRIDGE, "type", "bridge")
    if s.HOST_IP not in run("ip", "-o", "addr", "show", "dev", s.BRIDGE).stdout:
        run("ip", "addr", "add", f"{s.HOST_IP}/{s.POD_CIDR.prefixlen}", "dev", s.BRIDGE)
    run("ip", "link", "set", s.BRIDGE, "up")
    run("ip", "route", "replace", s.SERVICE_CIDR, "dev", s.BRIDGE, "src", s.HOST_IP)
    for n, rule in enumerate(FWD_RULES, 1):
        if quiet("iptables", "-w", "-C", "FORWARD", *rule.split()):
            run("iptables", "-w", "-I", "FORWARD", n, *rule.split())


def _drop_new_chains(before: list[list[str]]) -> None:
    """Remove the KUBE-*/CNI-* chains that were not there before (the kubelet's KUBE-FIREWALL and canaries,
    anything kube-proxy --cleanup left, portmap's CNI-HOSTPORT-*), with every rule that jumps to them."""
    old = {tuple(c) for c in before}
    for ipt in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle", "raw"):
            rules = run(ipt, "-w", "-t", table, "-S", check=False).stdout.splitlines()
            new = {
                r.split()[1]
                for r in rules
                if r.startswith("-N ")
                and r.split()[1].startswith(("KUBE-", "CNI-"))
                and (ipt, table, r.split()[1]) not in old
            }
            if not new:
                continue
            for line in rules:
                args = shlex.split(line)
                if (
                    args[0] == "-A"
                    and "-j" in args
                    and args[args.index("-j") + 1] in new
                    and args[1] not in new
                ):
                    run(ipt, "-w", "-t", table, "-D", *args[1:], check=False)
            for chain in new:
                run(ipt, "-w", "-t", table, "-F", chain, check=False)
            for chain in new:
                run(ipt, "-w", "-t", table, "-X", chain, check=False)


def restore(before: dict[str, Any], proxy_ran: bool, log: Any) -> None:
    """Undo the node's host changes, after its daemons and containers are gone."""
    if proxy_ran:
        run(s.BIN / "kube-proxy", "--cleanup", check=False)
    for rule in FWD_RULES:
        while quiet("iptables", "-w", "-D", "FORWARD", *rule.split()) == 0:
            pass
    if before:  # without the state saved at start, no chain is known to be the node's own
        _drop_new_chains(before["chains"])
    if quiet("ip", "route", "show", str(s.SERVICE_CIDR), "dev", s.BRIDGE) == 0:
        quiet("ip", "route", "del", str(s.SERVICE_CIDR), "dev", s.BRIDGE)
    for ns in set(netns_names()) - set(before.get("netns", netns_names())):
        if ns.startswith("cni-"):
            quiet("ip", "netns", "delete", ns)
    for m in sorted((m for m in mountpoints() if under(m, s.STATE, s.RUN)), key=len, reverse=True):
        quiet("umount", "-l", m)
    quiet("ip", "link", "del", s.BRIDGE)
    for top in kubepods_dirs() if before else []:
        if str(top) not in before.get("kubepods", []):
            dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
            for d in [*dirs, top]:
                with contextlib.suppress(OSError):
                    d.rmdir()
    now = sysctls()
    for key, value in before.get("sysctls", {}).items():
        if now.get(key) != value:
            run("sysctl", "-qw", f"{key}={value}", check=False)
            log(f"restored {key}={value} (was {now.get(key)})")
    containers = Path("/var/log/containers")
    for link in containers.glob("*.log") if containers.is_dir() else []:
        if link.is_symlink() and os.readlink(link).startswith(str(s.STATE)):
            link.unlink()
    results = Path("/var/lib/cni/results")
    for f in results.glob("kappaflow-real-node-*") if results.is_dir() else []:
        f.unlink()
    if before:
        for path, how in FIXED_PATHS:
            if path not in before["paths"] and os.path.lexists(path):
                if how == "tree":
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        os.rmdir(path)


def snapshot() -> dict[str, Any]:
    """The host's network, sysctl, mount, path and cgroup state, for comparing before and after."""

    def save(ipt: str) -> list[str]:
        """The effective ruleset: rules, user chains and built-in policies other than ACCEPT, per table.
        A table that only appeared because something listed it (built-in chains, ACCEPT, no rules) filters
        nothing, and the node's own look at the chains before start loads the mangle/raw tables."""
        table, kept = "", []
        for line in run(f"{ipt}-save", check=False).stdout.splitlines():
            if line.startswith("*"):
                table = line[1:]
            elif line.startswith("-A") or (line.startswith(":") and line.split()[1] != "ACCEPT"):
                kept.append(f"{table} " + re.sub(r"\[\d+:\d+\]", "", line).strip())
        return kept

    links = run("ip", "-o", "link").stdout.splitlines()
    return {
        "iptables": save("iptables"),
        "ip6tables": save("ip6tables"),
        "sysctls": sysctls(),
        "links": sorted(
            r.split(":")[1].strip().split("@")[0]
            for r in links
            if not r.split(":")[1].strip().startswith("veth")
        ),
        "routes": run("ip", "route").stdout.splitlines(),
        "netns": netns_names(),
        "mounts": sorted(m for m in mountpoints() if not m.startswith(("/var/lib/docker", "/run/docker"))),
        "paths": [p for p, _ in FIXED_PATHS if os.path.lexists(p)] + [str(s.RUN)] * s.RUN.exists(),
        "cgroups": sorted(str(p) for p in Path("/sys/fs/cgroup").glob("*/kubepods")),
    }


def compare(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What differs, one line per item; empty when the host is as it was."""
    out = []
    for key in before:
        b, a = before[key], after[key]
        if b == a:
            continue
        if isinstance(b, list):
            out.append(f"{key}: removed {sorted(set(b) - set(a))} added {sorted(set(a) - set(b))}")
        else:
            out.append(f"{key}: {b} -> {a}")
    return out
