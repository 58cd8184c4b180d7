"""The images `make images` builds, run as their users run them: uid 1000, read-only root filesystem,
no capabilities, no network. Each test says what a pod on Kubernetes relies on."""

from __future__ import annotations

import subprocess
import time
import uuid

import pytest

from tests.harness.docker_host import docker, image_label
from tests.harness.images import (
    ALL_IMAGES,
    EXAMPLES,
    KAFKA,
    LABEL,
    OPERATOR,
    PAUSE,
    PYTHON3,
    RUNTIME,
    SPARK,
    SPARK_OPERATOR,
    ensure_images,
)
from tests.images.conftest import DockerRun

pytestmark = [pytest.mark.images, pytest.mark.timeout(1800)]


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (
        f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    )
    return result.stdout


def test_every_image_is_built_and_labelled_with_its_inputs(images: dict[str, str]) -> None:
    assert set(images) == set(ALL_IMAGES)
    for name in ALL_IMAGES:
        assert image_label(name, LABEL), f"{name} has no {LABEL} label"


def test_up_to_date_images_are_not_rebuilt(images: dict[str, str]) -> None:
    """The content cache: nothing changed, so the same image IDs come back within seconds."""
    started = time.monotonic()
    assert ensure_images(ALL_IMAGES) == images
    assert time.monotonic() - started < 60


def test_runtime_cli_runs_read_only_as_uid_1000(docker_run: DockerRun) -> None:
    assert "describe" in _ok(docker_run(RUNTIME, "--help"))


def test_runtime_has_the_native_core_active(docker_run: DockerRun) -> None:
    code = "from kappaflow.tasks.native import describe; import kappaflow_native; print(describe(True))"
    assert _ok(docker_run(RUNTIME, "-c", code, entrypoint="python")).strip() == "native (kappaflow_native)"


def test_runtime_user_and_state_dir(docker_run: DockerRun) -> None:
    code = (
        "import os, pathlib; s = pathlib.Path('/var/lib/kappaflow/state');"
        "print(os.getuid(), s.stat().st_uid, os.environ['VIRTUAL_ENV'])"
    )
    assert _ok(docker_run(RUNTIME, "-c", code, entrypoint="python")).split() == [
        "1000",
        "1000",
        "/opt/kappaflow/venv",
    ]


def test_examples_image_describes_the_word_count(docker_run: DockerRun) -> None:
    out = _ok(docker_run(EXAMPLES, "describe", "examples.wordcount:build_topology"))
    assert out.startswith("Topologies:")
    assert "Source: KSTREAM-SOURCE-0000000000 (topics: [wordcount-input])" in out
    assert "Sink: KSTREAM-SINK-0000000008 (topic: wordcount-output)" in out
    code = "import examples.wordcount, examples.pageview_join, examples.windowed_fraud; print('ok')"
    assert _ok(docker_run(EXAMPLES, "-c", code, entrypoint="python")).strip() == "ok"


def test_operator_image_imports_the_handlers(docker_run: DockerRun) -> None:
    code = "import kappaflow_operator.main, kopf, os; print(os.getuid())"
    assert _ok(docker_run(OPERATOR, "-c", code, entrypoint="python")).strip() == "1000"
    assert "run" in _ok(docker_run(OPERATOR, "--help"))


def test_spark_image_has_pyspark_java_and_the_connector(docker_run: DockerRun) -> None:
    code = (
        "import pyspark; from kappaflow.spark.jars import ensure_kafka_connector;"
        "print(pyspark.__version__, len(ensure_kafka_connector(verbose=False)))"
    )
    version, jars = _ok(docker_run(SPARK, "-c", code, entrypoint="python")).split()
    assert version and int(jars) >= 2
    java = docker_run(SPARK, "-version", entrypoint="java")
    assert java.returncode == 0 and "openjdk" in java.stderr.lower()


