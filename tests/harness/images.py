"""Every image kappaflow ships, built on this machine with docker and no container registry.

Why: the project's Kubernetes tiers (the real node harness, kind) run the images users run, and this
machine reaches package registries only. So the bases are made from Debian packages (debootstrap, then
`docker import`), pause from Kubernetes' own pause.c, and the project's Dockerfiles - which keep their
official bases for users with a registry - are built with build arguments that swap in the local bases
and take wheels and jars prepared on the host (tests/harness/image_inputs.py) from the build context.

Cached by content: every image carries a label (`kappaflow.inputs`) with the digest of what it is built
from - its Dockerfile, the files it copies, the wheels' sources, the build arguments and the docker IDs
of the images it builds FROM. An image whose label matches is not rebuilt, so `make images` with nothing
changed takes seconds; a changed input rebuilds that image and the ones built FROM it, and docker's
layer cache keeps the steps before the change.

CLI (`make images`)::

    python -m tests.harness.images build [--only NAME ...] [--rebuild]
    python -m tests.harness.images list

For other harnesses: `ALL_IMAGES` (the names) and `ensure_images(names) -> {name: docker image id}`.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.harness import image_inputs as inputs
from tests.harness import spark_operator
from tests.harness.docker_host import (
    DockerUnavailable,
    docker,
    docker_env,
    inspect,
    log,
)
from tests.harness.kafka_broker import KAFKA_VERSION
from tests.harness.progress import ROOT, component_line, human_size, log_dir

VERSION = "0.1.0"
LABEL = "kappaflow.inputs"

PAUSE = "kappaflow.local/pause:3.10"
DEBIAN = "kappaflow.local/debian:bookworm"
PYTHON3 = "kappaflow.local/python3:bookworm"
RUNTIME = f"kappaflow-runtime:{VERSION}"
OPERATOR = f"kappaflow-operator:{VERSION}"
EXAMPLES = f"kappaflow-examples:{VERSION}"
SPARK = f"kappaflow-spark:{VERSION}"
#: The word count example on the Spark image: what `upgrade: reprocess` runs as driver and executors.
EXAMPLES_SPARK = f"kappaflow-examples-spark:{VERSION}"
SPARK_OPERATOR = f"kappaflow-spark-operator:{spark_operator.VERSION.lstrip('v')}"
KAFKA = f"kappaflow-kafka:{KAFKA_VERSION}"

PAUSE_DOCKERFILE = 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n'
PYTHON3_DOCKERFILE = f"""FROM {DEBIAN}
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv procps \\
 && rm -rf /var/lib/apt/lists/*
CMD ["python3"]
"""


class ImageBuildError(RuntimeError):
    """An image could not be built; the message names the log with the full transcript."""


@dataclass(frozen=True)
class Recipe:
    """How one image is built: its inputs' digest (cheap to compute), then staging and the build."""

    inputs: list[str | bytes]
    """Digest material: file contents, versions, build arguments, the docker IDs of the bases."""
    build: Callable[[str], None]
    """Builds and tags the image, given the digest to record in its label."""
    prepare: Callable[[], None] = lambda: None
    """Puts the inputs in place (wheels, jars, generated Dockerfiles); run only when building."""


@dataclass(frozen=True)
class Image:
    name: str
    alias: str
    needs: tuple[str, ...]
    recipe: Callable[[dict[str, str], bool], Recipe] = field(repr=False)
    """(docker IDs of the images in `needs`, rebuild without docker's cache) -> the recipe."""


def _read(*paths: str) -> list[str | bytes]:
    return [part for p in paths for part in (p, (ROOT / p).read_bytes())]


def _docker_build(
    name: str,
    dockerfile: Path,
    context: Path,
    label: str,
    build_args: dict[str, str] | None = None,
    *,
    no_cache: bool = False,
) -> None:
    """`docker build` with BuildKit and the host's network (apt inside reaches the host's mirror, as the
    host's apt does); the client runs under nice, its transcript in .run/logs/image-<name>.log."""
    argv = ["nice", "-n", "10", docker(), "build", "--network", "host", "-f", str(dockerfile), "-t", name]
    argv += ["--label", f"{LABEL}={label}", *(["--no-cache"] if no_cache else [])]
    for key, value in (build_args or {}).items():
        argv += ["--build-arg", f"{key}={value}"]
    argv.append(str(context))
    log_path = log_dir() / f"image-{name.rsplit('/', 1)[-1].replace(':', '-')}.log"
    with log_path.open("w") as out:
        out.write(f"$ DOCKER_BUILDKIT=1 {shlex.join(argv)}\n")
        out.flush()
        code = subprocess.run(
            argv, stdout=out, stderr=subprocess.STDOUT, env=docker_env(), check=False
        ).returncode
    if code:
        tail = "".join(log_path.read_text(errors="replace").splitlines(keepends=True)[-40:])
        raise ImageBuildError(f"docker build of {name} failed (full log {log_path}):\n{tail}")


# --------------------------------------------------------------------------------------------- recipes


def _pause(_ids: dict[str, str], no_cache: bool) -> Recipe:
    work = inputs.cache_dir() / "pause" / inputs.K8S_VERSION

    def prepare() -> None:
        inputs.pause_binary()
        (work / "Dockerfile").write_text(PAUSE_DOCKERFILE)

    def build(label: str) -> None:
        _docker_build(PAUSE, work / "Dockerfile", work, label, no_cache=no_cache)

    return Recipe([inputs.RECIPE, inputs.K8S_VERSION, PAUSE_DOCKERFILE], build, prepare)


def _debian(_ids: dict[str, str], _no_cache: bool) -> Recipe:
    suite = inputs.debian_suite()
    mirror = inputs.debian_mirror(suite)

    def build(label: str) -> None:
        rootfs = inputs.debootstrap_rootfs(suite, mirror)
        log_path = log_dir() / "image-debian.log"
        changes = ["--change", f"LABEL {LABEL}={label}", "--change", 'CMD ["bash"]']
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        with log_path.open("w") as out:
            code = subprocess.run(
                [docker(), "import", *changes, "-", DEBIAN],
                stdin=tar.stdout,
                stdout=out,
                stderr=out,
                check=False,
            ).returncode
        assert tar.stdout is not None
        tar.stdout.close()
        if tar.wait() or code:
            raise ImageBuildError(f"docker import of the {suite} root filesystem failed (log {log_path})")
        subprocess.run(["rm", "-rf", "--one-file-system", str(rootfs)], check=True)

    return Recipe([inputs.DEBIAN_RECIPE, suite, mirror], build)


def _python3(ids: dict[str, str], no_cache: bool) -> Recipe:
    work = inputs.cache_dir() / "python3"

    def prepare() -> None:
        work.mkdir(parents=True, exist_ok=True)
        (work / "Dockerfile").write_text(PYTHON3_DOCKERFILE)

    def build(label: str) -> None:
        _docker_build(PYTHON3, work / "Dockerfile", work, label, no_cache=no_cache)

    return Recipe([ids[DEBIAN], PYTHON3_DOCKERFILE], build, prepare)


def _wheels_image(name: str, dockerfile: str, kind: str) -> Callable[[dict[str, str], bool], Recipe]:
    """runtime/operator: the Dockerfile's `wheelhouse` stage on the local python3 base."""

    def recipe(ids: dict[str, str], no_cache: bool) -> Recipe:
        args = {"BASE": PYTHON3, "WHEELS": "wheelhouse"}
        key = inputs.wheelhouse_spec(kind)[0]
        material = [ids[PYTHON3], key, repr(sorted(args.items())), *_read(dockerfile, ".dockerignore")]
        if kind == "runtime":
            material += _read("runtime/kappaflow/spark_driver.py")

        def build(label: str) -> None:
            _docker_build(name, ROOT / dockerfile, ROOT, label, args, no_cache=no_cache)

        return Recipe(material, build, lambda: inputs.stage_wheelhouse(kind))

    return recipe


def _examples(ids: dict[str, str], no_cache: bool) -> Recipe:
    dockerfile = "examples/k8s/Dockerfile.wordcount"
    args = {"RUNTIME_IMAGE": RUNTIME}

    def build(label: str) -> None:
        _docker_build(EXAMPLES, ROOT / dockerfile, ROOT, label, args, no_cache=no_cache)

    material = [ids[RUNTIME], *_read(dockerfile, ".dockerignore"), inputs.files_digest(["examples"])]
    return Recipe(material, build)


def _spark(ids: dict[str, str], no_cache: bool) -> Recipe:
    dockerfile = "runtime/Dockerfile.spark"
    from kappaflow.spark.jars import spark_version

    args = {"RUNTIME_IMAGE": RUNTIME, "SPARK_DEPS": "context", "PYSPARK_VERSION": spark_version()}

    def build(label: str) -> None:
        _docker_build(SPARK, ROOT / dockerfile, ROOT, label, args, no_cache=no_cache)

    key = inputs.wheelhouse_spec("spark")[0]
    material = [ids[RUNTIME], key, inputs.spark_jars_digest(), repr(sorted(args.items()))]
    material += _read("runtime/spark-entrypoint.sh")
    return Recipe([*material, *_read(dockerfile, ".dockerignore")], build, inputs.stage_spark)


def _examples_spark(ids: dict[str, str], no_cache: bool) -> Recipe:
    """The example's Dockerfile on the Spark image: a user's app image for reprocessing is built the same
    way, FROM kappaflow-spark instead of kappaflow-runtime."""
    dockerfile = "examples/k8s/Dockerfile.wordcount"
    args = {"RUNTIME_IMAGE": SPARK}

    def build(label: str) -> None:
        _docker_build(EXAMPLES_SPARK, ROOT / dockerfile, ROOT, label, args, no_cache=no_cache)

    material = [ids[SPARK], *_read(dockerfile, ".dockerignore"), inputs.files_digest(["examples"])]
    return Recipe(material, build)


def _spark_operator(ids: dict[str, str], no_cache: bool) -> Recipe:
    """The Kubeflow Spark operator's controller (built from its Go module) on the Spark image."""
    dockerfile = "runtime/Dockerfile.spark-operator"
    args = {"SPARK_IMAGE": SPARK, "OPERATOR_BIN": "context", "SPARK_OPERATOR_VERSION": spark_operator.VERSION}

    def prepare() -> None:
        inputs.stage([spark_operator.build()], inputs.context_dir() / "spark-operator")

    def build(label: str) -> None:
        _docker_build(SPARK_OPERATOR, ROOT / dockerfile, ROOT, label, args, no_cache=no_cache)

    material = [ids[SPARK], spark_operator.MODULE, spark_operator.VERSION, repr(sorted(args.items()))]
    return Recipe([*material, *_read(dockerfile, ".dockerignore")], build, prepare)


def _kafka(ids: dict[str, str], no_cache: bool) -> Recipe:
    dockerfile = "examples/k8s/kafka/Dockerfile"
    args = {"BASE": DEBIAN, "KAFKA_LIBS": "context", "KAFKA_VERSION": KAFKA_VERSION}

    def build(label: str) -> None:
        _docker_build(KAFKA, ROOT / dockerfile, ROOT, label, args, no_cache=no_cache)

    material: list[str | bytes] = [ids[DEBIAN], inputs.kafka_libs_digest(), repr(sorted(args.items()))]
    material += [*_read(".dockerignore"), inputs.files_digest(["examples/k8s/kafka"])]
    return Recipe(material, build, inputs.stage_kafka_libs)


IMAGES: dict[str, Image] = {
    image.name: image
    for image in (
        Image(PAUSE, "pause", (), _pause),
        Image(DEBIAN, "debian", (), _debian),
        Image(PYTHON3, "python3", (DEBIAN,), _python3),
        Image(RUNTIME, "runtime", (PYTHON3,), _wheels_image(RUNTIME, "runtime/Dockerfile", "runtime")),
        Image(OPERATOR, "operator", (PYTHON3,), _wheels_image(OPERATOR, "operator/Dockerfile", "operator")),
        Image(EXAMPLES, "examples", (RUNTIME,), _examples),
        Image(SPARK, "spark", (RUNTIME,), _spark),
        Image(EXAMPLES_SPARK, "examples-spark", (SPARK,), _examples_spark),
        Image(SPARK_OPERATOR, "spark-operator", (SPARK,), _spark_operator),
        Image(KAFKA, "kafka", (DEBIAN,), _kafka),
    )
}
#: Every image the project ships, bases first (a name's bases come before it).
ALL_IMAGES: tuple[str, ...] = tuple(IMAGES)


def full_name(name: str) -> str:
    """The image's full name, given it or its alias (`runtime`, `kafka`, ...)."""
    full = {image.alias: full for full, image in IMAGES.items()}.get(name, name)
    if full not in IMAGES:
        aliases = ", ".join(image.alias for image in IMAGES.values())
        raise ImageBuildError(f"unknown image {name!r}; known: {', '.join(ALL_IMAGES)} (or {aliases})")
    return full


def resolve(names: Iterable[str]) -> list[str]:
    """Full names (aliases like `runtime` accepted) plus the images they build FROM, bases first."""
    wanted: set[str] = set()

    def add(name: str) -> None:
        full = full_name(name)
        if full not in wanted:
            wanted.add(full)
            for base in IMAGES[full].needs:
                add(base)

    for name in names:
        add(name)
    return [name for name in ALL_IMAGES if name in wanted]


def ensure_images(
    names: Sequence[str] | None = None, *, rebuild: Sequence[str] | bool = False
) -> dict[str, str]:
    """Build what is missing or stale among `names` (default: all) and their bases; return
    {name: docker image id} for all of them. `rebuild` (True, or some names) rebuilds without any cache.

    Serialised machine-wide by a lock: the tags live in the one docker daemon, and `.run/images` is
    restaged for each build."""
    order = resolve(ALL_IMAGES if names is None else names)
    forced = set(order) if rebuild is True else {full_name(n) for n in rebuild or []}
    ids: dict[str, str] = {}
    with inputs.file_lock(inputs.cache_dir() / ".build.lock"):
        for name in order:
            image = IMAGES[name]
            recipe = image.recipe({base: ids[base] for base in image.needs}, name in forced)
            label = inputs.digest(*recipe.inputs)
            current = inspect(name, LABEL)
            if current and name not in forced and current[1] == label:
                ids[name] = current[0]
                print(component_line("image", name, "up to date", current[2]), flush=True)
                continue
            why = "missing" if current is None else ("rebuild" if name in forced else "inputs changed")
            log(f"{name}: building ({why}; log .run/logs/)")
            started = time.monotonic()
            recipe.prepare()
            recipe.build(label)
            built = inspect(name, LABEL)
            if built is None or built[1] != label:
                raise ImageBuildError(f"{name}: the build finished but the image is not labelled {label}")
            ids[name] = built[0]
            if current is not None and current[0] != built[0]:
                _drop_untagged(current[0])
            status = f"built in {time.monotonic() - started:.0f}s"
            print(component_line("image", name, status, built[2]), flush=True)
    return ids


def _drop_untagged(old_id: str) -> None:
    """Remove the image a rebuild replaced, unless something still uses it (another tag, a container, a
    child image): every edit would otherwise leave a dangling copy of a 400 MB image behind. docker
    refuses to remove an image in use, which is the check wanted here."""
    subprocess.run([docker(), "image", "rm", old_id], capture_output=True, check=False)


def list_images() -> list[tuple[str, str, str]]:
    """(name, docker id or '-', size or '-') for every image, without building anything."""
    rows = []
    for name in ALL_IMAGES:
        found = inspect(name, LABEL)
        rows.append((name, found[0][7:19], human_size(found[2])) if found else (name, "-", "-"))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.harness.images", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build every image that is missing or whose inputs changed")
    build.add_argument("--only", nargs="+", metavar="NAME", help="these images (and their bases) only")
    build.add_argument("--rebuild", action="store_true", help="rebuild them without docker's layer cache")
    sub.add_parser("list", help="the images, their docker IDs and sizes")
    args = parser.parse_args(argv)
    try:
        if args.command == "list":
            for name, short_id, size in list_images():
                print(f"{name:40} {short_id:14} {size}")
            return 0
        started = time.monotonic()
        names = args.only or list(ALL_IMAGES)
        ensure_images(names, rebuild=args.only if args.rebuild and args.only else bool(args.rebuild))
        log(f"all images ready in {time.monotonic() - started:.0f}s")
    except (ImageBuildError, inputs.InputError, DockerUnavailable) as exc:
        print(f"images: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
