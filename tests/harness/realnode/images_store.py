"""The node's containerd image store: images imported from the local docker, and no containers left
behind.

Images come only from `docker save | ctr import` (a pull goes to a closed loopback port). An image is
imported again only when its docker ID differs from the one recorded in a label on the containerd image,
so a warm store skips the import. Teardown removes every task, container and sandbox so the cached store
carries only images into the next start.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.harness.realnode import host
from tests.harness.realnode import settings as s

DOCKER_ID_LABEL = "kappaflow.docker-id"


def ctr(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return host.run(s.CONTAINERD_BIN / "ctr", "-a", s.SOCK, "-n", "k8s.io", *args, check=check)


def full_name(image: str) -> str:
    """The name containerd (and the kubelet) give a docker name: `kappaflow-runtime:0.1.0` is
    `docker.io/library/kappaflow-runtime:0.1.0`."""
    first = image.split("/")[0]
    if "/" in image and ("." in first or ":" in first or first == "localhost"):
        return image
    return f"docker.io/{image}" if "/" in image else f"docker.io/library/{image}"


def docker_binary() -> str:
    return "/usr/bin/docker" if Path("/usr/bin/docker").exists() else (shutil.which("docker") or "docker")


def docker_id(image: str) -> str | None:
    p = host.run(docker_binary(), "image", "inspect", "-f", "{{.Id}}", image, check=False)
    return p.stdout.strip() if p.returncode == 0 else None


def store_images() -> dict[str, str]:
    """containerd image name -> the docker image ID it was imported from ('' when unknown)."""
    out = {}
    for line in ctr("images", "ls").stdout.splitlines()[1:]:
        fields = line.split()
        labels = dict(kv.split("=", 1) for kv in fields[-1].split(",") if "=" in kv)
        out[fields[0]] = labels.get(DOCKER_ID_LABEL, "")
    return out


def import_images(wanted: list[str], log: Callable[[str], None]) -> None:
    have = store_images()
    todo = []
    for image in dict.fromkeys(wanted):
        did = docker_id(image)
        known = have.get(full_name(image))
        if known is not None and (did is None or known == did):
            continue
        if did is None:
            raise RuntimeError(
                f"image {image} is neither in the node's containerd nor in docker: run `make images`"
            )
        todo.append((image, did))
    if not todo:
        log(f"{len(wanted)} images already in the node's store")
        return
    started = time.monotonic()
    names = " ".join(shlex.quote(i) for i, _ in todo)
    log(f"importing {names} into the node's containerd")
    ctr_bin = shlex.quote(str(s.CONTAINERD_BIN / "ctr"))
    subprocess.run(
        f"{docker_binary()} save {names} | {ctr_bin} -a {shlex.quote(str(s.SOCK))} -n k8s.io images import -",
        shell=True,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    for image, did in todo:
        ctr("images", "label", full_name(image), f"{DOCKER_ID_LABEL}={did}")
    log(f"imported {len(todo)} images in {time.monotonic() - started:.1f}s")
    if dropped := drop_replaced_ids():
        log(f"dropped {len(dropped)} replaced images from the node's store")


def drop_replaced_ids() -> list[str]:
    """Delete the `sha256:<id>` records of images no name points at any more; the record names.

    The kubelet's CRI plugin records every image it sees under its ID as well as its name. A name
    imported again moves to the new image, but the old ID record keeps the old layers, so the store grew
    by every rebuild (33 GB after a few weeks). The docker ID label of each named image is that ID, so
    the records to keep are known; when a named image has no label nothing is dropped. `--sync`: the
    content goes now, not at containerd's next collection."""
    named = {name: did for name, did in store_images().items() if not name.startswith("sha256:")}
    if not named or "" in named.values():
        return []
    stale = [name for name in store_images() if name.startswith("sha256:") and name not in named.values()]
    if stale:
        ctr("images", "rm", "--sync", *stale)
    return stale


def purge_containers() -> list[str]:
    """Remove every task, container and sandbox from containerd's k8s.io namespace; the container IDs."""
    for cid in ctr("tasks", "ls", "-q", check=False).stdout.split():
        ctr("tasks", "kill", "-s", "SIGKILL", cid, check=False)
        ctr("tasks", "rm", "-f", cid, check=False)
    ids = ctr("containers", "ls", "-q", check=False).stdout.split()
    if ids:
        ctr("containers", "rm", *ids, check=False)
    for line in ctr("sandboxes", "ls", check=False).stdout.splitlines()[1:]:
        ctr("sandboxes", "rm", "-f", line.split()[0], check=False)
    return ids


def drop_cri_dirs(ids: list[str]) -> None:
    """The CRI plugin's per-container directories in the image store, once containerd has stopped."""
    for kind in ("containers", "sandboxes"):
        for cid in ids:
            host.safe_rmtree(s.IMAGE_STORE / "io.containerd.grpc.v1.cri" / kind / cid)


def drop_orphans(log: Callable[[str], None]) -> None:
    """After a crash: containers still running under the node's runc root, and shims of its containerd
    (shims outlive containerd by design), with their sockets."""
    root = s.RUN / "runc" / "k8s.io"
    if root.is_dir():
        for cid in host.run("runc", "--root", root, "list", "-q", check=False).stdout.split():
            host.run("runc", "--root", root, "delete", "--force", cid, check=False)
    needle = str(s.SOCK).encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd and cmd[0].endswith(b"containerd-shim-runc-v2") and needle in cmd and b"-id" in cmd:
            os.kill(int(proc.name), signal.SIGKILL)
            sid = cmd[cmd.index(b"-id") + 1].decode()
            for path in (f"{s.SOCK}/k8s.io/{sid}", f"{s.SOCK}/k8s.io/{sid}/debug"):
                Path("/run/containerd/s", hashlib.sha256(path.encode()).hexdigest()).unlink(missing_ok=True)
            log(f"killed orphan shim {proc.name}")
