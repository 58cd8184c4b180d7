"""Java Kafka Streams as a bench peer: its jars, the compiled word count (peers/WordCountPeer.java), a run.

Why: kappaflow is a port of Kafka Streams, so the number that says what the port costs is the same
topology on the real thing, against the same broker and input. The jars are kafka-streams at the broker's
version (tests/harness/kafka_broker.py's ``KAFKA_VERSION``) and the runtime closure of its POM, pinned
here with their sha256; each download is checked against the ``.sha1`` Maven Central publishes and against
the pin, and the set is cached in ``${KAPPAFLOW_CACHE:-~/.cache/kappaflow}/kafka-streams/<version>/libs``.
Jars the broker's own (Maven-verified) libs already hold are copied from there when their sha256 matches.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.harness.kafka_broker import (  # noqa: E402
    COMPLETE_MARKER,
    KAFKA_VERSION,
    _file_lock,
    cache_root,
    kafka_home,
)

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
PEER_SOURCE = Path(__file__).resolve().parent / "peers" / "WordCountPeer.java"
PEER_CLASS = "WordCountPeer"
RESULT_PREFIX = "LINES_PER_SECOND "


@dataclass(frozen=True)
class Jar:
    """One pinned Maven artifact: coordinates and the sha256 of its jar."""

    group: str
    artifact: str
    version: str
    sha256: str

    @property
    def filename(self) -> str:
        return f"{self.artifact}-{self.version}.jar"

    @property
    def url(self) -> str:
        return (
            f"{MAVEN_CENTRAL}/{self.group.replace('.', '/')}/{self.artifact}/{self.version}/{self.filename}"
        )


# kafka-streams 4.3.1's POM: kafka-clients, rocksdbjni, jackson-annotations/-databind, slf4j-api (compile and
# runtime scope); kafka-clients' POM adds zstd-jni, lz4-java, snappy-java; jackson-databind adds
# jackson-core. slf4j-simple is the logging backend (slf4j 1.7 binding), kept at WARN by run_peer.
STREAMS_JARS = (
    Jar(
        "org.apache.kafka",
        "kafka-streams",
        "4.3.1",
        "bd73f3805e116f711e8456ee89a8a5b43ff5dcf5a5bb865afae29deae89e7c4b",
    ),
    Jar(
        "org.apache.kafka",
        "kafka-clients",
        "4.3.1",
        "52501b7b47510c66f898871adaf6d2968ab7246561d44ced43643a8a587f0b36",
    ),
    Jar(
        "org.rocksdb",
        "rocksdbjni",
        "10.1.3",
        "e7f925287d9fe2574fb7c7a86f7facaa9b8ab602a2eed0e598bf633528121498",
    ),
    Jar(
        "com.fasterxml.jackson.core",
        "jackson-annotations",
        "2.21",
        "53ca085f4a150f703f49e1aabd935bd03b43e1ea3d55d135438292af22cef56b",
    ),
    Jar(
        "com.fasterxml.jackson.core",
        "jackson-databind",
        "2.21.2",
        "8c982f01f148d805f0aaac2339011244757e0df7c6ff8951f2fa3f433b8ed849",
    ),
    Jar(
        "com.fasterxml.jackson.core",
        "jackson-core",
        "2.21.2",
        "12e8655b100267b44d0f14d01b1f5082a5105e616174dc4307be1a761e92407b",
    ),
    Jar(
        "org.slf4j", "slf4j-api", "1.7.36", "d3ef575e3e4979678dc01bf1dcce51021493b4d11fb7f1be8ad982877c16a1c0"
    ),
    Jar(
        "org.slf4j",
        "slf4j-simple",
        "1.7.36",
        "2f39bed943d624dfa8f4102d0571283a10870b6aa36f197a8a506f147010c10f",
    ),
    Jar(
        "com.github.luben",
        "zstd-jni",
        "1.5.6-10",
        "b6c3237e24b8252a5a9c3a0e1ae30ef8f323412e74bd358548b7a9e527d676df",
    ),
    Jar(
        "at.yawk.lz4",
        "lz4-java",
        "1.10.2",
        "252dabd586d22149a31661a8afc1a50747714eb1a298bd4a6e780c8c91a13866",
    ),
    Jar(
        "org.xerial.snappy",
        "snappy-java",
        "1.1.10.7",
        "4c766cb3f855415ee734b2392949a0b6f12a60879334a74518deaf6270d32e36",
    ),
)


class PeerError(RuntimeError):
    """The Java peer could not be fetched, compiled or run; the message says which step and why."""


def streams_home(version: str = KAFKA_VERSION) -> Path:
    return cache_root() / "kafka-streams" / version


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download(jar: Jar, dest: Path) -> None:
    """Fetch one jar with progress lines, then check Maven Central's published sha1 and our sha256 pin.

    Why both: the .sha1 proves the bytes are what Central serves; the pin proves Central still serves
    what was reviewed when the version was chosen. The file only gets its final name once both match.
    """
    part = dest.with_suffix(".jar.part")
    sha1 = hashlib.sha1()
    with urllib.request.urlopen(jar.url, timeout=60) as resp, part.open("wb") as out:
        total = int(resp.headers.get("Content-Length") or 0)
        done, next_report = 0, 0.25
        while block := resp.read(1 << 20):
            out.write(block)
            sha1.update(block)
            done += len(block)
            if total and done / total >= next_report:
                print(f"    {jar.filename}: {done >> 10:,} / {total >> 10:,} KiB", flush=True)
                next_report += 0.25
    with urllib.request.urlopen(jar.url + ".sha1", timeout=60) as resp:
        published = resp.read().decode().split()[0].strip().lower()
    if sha1.hexdigest() != published:
        part.unlink()
        raise PeerError(f"{jar.url}: sha1 {sha1.hexdigest()} != published {published}")
    if _sha256(part) != jar.sha256:
        part.unlink()
        raise PeerError(f"{jar.url}: sha256 does not match the pin {jar.sha256}")
    part.rename(dest)


def ensure_streams_libs(version: str = KAFKA_VERSION) -> Path:
    """Return the directory holding every pinned jar, fetching the missing ones once.

    Idempotent like the broker's ``ensure_kafka_libs``: the completion marker is written last, so an
    interrupted fetch is resumed (finished jars are re-hashed, not trusted by name) under the same lock.
    """
    if any(jar.version != version for jar in STREAMS_JARS if jar.group == "org.apache.kafka"):
        raise PeerError(f"the pinned kafka-streams jars are not at the broker's version {version}")
    home = streams_home(version)
    libs = home / "libs"
    if (libs / COMPLETE_MARKER).is_file():
        return libs
    broker_libs = kafka_home(version) / "libs"
    with _file_lock(home / ".lock"):
        if (libs / COMPLETE_MARKER).is_file():
            return libs
        libs.mkdir(parents=True, exist_ok=True)
        print(f"==> fetching Kafka Streams {version} jars into {libs}", flush=True)
        for jar in STREAMS_JARS:
            dest = libs / jar.filename
            if dest.is_file() and _sha256(dest) == jar.sha256:
                continue
            shared = broker_libs / jar.filename
            if shared.is_file() and _sha256(shared) == jar.sha256:
                shutil.copyfile(shared, dest)
                print(f"    {jar.filename}: from the broker's libs", flush=True)
                continue
            try:
                _download(jar, dest)
            except OSError as err:
                raise PeerError(f"downloading {jar.url} failed: {err}") from err
        (libs / COMPLETE_MARKER).write_text("\n".join(jar.filename for jar in STREAMS_JARS) + "\n")
    return libs


def compile_peer(libs: Path, source: Path = PEER_SOURCE) -> Path:
    """Compile a peer (WordCountPeer.java by default) and the classes it uses from its folder (PeerRun.java,
    found on javac's source path) once per (sources, jars) into the cache; return the classes directory."""
    if shutil.which("javac") is None:
        raise PeerError(f"javac (JDK 17+) is required to compile bench/peers/{source.name}")
    sources = b"".join(path.read_bytes() for path in sorted(source.parent.glob("*.java")))
    marker = (libs / COMPLETE_MARKER).read_bytes()
    key = hashlib.sha256(source.name.encode() + sources + marker).hexdigest()[:16]
    classes = libs.parent / "peer-classes" / key
    if (classes / f"{source.stem}.class").is_file():
        return classes
    classes.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".partial-", dir=classes.parent))
    cmd = ["javac", "-Xlint:all", "-cp", f"{libs}/*", "-sourcepath", str(source.parent), "-d", str(staging)]
    cmd.append(str(source))
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise PeerError(f"javac failed:\n{result.stdout}{result.stderr}")
    shutil.rmtree(classes, ignore_errors=True)
    staging.rename(classes)
    return classes


