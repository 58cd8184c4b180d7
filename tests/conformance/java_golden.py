"""The Java half of the conformance suite: fetch the jars, compile java/, write the golden file.

Why a subprocess of plain ``javac``/``java`` and no Maven: the classpath is a dozen pinned jars the bench
already caches (bench/kafka_streams_peer.py), plus kafka-streams-test-utils, fetched here the same way
(Maven Central's .sha1 and our sha256 pin) into ``<cache>/kafka-streams/<version>/test-utils``. Compiling
two source files against them takes seconds, so CI can afford to regenerate the golden file and compare.

``python -m tests.conformance.java_golden [OUT]`` (``make conformance-golden``) rewrites golden.json;
``--prepare`` (``make conformance-jars``, part of ``make test``) only fetches the jars and compiles.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.kafka_streams_peer import (  # noqa: E402
    Jar,
    PeerError,
    _download,
    _sha256,
    ensure_streams_libs,
    streams_home,
)

from tests.harness.kafka_broker import COMPLETE_MARKER, KAFKA_VERSION, _file_lock  # noqa: E402

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE / "scenarios.json"
GOLDEN = HERE / "golden.json"
# what Java's describe() prints and which internal topics it makes, per scenario and example (Describe.java)
DESCRIBE_GOLDEN = HERE / "describe_golden.json"
JAVA_SOURCES = (
    HERE / "java" / "Conformance.java",
    HERE / "java" / "Topologies.java",
    HERE / "java" / "Describe.java",
    HERE / "java" / "NamingTopologies.java",
    HERE / "java" / "FkKvTopologies.java",
    HERE / "java" / "VersionedQueries.java",
    HERE / "java" / "OptTopologies.java",
)
MAIN_CLASS = "Conformance"

TEST_UTILS = Jar(
    "org.apache.kafka",
    "kafka-streams-test-utils",
    "4.3.1",
    "e84547c830b86dffdc4f5556d9d58fd1de5020a820b0de34d837b27aa4452d8c",
)


def java_available() -> bool:
    """Both the JDK tools are on PATH (the suite's freshness check needs them; the comparison does not)."""
    return shutil.which("javac") is not None and shutil.which("java") is not None


def jars_cached(version: str = KAFKA_VERSION) -> bool:
    """Every jar the Java half needs is already in the cache (the CI check never downloads on its own)."""
    home = streams_home(version)
    return (home / "libs" / COMPLETE_MARKER).is_file() and (home / "test-utils" / COMPLETE_MARKER).is_file()


def ensure_test_utils(version: str = KAFKA_VERSION) -> Path:
    """Return the directory holding kafka-streams-test-utils, fetched and verified once."""
    if TEST_UTILS.version != version:
        raise PeerError(f"kafka-streams-test-utils is pinned at {TEST_UTILS.version}, not {version}")
    home = streams_home(version) / "test-utils"
    dest = home / TEST_UTILS.filename
    if (home / COMPLETE_MARKER).is_file():
        return home
    home.mkdir(parents=True, exist_ok=True)
    with _file_lock(home / ".lock"):
        if not (dest.is_file() and _sha256(dest) == TEST_UTILS.sha256):
            try:
                _download(TEST_UTILS, dest)
            except OSError as err:
                raise PeerError(f"downloading {TEST_UTILS.url} failed: {err}") from err
        (home / COMPLETE_MARKER).write_text(TEST_UTILS.filename + "\n")
    return home


def classpath() -> str:
    """The jars, fetched if missing, and the suite's classes, compiled once per source hash."""
    libs = ensure_streams_libs()
    utils = ensure_test_utils()
    jars = f"{libs}/*:{utils}/*"
    digest = hashlib.sha256()
    for source in JAVA_SOURCES:
        digest.update(source.read_bytes())
    digest.update((libs / COMPLETE_MARKER).read_bytes())
    classes = streams_home() / "conformance-classes" / digest.hexdigest()[:16]
    if not (classes / f"{MAIN_CLASS}.class").is_file():
        classes.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".partial-", dir=classes.parent))
        cmd = ["javac", "-nowarn", "-cp", jars, "-d", str(staging), *map(str, JAVA_SOURCES)]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            raise PeerError(f"javac failed:\n{result.stdout}{result.stderr}")
        shutil.rmtree(classes, ignore_errors=True)
        staging.rename(classes)
    return f"{classes}:{jars}"


def write_golden(out: Path, scenarios: Path = SCENARIOS, main_class: str = MAIN_CLASS) -> None:
    """Run every scenario through Kafka Streams' TopologyTestDriver and write the golden file to ``out``
    (``main_class="Describe"``: Java's describe() text and internal topics of every topology instead)."""
    # a short-lived JVM: the C1 compiler and the serial collector halve its CPU time (13 s -> 6 s)
    cmd = [
        "java",
        "-XX:TieredStopAtLevel=1",
        "-XX:+UseSerialGC",
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=error",
        "-cp",
        classpath(),
        main_class,
        str(scenarios),
        str(out),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-40:])
        raise PeerError(f"the Java conformance run exited {result.returncode}:\n{tail}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--prepare"]:
        classpath()
        print("conformance: Kafka Streams jars cached and the Java half compiled")
    else:
        target = Path(sys.argv[1]) if len(sys.argv) > 1 else GOLDEN
        write_golden(target)
        print(f"wrote {target}")
        if len(sys.argv) == 1:
            write_golden(DESCRIBE_GOLDEN, main_class="Describe")
            print(f"wrote {DESCRIBE_GOLDEN}")
