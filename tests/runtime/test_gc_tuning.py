"""The collector settings `kappaflow run` and the worker processes apply (runner/gc_tuning.py).

Checked in a child interpreter: they are process-wide, and the test process must keep its own."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

RUNTIME = Path(__file__).resolve().parents[2] / "runtime"


def test_start_up_objects_are_frozen_and_the_young_generation_is_collected_less_often() -> None:
    script = textwrap.dedent(
        """
        import gc
        from kappaflow.runner import tune_gc_for_streaming
        from kappaflow.runner.gc_tuning import YOUNG_GENERATION_THRESHOLD

        before = gc.get_threshold()
        assert gc.get_freeze_count() == 0
        tune_gc_for_streaming()
        assert gc.get_freeze_count() > 1000, gc.get_freeze_count()  # the imported modules at least
        assert gc.get_threshold() == (YOUNG_GENERATION_THRESHOLD, before[1], before[2])
        # cycles are still found: a collection frees an unreachable cycle made after the freeze
        class Node:
            pass
        a, b = Node(), Node()
        a.other, b.other = b, a
        del a, b
        assert gc.collect() >= 2
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(RUNTIME)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
