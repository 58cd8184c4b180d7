"""The Spark driver's main file for `upgrade: reprocess`: what a SparkApplication's `mainApplicationFile`
points at (`local:///opt/kappaflow/reprocess.py` in the runtime image, a copy of this file).

spark-submit runs a Python application as a script with the SparkApplication's `arguments`; this runs
`kappaflow reprocess <arguments>`, whose default `--master auto` keeps the session spark-submit set up
(cluster mode, the executors the Spark operator asked for). Kept as a real module, not a line of shell
in the Dockerfile, so tests run exactly the file the image ships.
"""

from __future__ import annotations

import sys

from kappaflow.cli import main as cli_main


def main(argv: list[str] | None = None) -> int:
    return cli_main(["reprocess", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
