"""Spark's Kafka connector is resolved and cached; a local[2] session reads a topic from the broker."""

from __future__ import annotations

import pytest

from tests.spark.support import produce_records

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.timeout(300)]


def test_connector_jars_match_pyspark_and_are_cached():
    import pyspark

    from kappaflow.spark import jars

    found = jars.ensure_kafka_connector(verbose=False)
    names = [j.name for j in found]
    assert f"spark-sql-kafka-0-10_2.13-{pyspark.__version__}.jar" in names
    assert f"spark-token-provider-kafka-0-10_2.13-{pyspark.__version__}.jar" in names
    assert any(n.startswith("kafka-clients-") for n in names)
    target = jars.jars_dir(pyspark.__version__)
    assert (target / jars.COMPLETE_MARKER).read_text().split() == names
    # pyspark ships Scala and Spark itself: a second copy on the classpath would be a version lottery.
    assert not any(n.startswith(("scala-library", "spark-sql_", "spark-core")) for n in names)
    assert jars.ensure_kafka_connector(verbose=False) == found  # cached: same set, no Maven run


def test_local_session_reads_a_topic_from_the_broker(spark, kafka_bootstrap, kafka_topics):
    topic = kafka_topics("spark-read", partitions=2)
    produce_records(
        kafka_bootstrap, topic, ((f"k{i}".encode(), f"v{i}".encode(), 1000 + i) for i in range(50))
    )
    rows = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
        .selectExpr("CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v", "unix_millis(timestamp) AS ts")
        .collect()
    )
    assert sorted((r.k, r.v, r.ts) for r in rows) == sorted((f"k{i}", f"v{i}", 1000 + i) for i in range(50))


def test_a_local_sessions_jvm_compiles_with_c1_only(spark):
    """Locally the JVM shares the cores with the Python workers: its C2 compiler threads are left out
    (session.py), in the running JVM itself, not only in the settings."""
    arguments = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    assert "-XX:TieredStopAtLevel=1" in list(arguments.getInputArguments())
