"""The docker this machine has, made usable for `make images`: a client that can use BuildKit, a daemon.

Why a module of its own: the machine's docker comes from Debian (`docker.io` 20.10), and CI starts on a
fresh Debian 12 where nothing is installed and nothing runs. So the harness installs what it needs with
apt-get (as root, or through sudo), starts `dockerd` in the background when its socket does not answer,
and picks a client that can build with BuildKit: BuildKit skips the stages a build does not use (the
Dockerfiles' `FROM ${WHEELS}` switch relies on it) and supports `RUN --mount`. A docker client before 23
does that with `DOCKER_BUILDKIT=1` alone; a newer one needs the buildx plugin, which Debian's 28.x-less
machines may lack - so `/usr/bin/docker` (Debian's 20.10) is preferred over a newer one on PATH that
has no buildx.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.harness.progress import log_dir

#: Set to a docker client binary to override the detection below.
DOCKER_ENV = "KAPPAFLOW_DOCKER"
SOCKET = Path("/var/run/docker.sock")


class DockerUnavailable(RuntimeError):
    """No docker client with BuildKit, or no daemon, and the harness could not provide them."""


def log(msg: str) -> None:
    """`[images] ...` on stderr: the progress line style of the other harnesses (`[kube] ...`)."""
    print(f"[images] {msg}", file=sys.stderr, flush=True)


def _sudo() -> list[str]:
    return [] if os.geteuid() == 0 else ["sudo", "-n"]


def apt_install(*packages: str) -> None:
    """Install Debian packages (CI runs as root on a fresh Debian 12); apt's output goes to a log file."""
    log_path = log_dir() / "apt-images.log"
    log(f"installing {' '.join(packages)} with apt-get (log {log_path})")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    with log_path.open("a") as out:
        for argv in (
            [*_sudo(), "apt-get", "update"],
            [*_sudo(), "apt-get", "install", "-y", "--no-install-recommends", *packages],
        ):
            if subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env, check=False).returncode:
                tail = "".join(log_path.read_text().splitlines(keepends=True)[-20:])
                raise DockerUnavailable(f"`{' '.join(argv)}` failed (log {log_path}):\n{tail}")


def ensure_tool(tool: str, package: str) -> str:
    """The path of `tool`, installing Debian's `package` first when it is missing."""
    found = shutil.which(tool) or next(
        (str(p) for d in ("/usr/sbin", "/sbin") if (p := Path(d) / tool).is_file()), None
    )
    if found is None:
        apt_install(package)
        found = shutil.which(tool) or next(
            (str(p) for d in ("/usr/sbin", "/sbin") if (p := Path(d) / tool).is_file()), None
        )
    if found is None:
        raise DockerUnavailable(f"{tool} is still missing after installing {package}")
    return found


def _client_version(binary: str) -> tuple[int, ...] | None:
    try:
        out = subprocess.run(
            [binary, "version", "--format", "{{.Client.Version}}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    digits = [int(p) for p in out.split("+")[0].split("-")[0].split(".") if p.isdigit()]
    return tuple(digits) or None


def _has_buildx(binary: str) -> bool:
    try:
        result = subprocess.run([binary, "buildx", "version"], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


def _pick_client() -> str | None:
    """A client that builds with BuildKit: < 23 (DOCKER_BUILDKIT=1 suffices) or one with buildx."""
    if override := os.environ.get(DOCKER_ENV):
        return override
    candidates = ["/usr/bin/docker", shutil.which("docker") or ""]
    for binary in dict.fromkeys(c for c in candidates if c and Path(c).is_file()):
        version = _client_version(binary)
        if version is not None and (version[0] < 23 or _has_buildx(binary)):
            return binary
    return None


def _daemon_answers(client: str) -> bool:
    try:
        result = subprocess.run(
            [client, "info", "--format", "{{.ServerVersion}}"], capture_output=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


def _start_daemon(client: str) -> None:
    """Start `dockerd` detached, its output in .run/logs/dockerd.log, and wait for it to answer.

    It is a machine-wide service: it is left running when the harness exits (as a service manager
    would keep it), so later builds find it."""
    dockerd = ensure_tool("dockerd", "docker.io")
    log_path = log_dir() / "dockerd.log"
    log(f"dockerd is not running: starting {dockerd} (log {log_path})")
    with log_path.open("a") as out:
        subprocess.Popen(
            [*_sudo(), dockerd],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if SOCKET.exists() and _daemon_answers(client):
            log("dockerd is up")
            return
        time.sleep(0.5)
    tail = "".join(log_path.read_text(errors="replace").splitlines(keepends=True)[-20:])
    raise DockerUnavailable(f"dockerd did not answer within 90 s (log {log_path}):\n{tail}")


@functools.cache
def docker() -> str:
    """The docker client to build with; installs docker.io and starts dockerd when needed (once)."""
    client = _pick_client()
    if client is None:
        apt_install("docker.io")
        client = _pick_client()
    if client is None:
        raise DockerUnavailable(
            "no docker client that can use BuildKit: install Debian's docker.io (20.10) or the buildx "
            f"plugin, or point {DOCKER_ENV} at one"
        )
    if not _daemon_answers(client):
        _start_daemon(client)
    return client


def docker_env() -> dict[str, str]:
    """The environment for `docker build`: BuildKit on, with the plain progress output for the log."""
    return {**os.environ, "DOCKER_BUILDKIT": "1", "BUILDKIT_PROGRESS": "plain"}


def inspect(name: str, label: str) -> tuple[str, str | None, int] | None:
    """(docker image id, the value of `label` or None, size in bytes) of `name`; None when docker has
    no such image. One `docker image inspect` for all three: the warm path calls it for every image."""
    fmt = f'{{{{.Id}}}} {{{{.Size}}}} {{{{index .Config.Labels "{label}"}}}}'
    result = subprocess.run(
        [docker(), "image", "inspect", "--format", fmt, name], capture_output=True, text=True, check=False
    )
    if result.returncode:
        return None
    found_id, size, value = [*result.stdout.split(), "", ""][:3]
    return found_id, (value if value and value != "<no value>" else None), int(size)


def image_id(name: str) -> str | None:
    """The docker image ID of `name`, or None when docker has no such image."""
    found = inspect(name, "-")
    return found[0] if found else None


def image_label(name: str, label: str) -> str | None:
    """One label of a docker image (None when the image or the label is missing)."""
    found = inspect(name, label)
    return found[1] if found else None
