"""Starting, finding and stopping the node's daemons by pid file.

A daemon's pid file records its pid and binary name, so a later process (`make cluster-down`, the next
test run) finds it and does not mistake a recycled pid for it. Daemons started for a test run die with
the process that started them (PR_SET_PDEATHSIG), so a killed test run cannot leave a node running;
`make cluster-up` starts them detached, for a user's session.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.harness.realnode import settings as s

#: Stop order: dependants first.
ORDER = (
    "local-path-provisioner",
    "coredns",
    "kube-proxy",
    "kubelet",
    "kube-scheduler",
    "kube-controller-manager",
    "kube-apiserver",
    "etcd",
    "containerd",
)


class DaemonExited(RuntimeError):
    pass


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


class Daemons:
    """The daemons this process started; `attached` ties their lives to this process."""

    def __init__(self, attached: bool) -> None:
        self.attached = attached
        self.started: list[tuple[str, subprocess.Popen[bytes]]] = []

    def spawn(self, name: str, argv: list[object], env: dict[str, str] | None = None) -> None:
        with open(s.LOGS / f"{name}.log", "ab") as out:
            p = subprocess.Popen(
                [str(a) for a in argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=s.STATE,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent if self.attached else None,
            )
        (s.STATE / f"{name}.pid").write_text(f"{p.pid} {Path(str(argv[0])).name}\n")
        self.started.append((name, p))

    def check(self) -> None:
        for name, p in self.started:
            if p.poll() is not None:
                tail = (s.LOGS / f"{name}.log").read_text(errors="replace")[-2500:]
                raise DaemonExited(f"{name} exited with {p.returncode}; {s.LOGS / (name + '.log')}:\n{tail}")

    def wait(
        self, what: str, ready: Callable[[], object], timeout: float, log: Callable[[str], None]
    ) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.check()
            try:
                if ready():
                    log(what)
                    return
            except Exception:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"real node: timed out after {timeout:.0f}s waiting for: {what}")


def pid_of(name: str) -> int | None:
    """The pid in NAME.pid, if that process still runs the binary it was started with (not a zombie)."""
    f = s.STATE / f"{name}.pid"
    if not f.exists():
        return None
    pid, exe = f.read_text().split()
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return None
    if stat.rsplit(")", 1)[1].split()[0] == "Z" or Path(cmd).name != exe:
        return None
    return int(pid)


def stop(name: str, log: Callable[[str], None]) -> None:
    pid = pid_of(name)
    if pid:
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            if pid_of(name) is None:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
        log(f"stopped {name} ({pid})")
    (s.STATE / f"{name}.pid").unlink(missing_ok=True)


def kill(name: str) -> None:
    """SIGKILL, as a crash would (the kubelet-restart scenario)."""
    pid = pid_of(name)
    if pid:
        os.kill(pid, signal.SIGKILL)


def running() -> list[str]:
    return [n for n in ORDER if pid_of(n)]