def prepare(source: Path = PEER_SOURCE) -> str:
    """The java classpath (compiled peer, then the jars) for ``run_peer``; done before any timed run."""
    libs = ensure_streams_libs()
    return f"{compile_peer(libs, source)}:{libs}/*"


def run_peer(
    classpath: str,
    bootstrap: str,
    source: str,
    sink: str,
    lines: int,
    words: int,
    guarantee: str,
    timeout: float = 420.0,
) -> float:
    """Run the Java word count in its own JVM and return the input lines/s it measured on itself.

    Why a subprocess with its own clock: JVM start-up, class loading and the first rebalance are not
    part of kappaflow's number either, so the peer times from its first processed record to the last.
    """
    java = shutil.which("java")
    if java is None:
        raise PeerError("java (17+) is required to run the Kafka Streams peer")
    state_dir = tempfile.mkdtemp(prefix=f"kstreams-bench-{guarantee}-")
    app_id = f"bench-java-{guarantee}-{Path(state_dir).name.rsplit('-', 1)[-1]}"
    cmd = [
        java,
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        "-cp",
        classpath,
        PEER_CLASS,
        *(bootstrap, app_id, source, sink, state_dir, guarantee, str(lines), str(words)),
    ]
    started = time.monotonic()
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        raise PeerError(f"Kafka Streams peer ({guarantee}) did not finish in {timeout:.0f}s") from err
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
    for line in result.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            print(f"    (JVM wall time {time.monotonic() - started:.1f}s)", flush=True)
            return float(line.removeprefix(RESULT_PREFIX))
    tail = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
    raise PeerError(f"Kafka Streams peer ({guarantee}) exited {result.returncode} without a result:\n{tail}")
