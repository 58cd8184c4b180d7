"""Applications the Kafka-tier tests run in subprocesses (`kappaflow run tests.kafka.apps:...`)."""

from __future__ import annotations

import os
from typing import Any

from tests.kafka.streams_support import wordcount_topology


def wordcount() -> Any:
    return wordcount_topology(os.environ["WC_INPUT"], os.environ["WC_OUTPUT"])
