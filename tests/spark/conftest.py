"""Spark-tier fixtures: one local[2] SparkSession for the whole session (a JVM start costs seconds)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    try:
        import pyspark  # noqa: F401
    except ImportError:  # a skipped tier would hide that reprocessing is untested: fail instead
        pytest.fail("pyspark is not installed: pip install -e '.[spark]' (see pyproject's spark extra)")
    from kappaflow.spark.session import create_session

    session = create_session("local[2]", "kappaflow-tests", {"spark.sql.shuffle.partitions": "2"})
    try:
        yield session
    finally:
        session.stop()
