"""Fixtures for the image tests: the images, built (or found up to date) once per session.

The images are what the Kubernetes tiers and users run, so these tests run real containers from them;
nothing is mocked. Without docker they fail in CI (CI=true), where the harness must provide it, and are
skipped elsewhere (a developer machine without docker)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

import pytest

from tests.harness.docker_host import DockerUnavailable, docker
from tests.harness.images import ALL_IMAGES, ImageBuildError, ensure_images

DockerRun = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="session")
def images() -> dict[str, str]:
    """{image name: docker image id} of every image, built when missing or stale."""
    try:
        return ensure_images(ALL_IMAGES)
    except DockerUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"docker is needed for the image tests and CI must have it: {exc}")
        pytest.skip(f"docker is not available: {exc}")
    except ImageBuildError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def docker_run(images: dict[str, str]) -> DockerRun:
    """`docker run --rm` as PodSecurity "restricted" and a read-only root filesystem would run it:
    uid 1000, no capabilities, no privilege escalation, no network."""

    def run(
        image: str, *args: str, entrypoint: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        argv = [docker(), "run", "--rm", "--network", "none", "--read-only", "--user", "1000"]
        argv += ["--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
        if entrypoint is not None:
            argv += ["--entrypoint", entrypoint]
        return subprocess.run(
            [*argv, image, *args], capture_output=True, text=True, timeout=timeout, check=False
        )

    return run
