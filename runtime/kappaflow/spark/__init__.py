"""Reprocessing on PySpark: the same Topology, executed over the retained log (the Kappa architecture).

`reprocess(app, config)` runs every sub-topology per partition with the runtime's own tasks and stores,
writes outputs, compacted changelogs and per-task RocksDB state for a new application id, and commits the
input range's end offsets for it, so `kappaflow run` continues from there without replaying. pyspark is an
optional dependency (`pip install 'kappaflow[spark]'`); importing this package does not need it.
"""

from kappaflow.spark.reprocess import Reprocessor, ReprocessResult, reprocess

__all__ = ["ReprocessResult", "Reprocessor", "reprocess"]