def test_spark_image_entrypoint_serves_spark_pods_and_kappaflow(docker_run: DockerRun) -> None:
    """Spark's Kubernetes backend starts pods with `driver ...` / `executor` and env; anything else is a
    kappaflow command, as in the runtime image. An executor started without Spark's env says what is
    missing instead of a JVM stack trace."""
    executor = docker_run(SPARK, "executor")
    assert executor.returncode == 64 and "SPARK_DRIVER_URL" in executor.stderr, executor
    driver = docker_run(SPARK, "driver", "--version")
    assert driver.returncode != 0 and "SPARK_DRIVER_BIND_ADDRESS" in driver.stderr, driver
    assert "reprocess" in _ok(docker_run(SPARK, "--help"))
    # SPARK_HOME is PySpark's directory, with spark-submit and the Kafka connector among Spark's jars
    listing = _ok(docker_run(SPARK, "-c", 'ls "$SPARK_HOME/bin" "$SPARK_HOME/jars"', entrypoint="bash"))
    assert "spark-submit" in listing and "spark-sql-kafka-0-10_2.13-4.0.0.jar" in listing


def test_spark_operator_image_runs_the_controller_beside_spark_submit(docker_run: DockerRun) -> None:
    out = docker_run(SPARK_OPERATOR, "controller", "start", "--help")
    assert out.returncode == 0 and "--namespaces" in out.stdout + out.stderr, out
    home = _ok(
        docker_run(SPARK_OPERATOR, "-c", 'test -x "$SPARK_HOME/bin/spark-submit" && id -u', entrypoint="sh")
    )
    assert home.strip() == "1000"


def test_base_images(docker_run: DockerRun) -> None:
    assert _ok(
        docker_run(PYTHON3, "-c", "import sys, venv; print(sys.version_info[:2])", entrypoint="python3")
    )
    user = subprocess.run(
        [docker(), "image", "inspect", "--format", "{{.Config.User}}", PAUSE], capture_output=True, text=True
    )
    assert user.stdout.strip() == "65535:65535"


def test_kafka_image_starts_a_broker_offline() -> None:
    """One KRaft node with no network at all, listeners named as a StatefulSet would name them; the
    tools in the image reach it on localhost (both listeners)."""
    name = f"kappaflow-kafka-test-{uuid.uuid4().hex[:8]}"
    env = {
        "KAFKA_LISTENERS": "INTERNAL://:9092,EXTERNAL://:9094,CONTROLLER://:9093",
        "KAFKA_ADVERTISED_LISTENERS": "INTERNAL://localhost:9092,EXTERNAL://127.0.0.1:9094",
        "KAFKA_PORT": "tcp://10.96.0.10:9092",  # what Kubernetes injects for a Service named kafka: ignored
    }
    argv = [
        docker(),
        "run",
        "-d",
        "--rm",
        "--name",
        name,
        "--network",
        "none",
        "--read-only",
        "--tmpfs",
        "/tmp",
    ]
    argv += ["--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
    argv += [arg for key, value in env.items() for arg in ("-e", f"{key}={value}")]
    subprocess.run([*argv, KAFKA], check=True, capture_output=True)

    def kafka_topics(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [docker(), "exec", name, "kafka-topics.sh", *args], capture_output=True, text=True, timeout=60
        )

    try:
        deadline = time.monotonic() + 120
        while True:
            created = kafka_topics(
                "--bootstrap-server", "127.0.0.1:9094", "--create", "--topic", "images-test"
            )
            if created.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(1)
        logs = subprocess.run([docker(), "logs", name], capture_output=True, text=True).stdout
        assert created.returncode == 0, f"{created.stderr}\nbroker log:\n{logs[-4000:]}"
        listed = kafka_topics("--bootstrap-server", "localhost:9092", "--list")
        assert "images-test" in _ok(listed).split()
        uid = subprocess.run([docker(), "exec", name, "id", "-u"], capture_output=True, text=True)
        assert uid.stdout.strip() == "1000"
    finally:
        subprocess.run([docker(), "rm", "-f", "-v", name], capture_output=True)
