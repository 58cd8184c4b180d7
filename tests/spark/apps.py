"""Applications for `kappaflow reprocess` CLI tests: topic names come from the environment, so a test can
point a `module:attr` at its own topics (Spark's Python workers inherit the driver's environment)."""

from __future__ import annotations

import os
from typing import Any

from tests.kafka.streams_support import wordcount_topology


def wordcount() -> Any:
    return wordcount_topology(os.environ["KAPPAFLOW_TEST_INPUT"], os.environ["KAPPAFLOW_TEST_OUTPUT"])
