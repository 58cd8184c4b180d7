"""Quix Streams and Faust-streaming as bench peers, each in a virtualenv of its own.

Why their own virtualenvs: each pins its own confluent-kafka / aiokafka and friends, and installing them
beside kappaflow would change the client the kappaflow rows are measured with. The pinned sets are the
lock files beside the peers' scripts (``bench/peers/<name>-<version>.txt``, every transitive version
pinned); the environments are built once and cached in
``${KAPPAFLOW_CACHE:-~/.cache/kappaflow}/peers/<name>-<version>``. Each peer runs its word count as a
subprocess that prints ``LINES_PER_SECOND <n>`` (bench/peers/quix_wordcount.py, faust_wordcount.py).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.harness.kafka_broker import _file_lock, cache_root  # noqa: E402

PEERS_DIR = Path(__file__).resolve().parent / "peers"
RESULT_PREFIX = "LINES_PER_SECOND "
READY_MARKER = ".kappaflow-ready"


class PeerError(RuntimeError):
    """A peer could not be installed or did not finish its run."""


@dataclass(frozen=True)
class PythonPeer:
    """One Python stream-processing library: its pinned distribution and the script that runs it."""

    name: str
    version: str
    script: str

    @property
    def lock_file(self) -> Path:
        return PEERS_DIR / f"{self.name}-{self.version}.txt"

    @property
    def venv(self) -> Path:
        return cache_root() / "peers" / f"{self.name}-{self.version}"


QUIX = PythonPeer("quixstreams", "3.28.1", "quix_wordcount.py")
FAUST = PythonPeer("faust-streaming", "0.15.3", "faust_wordcount.py")


def prepare(peer: PythonPeer) -> Path:
    """The peer's interpreter, installing its locked set into a cached virtualenv on first use."""
    python = peer.venv / "bin" / "python"
    marker = peer.venv / READY_MARKER
    if marker.exists():
        return python
    peer.venv.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(peer.venv.parent / f".{peer.name}.lock"):
        if marker.exists():
            return python
        print(f"==> installing {peer.name} {peer.version} into {peer.venv}", flush=True)
        steps = (
            [sys.executable, "-m", "venv", "--clear", str(peer.venv)],
            [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "-r", str(peer.lock_file)],
        )
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise PeerError(f"{' '.join(step[:4])} failed: {done.stderr.strip()[-2000:]}")
        marker.write_text(peer.version)
    return python


def run_peer(peer: PythonPeer, args: list[str], timeout: float = 900.0) -> float:
    """Run the peer's word count with `args` and return the lines/s it measured.

    The peer runs in a scratch directory removed afterwards: the libraries keep their local state in
    files (Faust's `<app id>-data` lands in the working directory), and a benchmark leaves nothing behind.
    """
    python = prepare(peer)
    with tempfile.TemporaryDirectory(prefix=f"{peer.name}-bench-") as workdir:
        try:
            done = subprocess.run(
                [str(python), str(PEERS_DIR / peer.script), *args],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                cwd=workdir,
            )
        except subprocess.TimeoutExpired as err:
            raise PeerError(f"{peer.name} did not finish within {timeout:.0f} s") from err
    for line in done.stdout.splitlines():
        # Faust's worker writes terminal control codes (cursor hide/show) to stdout ahead of the line
        _, found, result = line.partition(RESULT_PREFIX)
        if found:
            return float(result)
    raise PeerError(f"{peer.name} exited {done.returncode} without a result: {done.stderr.strip()[-2000:]}")


def run_quix(bootstrap: str, source: str, sink: str, lines: int, words: int, guarantee: str) -> float:
    """Quix Streams' word count at `guarantee` (kappaflow's name for it), with a fresh state dir (inside
    the scratch directory `run_peer` runs it in)."""
    return run_peer(QUIX, [bootstrap, source, sink, str(lines), str(words), guarantee, "state"])


def run_faust(
    bootstrap: str, source: str, sink: str, words_topic: str, lines: int, words: int, partitions: int
) -> float:
    """Faust-streaming's word count at at-least-once over the first `lines` lines it reads; `words_topic`
    (already created) is its repartition topic."""
    args = [bootstrap, source, sink, str(lines), str(words), str(partitions), words_topic]
    return run_peer(FAUST, args)
