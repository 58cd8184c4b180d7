"""The Python daemon Spark forks its workers from (`spark.python.daemon.module`, set by session.py).

It is pyspark's own daemon with two fixed costs taken out of every Spark task, both measured with py-spy
on bench/reprocess.py (together about a fifth of the workers' CPU time at 400k lines):

* Spark puts `pyspark.zip`, py4j's zip and its 15 MB spark-core jar at the front of the workers' import
  path. Every task calls `importlib.invalidate_caches()`, which makes each zip importer re-read its
  archive's directory (thousands of jar entries), and every import first searches the archives and
  compiles pyspark from source (a zip holds no bytecode). Where pyspark and py4j are installed as
  packages (pip, the runtime image), those entries are dropped, so the installed, compiled copies load.
* Workers are forked from this process, so what it imports they inherit: the executor module (with
  confluent-kafka, RocksDB and the runtime's tasks) is imported once here instead of once per worker.

Run as `python -m kappaflow.spark.daemon [worker module]` by Spark; importing it does nothing.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys


def _is_spark_archive(entry: str) -> bool:
    name = os.path.basename(entry)
    spark_zip = name == "pyspark.zip" or (name.startswith("py4j-") and name.endswith(".zip"))
    return (spark_zip or name.endswith(".jar")) and os.path.isfile(entry)


def installed_path(path: list[str]) -> list[str]:
    """`path` without Spark's archives when pyspark and py4j are importable from its other entries.

    A Spark distribution without pip-installed pyspark only has the archives: then nothing is dropped.
    """
    kept = [entry for entry in path if not _is_spark_archive(entry)]
    finder = importlib.machinery.PathFinder
    if all(finder.find_spec(name, kept) is not None for name in ("pyspark", "py4j")):
        return kept
    return list(path)


def _main() -> None:
    kept = installed_path(sys.path)
    dropped = set(sys.path) - set(kept)
    inside = tuple(entry + os.sep for entry in dropped)
    # Importers of the archives and of packages inside them (a namespace package `org` in the jar).
    for entry in list(sys.path_importer_cache):
        if entry in dropped or entry.startswith(inside):
            del sys.path_importer_cache[entry]
    sys.path[:] = kept
    from pyspark.daemon import manager

    import kappaflow.spark.executor  # noqa: F401  # inherited by every forked worker

    manager()  # type: ignore[no-untyped-call]


if __name__ == "__main__":
    _main()
