"""Reprocessing says how a long Spark stage is getting on, and warns before writing to live outputs."""

from __future__ import annotations

import time

import pytest

from kappaflow.spark.progress import SparkTasks, StageProgress, live_output_warning, stage_progress_text

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]


def _slow(value: int) -> int:
    time.sleep(1.0)
    return value


def test_a_running_stage_reports_its_spark_tasks(spark):
    lines: list[str] = []
    with StageProgress(spark, "stage 1/2 (sub-topology 0)", lines.append, interval_s=0.3):
        assert sorted(spark.sparkContext.parallelize(range(6), 6).map(_slow).collect()) == list(range(6))
    assert lines, "no progress while the stage ran"
    assert all(line.startswith("stage 1/2 (sub-topology 0): ") for line in lines), lines
    assert all("/6 Spark tasks done" in line for line in lines), lines
    done = [int(line.split(": ")[1].split("/")[0]) for line in lines]
    assert done == sorted(done) and done[0] < 6, lines  # seen while it ran, never going back
    count = len(lines)
    time.sleep(0.8)
    assert len(lines) == count, "reported after the stage ended"


def test_progress_text_and_the_live_output_warning():
    assert stage_progress_text("stage 2/3", SparkTasks(8, 5, 2, 1), 42.4) == (
        "stage 2/3: 5/8 Spark tasks done, 2 running, 1 failed (42s)"
    )
    warning = live_output_warning(["counts", "alerts"], {"alerts": "alerts-v2"}, skip_outputs=False)
    assert warning is not None and "live output topic(s) counts:" in warning
    assert "--output-map counts=counts-reprocessed" in warning and "--skip-outputs" in warning
    assert "alerts" not in warning.split(":")[0]
    assert live_output_warning(["counts"], {"counts": "counts-v2"}, skip_outputs=False) is None
    assert live_output_warning(["counts"], {}, skip_outputs=True) is None
