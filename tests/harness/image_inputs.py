"""What the image builds need from the host, prepared and cached by content outside the clone.

No container registry is reachable, so everything an image would normally pull or fetch inside a build
is made on the host from the registries that are reachable, cached under
`${KAPPAFLOW_CACHE:-~/.cache/kappaflow}/images/`, and staged into the build context (`.run/images/`,
the one part of `.run` the .dockerignore lets through):

- wheelhouses (`pip wheel` with the dev venv's pip, constrained to the venv's versions, so the images
  run what the tests ran): `runtime` (kappaflow and its native core, built by maturin with the host's
  cargo), `operator` (kappaflow[operator]) and `spark` (PySpark). The host's Python is CPython 3.11 on
  glibc 2.36 (Debian 12), the same ABI as bookworm's python3.11, so its wheels run in the images.
  A wheelhouse's directory is named by the digest of its inputs: rebuilding a wheel from the same
  sources gives new bytes (zip timestamps), which would defeat docker's layer cache.
- the Kafka image's jars: the broker's runtime classpath plus kafka-tools (kafka-topics.sh & co.),
  resolved with Maven (strict checksums) as tests/harness/kafka_broker.py resolves the broker's;
- Spark's Kafka connector jars (kappaflow.spark.jars, the same cache the Spark tests use);
- the pause binary, from Kubernetes' own pause.c in the Go module cache (`go mod download`), built
  with `gcc -Os -static`;
- the Debian root filesystem, by `debootstrap --variant=minbase` from the host's apt mirror.

Heavy steps run under `nice` (the machine's cores are shared with other builds); their output goes to
files under `.run/logs/`, named in the progress line.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from tests.harness.docker_host import ensure_tool, log
from tests.harness.kafka_broker import DEPENDENCY_PLUGIN, KAFKA_VERSION, LOG4J_VERSION, SCALA_BINARY
from tests.harness.progress import ROOT, human_size, log_dir, tree_size

K8S_VERSION = "v1.36.3"
NICE = ["nice", "-n", "10"]
COMPLETE = ".complete"
#: Bumped when a recipe below changes in a way the digests of its inputs would not show.
RECIPE = "1"
#: The Debian base's recipe (debootstrap and the clean-up after it), bumped when either changes.
DEBIAN_RECIPE = "2"
#: Files the wheels are built from (the kappaflow distribution, native core included).
WHEEL_SOURCES = ("pyproject.toml", "README.md", "runtime/kappaflow", "runtime/native", "operator")
SKIP_PARTS = {"__pycache__", "target", ".pytest_cache", ".mypy_cache", ".ruff_cache"}


class InputError(RuntimeError):
    """An input of an image could not be prepared; the message names the log to read."""


def cache_dir() -> Path:
    base = os.environ.get("KAPPAFLOW_CACHE") or str(Path.home() / ".cache" / "kappaflow")
    return Path(base).expanduser() / "images"


def context_dir() -> Path:
    """`.run/images` in the clone: staged inputs the Dockerfiles COPY from the build context."""
    return ROOT / ".run" / "images"


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Serialise preparation between processes (two test sessions, `make images` at the same time)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def digest(*parts: str | bytes) -> str:
    """sha256 over length-prefixed parts (so ("ab", "c") and ("a", "bc") differ)."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


def _files(paths: Iterable[str]) -> Iterator[Path]:
    for rel in paths:
        path = ROOT / rel
        if path.is_file():
            yield path
            continue
        for found in sorted(path.rglob("*")):
            rel_parts = found.relative_to(ROOT).parts
            skipped = SKIP_PARTS.intersection(rel_parts) or any(p.endswith(".egg-info") for p in rel_parts)
            if found.is_file() and not skipped and found.suffix != ".pyc":
                yield found


def files_digest(paths: Iterable[str]) -> str:
    """The digest of files (and folders' files, build output excluded) named relative to the clone."""
    parts: list[str | bytes] = []
    for path in _files(paths):
        parts += [str(path.relative_to(ROOT)), oct(path.stat().st_mode & 0o111), path.read_bytes()]
    return digest(*parts)


