"""A SparkSession for reprocessing: Kafka connector jars on the classpath, executors that import kappaflow.

Local mode is the default (and what tests use): `local[N]` with the UI off and few shuffle partitions,
bound to 127.0.0.1. Python workers are started by the JVM with the driver's environment, so the driver's
import path is exported as PYTHONPATH: a worker can then import the user's application module and
kappaflow itself, as the driver did. On a cluster (the operator's SparkApplication) the image provides
both, and the master, the driver's address and the jars come from spark-submit: the driver pod binds
its pod IP and executors in other pods dial it through the driver's Service, so nothing here may pin
them to loopback (the Spark image has the Kafka connector on Spark's own classpath).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from kappaflow.api.config import StreamsConfig


def _python_path() -> str:
    entries = [os.getcwd(), *[p for p in sys.path if p and os.path.isdir(p)]]
    existing = os.environ.get("PYTHONPATH", "")
    seen: list[str] = []
    for entry in [*existing.split(os.pathsep), *entries]:
        if entry and entry not in seen:
            seen.append(entry)
    return os.pathsep.join(seen)


def create_session(
    master: str | None = "local[2]",
    app_name: str = "kappaflow-reprocess",
    conf: Mapping[str, str] | None = None,
) -> Any:
    """Build (or get) a SparkSession with Spark's Kafka connector; `master=None` keeps spark-submit's."""
    # here, not at module level: `python -m kappaflow.spark.jars` imports the package first
    from pyspark.sql import SparkSession

    from kappaflow.spark.jars import ensure_kafka_connector

    os.environ["PYTHONPATH"] = _python_path()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    settings: dict[str, str] = {}
    if master:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # bind to loopback, never a public interface
        builder = builder.master(master)
        settings.update(
            {
                "spark.jars": ",".join(str(j) for j in ensure_kafka_connector()),
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
            }
        )
        if master.strip().startswith("local"):
            # The one JVM then shares the cores with the Python workers, which do the work, for one
            # short job: C2's compiler threads were most of its CPU while a 1M-line run ran (per-thread
            # CPU, bench/reprocess.py: JVM 2.0-2.3 s -> 0.9-1.0 s with C1 only), time the workers lack
            # when local[N] takes every core. What the JVM runs here is byte moving that C1 does well.
            settings["spark.driver.extraJavaOptions"] = "-XX:TieredStopAtLevel=1"
    settings.update(
        {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "4",
            "spark.default.parallelism": "2",
            "spark.sql.session.timeZone": "UTC",
            # A retried task would produce its outputs twice: fail the job instead (see reprocess docstring).
            "spark.task.maxFailures": "1",
            "spark.python.worker.reuse": "true",
            # Workers fork from a daemon that imported kappaflow once and loads the installed pyspark
            # (daemon.py).
            "spark.python.daemon.module": "kappaflow.spark.daemon",
        }
    )
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


def spark_kafka_options(config: StreamsConfig) -> dict[str, str]:
    """Spark Kafka source options from the streams config (Java client names, prefixed `kafka.`)."""
    options = {"kafka.bootstrap.servers": config.require("bootstrap.servers")}
    protocol = config.get_str("security.protocol")
    if protocol:
        options["kafka.security.protocol"] = protocol
    mechanism = config.get_str("sasl.mechanism") or config.get_str("sasl.mechanisms")
    if mechanism:
        options["kafka.sasl.mechanism"] = mechanism
        user, password = config.get_str("sasl.username"), config.get_str("sasl.password")
        module = (
            "org.apache.kafka.common.security.plain.PlainLoginModule"
            if mechanism.upper() == "PLAIN"
            else "org.apache.kafka.common.security.scram.ScramLoginModule"
        )
        if user:
            options["kafka.sasl.jaas.config"] = f'{module} required username="{user}" password="{password}";'
    if config.exactly_once:
        options["kafka.isolation.level"] = "read_committed"
    return options
