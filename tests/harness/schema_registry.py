"""A real Confluent-compatible Schema Registry started by the project itself: Apicurio Registry.

Why Apicurio: Confluent's own server is not published to Maven Central and Karapace has no release on
PyPI, so neither can be fetched here. Apicurio Registry publishes its whole Quarkus application to Maven
Central (``io.apicurio:apicurio-registry-app:<v>:tar.gz:all``: the runner jar and its ``lib/``) and
serves the Confluent Schema Registry REST API under ``/apis/ccompat/v7``, which is what
``confluent_kafka.schema_registry`` speaks. Storage is its default in-memory H2 database, so each start is
a clean registry and nothing but a free port is needed.

Version 3.0.9 is the newest release whose classes target Java 17 (3.3.x needs Java 21; this machine and
CI have 17). The archive is resolved with Maven in strict-checksum mode (``-C``: Maven Central's ``.sha1``
must match), then its sha256 is checked against the pin below before it is unpacked into
``${KAPPAFLOW_CACHE:-~/.cache/kappaflow}/schema-registry/<version>``.

On start the global compatibility level is set to BACKWARD, Confluent's default (Apicurio applies no
rule unless asked), so incompatible schema changes are refused as they would be in production.

CLI (``make registry-download`` / ``make registry-run``)::

    python -m tests.harness.schema_registry download
    python -m tests.harness.schema_registry run [--port 8081]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import signal
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.harness.kafka_broker import (
    COMPLETE_MARKER,
    _die_with_parent,
    _file_lock,
    _tail,
    cache_root,
)

APICURIO_VERSION = "3.0.9"
APICURIO_ARTIFACT = f"io.apicurio:apicurio-registry-app:{APICURIO_VERSION}:tar.gz:all"
APICURIO_SHA256 = "2b28181501a20cbf6efcd77f9b7153908fc01f3d3a7c32024c0bd9e1b04c8a43"
RUNNER_JAR = f"apicurio-registry-app-{APICURIO_VERSION}-runner.jar"
CCOMPAT_PATH = "/apis/ccompat/v7"
HEAP = "320m"
DEFAULT_COMPATIBILITY = "BACKWARD"
GET_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:2.8"


class RegistryError(RuntimeError):
    """The registry could not be downloaded or started; the message carries the log tail."""


def registry_home(version: str = APICURIO_VERSION) -> Path:
    return cache_root() / "schema-registry" / version


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def ensure_registry_dist(*, verbose: bool = True) -> Path:
    """The unpacked application directory (runner jar + lib/), downloading it on first use.

    A marker written after the archive was verified and unpacked says the directory is complete, so an
    interrupted download is redone rather than trusted."""
    home = registry_home()
    dist = home / "dist"
    if (dist / COMPLETE_MARKER).is_file():
        if verbose:
            print(f"==> Apicurio Registry {APICURIO_VERSION}: cached in {dist}", flush=True)
        return dist
    if shutil.which("mvn") is None:
        raise RegistryError("Maven (mvn) is required to download Apicurio Registry; install maven")
    with _file_lock(home / ".lock"):
        if (dist / COMPLETE_MARKER).is_file():
            return dist
        # The app's parent POM is not on Maven Central, so every goal that reads the artifact's descriptor
        # (copy, unpack, and `get` from plugin 3.x) fails; plugin 2.8's `get` with transitive=false does
        # not read it. A private local repository keeps the 110 MB archive out of ~/.m2 and is deleted
        # once unpacked.
        repo = home / "m2"
        cmd = [
            "mvn",
            "-B",
            "-q",
            "-C",  # strict checksums: a mismatch with Maven Central's .sha1 fails instead of warning
            f"-Dmaven.repo.local={repo}",
            f"{GET_PLUGIN}:get",
            f"-Dartifact={APICURIO_ARTIFACT}",
            "-Dtransitive=false",
        ]
        print(f"==> Apicurio Registry {APICURIO_VERSION}: downloading ~110 MB from Maven Central", flush=True)
        started = time.monotonic()
        result = subprocess.run(cmd, capture_output=True, text=True, cwd=home)
        archives = list(repo.glob("io/apicurio/apicurio-registry-app/*/*-all.tar.gz"))
        if result.returncode != 0 or len(archives) != 1:
            raise RegistryError(
                f"Maven failed to fetch {APICURIO_ARTIFACT}:\n{result.stdout[-4000:]}{result.stderr}"
            )
        actual = _sha256(archives[0])
        if actual != APICURIO_SHA256:
            raise RegistryError(f"{archives[0]} has sha256 {actual}, expected the pinned {APICURIO_SHA256}")
        staging = home / "dist.partial"
        shutil.rmtree(staging, ignore_errors=True)
        with tarfile.open(archives[0]) as archive:
            archive.extractall(staging, filter="data")
        if not (staging / RUNNER_JAR).is_file():
            raise RegistryError(f"{archives[0]} holds no {RUNNER_JAR}")
        shutil.rmtree(dist, ignore_errors=True)
        staging.rename(dist)
        shutil.rmtree(repo, ignore_errors=True)
        (dist / COMPLETE_MARKER).write_text(APICURIO_SHA256 + "\n")
        print(
            f"==> Apicurio Registry {APICURIO_VERSION}: ready in {time.monotonic() - started:.1f}s",
            flush=True,
        )
    return dist


def _request(url: str, *, method: str = "GET", body: object = None, timeout: float = 5.0) -> object:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/vnd.schemaregistry.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read() or b"null")


class LocalSchemaRegistry:
    """One Apicurio Registry JVM on 127.0.0.1:``port`` with in-memory storage, its log in ``data_dir``."""

    def __init__(self, port: int, data_dir: Path, *, start_timeout: float = 120.0) -> None:
        self.port = port
        self.data_dir = Path(data_dir).resolve()
        self.start_timeout = start_timeout
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The Confluent-compatible API's base URL: what ``schema.registry.url`` is set to."""
        return f"http://127.0.0.1:{self.port}{CCOMPAT_PATH}"

    @property
    def log(self) -> Path:
        return self.data_dir / "registry.log"

    def start(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        dist = ensure_registry_dist(verbose=False)
        java = shutil.which("java")
        if java is None:
            raise RegistryError("java (17+) is required to run Apicurio Registry")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [
            java,
            f"-Xmx{HEAP}",
            "-XX:+ExitOnOutOfMemoryError",
            "-XX:TieredStopAtLevel=1",  # starts in about half the time; the tests send little traffic
            f"-Dquarkus.http.port={self.port}",
            "-Dquarkus.http.host=127.0.0.1",
            "-Dquarkus.http.access-log.enabled=false",
            f"-Dapicurio.storage.snapshot.location={self.data_dir}",
            "-jar",
            str(dist / RUNNER_JAR),
        ]
        with self.log.open("ab") as out:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                preexec_fn=_die_with_parent,
            )
        try:
            self._wait_ready()
            _request(f"{self.url}/config", method="PUT", body={"compatibility": DEFAULT_COMPATIBILITY})
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RegistryError(
                    f"Apicurio Registry exited with code {self._proc.returncode} during start-up; "
                    f"{self.log}:\n{_tail(self.log)}"
                )
            try:
                _request(f"{self.url}/subjects", timeout=1.0)
                return
            except (urllib.error.URLError, OSError, ValueError):
                time.sleep(0.2)
        raise RegistryError(
            f"Apicurio Registry not ready after {self.start_timeout:.0f}s; {self.log}:\n{_tail(self.log)}"
        )

    def stop(self, timeout: float = 20.0) -> None:
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def __enter__(self) -> LocalSchemaRegistry:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.harness.schema_registry")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("download", help="fetch and verify the pinned Apicurio Registry")
    run = sub.add_parser("run", help="run a registry in the foreground until Ctrl-C")
    run.add_argument("--port", type=int, default=8081)
    run.add_argument("--dir", default=".run/schema-registry")
    args = parser.parse_args(argv)
    ensure_registry_dist()
    if args.command == "run":
        registry = LocalSchemaRegistry(args.port, Path(args.dir))
        started = time.monotonic()
        with registry:
            print(
                f"==> schema registry ready in {time.monotonic() - started:.1f}s at {registry.url}",
                flush=True,
            )
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