def run_logged(
    argv: list[str], log_name: str, what: str, *, env: dict[str, str] | None = None, cwd: Path | None = None
) -> None:
    """Run a command with its output in .run/logs/<log_name>; on failure raise with the log's tail."""
    log_path = log_dir() / log_name
    with log_path.open("w") as out:
        code = subprocess.run(
            argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd, check=False
        ).returncode
    if code:
        tail = "".join(log_path.read_text(errors="replace").splitlines(keepends=True)[-40:])
        raise InputError(f"{what} failed (exit {code}, full log {log_path}):\n{tail}")


def stage(sources: Iterable[Path], dest: Path) -> None:
    """Make `dest` hold exactly these files: hard links where possible (no copies of 400 MB wheels)."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for src in sources:
        try:
            os.link(src, dest / src.name)
        except OSError:
            shutil.copy2(src, dest / src.name)


# ------------------------------------------------------------------------------------------ wheelhouses


def _venv_python() -> Path:
    venv = ROOT / ".venv" / "bin" / "python"
    return venv if venv.exists() else Path(sys.executable)


@functools.cache
def _constraints() -> str:
    """`name==version` of every package in the dev venv but kappaflow's own: the images run them."""
    out = subprocess.run(
        [str(_venv_python()), "-m", "pip", "freeze", "--exclude-editable"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = [
        line
        for line in out.splitlines()
        if re.match(r"^[A-Za-z0-9._-]+==\S+$", line) and not line.lower().startswith("kappaflow")
    ]
    return "\n".join(sorted(lines)) + "\n"


def _pyspark_version(constraints: str) -> str:
    found = re.search(r"^pyspark==(\S+)$", constraints, re.MULTILINE)
    if found is None:
        raise InputError("pyspark is not in the dev venv: run `make setup` (it installs kappaflow[spark])")
    return found.group(1)


def wheelhouse_spec(kind: str) -> tuple[str, list[str], str]:
    """(digest, pip wheel arguments, constraints) of one wheelhouse: runtime, operator or spark."""
    constraints = _constraints()
    if kind == "spark":
        pins = "".join(
            line + "\n" for line in constraints.splitlines() if re.match(r"(pyspark|py4j)==", line)
        )
        version = _pyspark_version(constraints)
        return digest(RECIPE, kind, pins), [f"pyspark=={version}"], pins
    specs = {"runtime": [str(ROOT), str(ROOT / "runtime" / "native")], "operator": [f"{ROOT}[operator]"]}[
        kind
    ]
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    return digest(RECIPE, kind, python, constraints, files_digest(WHEEL_SOURCES)), specs, constraints


def wheelhouse(kind: str) -> Path:
    """The cached wheelhouse of `kind` for the current sources, built with `pip wheel` when missing."""
    key, specs, constraints = wheelhouse_spec(kind)
    target = cache_dir() / "wheelhouse" / f"{kind}-{key[:16]}"
    if (target / COMPLETE).is_file():
        return target
    with file_lock(cache_dir() / "wheelhouse" / ".lock"):
        if (target / COMPLETE).is_file():
            return target
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        (partial / "constraints.txt").write_text(constraints)
        env = {**os.environ}
        env.setdefault("CARGO_TARGET_DIR", str(cache_dir().parent / "cargo-target"))
        env["PATH"] = f"{env.get('PATH', '')}:{Path.home() / '.cargo' / 'bin'}"
        shown = " ".join(s.replace(str(ROOT), ".") for s in specs)
        log(f"wheels ({kind}): pip wheel {shown} (log .run/logs/wheels-{kind}.log)")
        started = time.monotonic()
        argv = [*NICE, str(_venv_python()), "-m", "pip", "wheel", "--disable-pip-version-check"]
        argv += ["--wheel-dir", str(partial), "-c", str(partial / "constraints.txt"), *specs]
        run_logged(argv, f"wheels-{kind}.log", f"pip wheel ({kind})", env=env, cwd=ROOT)
        (partial / "constraints.txt").unlink()
        wheels = sorted(partial.glob("*.whl"))
        (partial / COMPLETE).write_text("".join(w.name + "\n" for w in wheels))
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
        size = human_size(tree_size(target.glob("*.whl")))
        log(f"wheels ({kind}): {len(wheels)} wheels, {size}, in {time.monotonic() - started:.0f}s")
    return target


def stage_wheelhouse(kind: str) -> None:
    """Put the `kind` wheelhouse where the Dockerfiles' `wheelhouse` stage copies it from."""
    stage(sorted(wheelhouse(kind).glob("*.whl")), context_dir() / "wheels" / kind)


# ---------------------------------------------------------------------------------------------- jars


def kafka_libs_digest() -> str:
    return digest(RECIPE, "kafka-libs", KAFKA_VERSION, SCALA_BINARY, LOG4J_VERSION)


def _kafka_pom() -> str:
    deps = [
        ("org.apache.kafka", f"kafka_{SCALA_BINARY}", KAFKA_VERSION),
        ("org.apache.kafka", "kafka-tools", KAFKA_VERSION),
        ("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J_VERSION),
        ("org.apache.logging.log4j", "log4j-core", LOG4J_VERSION),
    ]
    xml = "\n".join(
        f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
        f"<version>{v}</version></dependency>"
        for g, a, v in deps
    )
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!-- Generated by tests/harness/image_inputs.py: the Kafka image's classpath (broker and tools). -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.kappaflow.images</groupId>
  <artifactId>kafka-image-libs</artifactId>
  <version>{KAFKA_VERSION}</version>
  <packaging>pom</packaging>
  <dependencies>
{xml}
  </dependencies>
</project>
"""


def kafka_libs() -> Path:
    """The Kafka image's jars: the broker's classpath and kafka-tools, resolved once with Maven.

    The broker harness's jar set lacks kafka-tools (its tests talk to the broker through clients), but
    the image's users expect kafka-topics.sh & co.; one Maven resolution of both keeps one version of
    every library on the classpath."""
    home = cache_dir() / "kafka-libs" / KAFKA_VERSION
    libs = home / "libs"
    if (libs / COMPLETE).is_file():
        return libs
    ensure_tool("mvn", "maven")
    with file_lock(home / ".lock"):
        if (libs / COMPLETE).is_file():
            return libs
        partial = home / "libs.partial"
        shutil.rmtree(partial, ignore_errors=True)
        (home / "pom.xml").write_text(_kafka_pom())
        log(f"Kafka {KAFKA_VERSION} jars (broker and tools): Maven (log .run/logs/maven-kafka-image.log)")
        argv = ["mvn", "-B", "-C", "-f", str(home / "pom.xml"), f"{DEPENDENCY_PLUGIN}:copy-dependencies"]
        argv += ["-DincludeScope=runtime", f"-DoutputDirectory={partial}"]
        run_logged(argv, "maven-kafka-image.log", "resolving the Kafka image's jars")
        jars = sorted(partial.glob("*.jar"))
        shutil.rmtree(libs, ignore_errors=True)
        partial.rename(libs)
        (libs / COMPLETE).write_text("".join(j.name + "\n" for j in jars))
    return libs


def stage_kafka_libs() -> None:
    stage(sorted(kafka_libs().glob("*.jar")), context_dir() / "kafka" / "libs")


def spark_jars_digest() -> str:
    from kappaflow.spark.jars import CONNECTOR, spark_version

    return digest(RECIPE, "spark-jars", CONNECTOR, spark_version())


def stage_spark() -> None:
    """PySpark's wheel and the connector jars (with the marker kappaflow.spark.jars trusts)."""
    from kappaflow.spark.jars import ensure_kafka_connector

    jars = ensure_kafka_connector(verbose=True)
    stage(sorted(wheelhouse("spark").glob("*.whl")), context_dir() / "spark" / "wheels")
    stage([*jars, jars[0].parent / COMPLETE], context_dir() / "spark" / "jars")


# ----------------------------------------------------------------------------------- pause and Debian


def pause_binary() -> Path:
    """Kubernetes' pause, from `build/pause/linux/pause.c` of the k8s.io/kubernetes module, static."""
    out = cache_dir() / "pause" / K8S_VERSION
    binary = out / "pause"
    if binary.is_file():
        return binary
    go = ensure_tool("go", "golang-go")
    ensure_tool("gcc", "gcc")
    out.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [go, "mod", "download", "-json", f"k8s.io/kubernetes@{K8S_VERSION}"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "GOFLAGS": "-mod=mod"},
        cwd=out,
    )
    if result.returncode:
        raise InputError(f"go mod download k8s.io/kubernetes@{K8S_VERSION} failed:\n{result.stderr[-2000:]}")
    source = Path(json.loads(result.stdout)["Dir"]) / "build" / "pause" / "linux" / "pause.c"
    shutil.copyfile(source, out / "pause.c")
    argv = [
        "gcc",
        "-Os",
        "-static",
        "-DVERSION=3.10-kappaflow",
        "-o",
        str(out / "pause.tmp"),
        str(out / "pause.c"),
    ]
    run_logged(argv, "pause-gcc.log", "gcc pause.c")
    run_logged(["strip", str(out / "pause.tmp")], "pause-gcc.log", "strip pause")
    (out / "pause.tmp").rename(binary)
    return binary


def debian_suite() -> str:
    if suite := os.environ.get("KAPPAFLOW_DEBIAN_SUITE"):
        return suite
    found = re.search(r"^VERSION_CODENAME=(\S+)", Path("/etc/os-release").read_text(), re.MULTILINE)
    return found.group(1) if found else "bookworm"


def debian_mirror(suite: str) -> str:
    """The host's own apt mirror for `suite` (one-line or deb822 sources), unless set explicitly."""
    if mirror := os.environ.get("KAPPAFLOW_DEBIAN_MIRROR"):
        return mirror
    apt = Path("/etc/apt")
    sources = [apt / "sources.list", *sorted((apt / "sources.list.d").glob("*.list"))]
    sources += sorted((apt / "sources.list.d").glob("*.sources"))
    for path in sources:
        text = path.read_text() if path.is_file() else ""
        for line in text.splitlines():  # deb [options] URI SUITE COMPONENTS...
            found = re.match(r"\s*deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)", line)
            if found and found.group(2) == suite:
                return found.group(1)
        for stanza in re.split(r"\n\s*\n", text):  # deb822: Types/URIs/Suites fields
            fields: dict[str, str] = dict(re.findall(r"^(\w+):\s*(.*)$", stanza, re.MULTILINE))
            if "deb" in fields.get("Types", "").split() and suite in fields.get("Suites", "").split():
                return fields["URIs"].split()[0]
    return "http://deb.debian.org/debian"


def debootstrap_rootfs(suite: str, mirror: str) -> Path:
    """A fresh minbase root filesystem of `suite` (needs root, as debootstrap does)."""
    debootstrap = ensure_tool("debootstrap", "debootstrap")
    rootfs = cache_dir() / "debian-rootfs"
    shutil.rmtree(rootfs, ignore_errors=True)
    log(f"debootstrap --variant=minbase {suite} from {mirror} (about 30 s; log .run/logs/debootstrap.log)")
    argv = [*NICE, debootstrap, "--variant=minbase", suite, str(rootfs), mirror]
    run_logged(argv, "debootstrap.log", f"debootstrap {suite}")
    # debootstrap leaves the downloaded .debs, apt's package lists and caches (80 MB): every image on this
    # base runs `apt-get update` before installing anyway.
    for pattern in ("var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*_*"):
        for leftover in rootfs.glob(pattern):
            leftover.unlink()
    return rootfs
