"""kappaflow's native core: `kappaflow_native` (Rust, `runtime/native/`), a task's drain loop compiled.

The core is optional. `make setup` builds it with maturin when Rust is on the machine; without it kappaflow
runs the loop's Python twin (`kappaflow.tasks.drain.drain_python`), with the same results, slower.
`kappaflow.native.enabled=false` keeps a process on the Python loop with the core installed: the tests run
the in-process tiers with both that way.
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections import deque
from typing import Protocol, cast

from kappaflow.tasks.drain import Drained, DrainPlan, RawTuple

log = logging.getLogger(__name__)

PROTOCOL = 2
"""The version of the calls below; a core built from other sources says another and is not used."""


class NativeCore(Protocol):
    PROTOCOL: int

    def drain(
        self, queue: deque[RawTuple], limit: int, plan: DrainPlan, partition_time: int, stream_time: int, /
    ) -> Drained:
        """`kappaflow.tasks.drain.drain_python`."""
        ...


@functools.cache
def installed_core() -> NativeCore | None:
    """The native core, or None when it is not installed (or built for another protocol)."""
    try:
        module = importlib.import_module("kappaflow_native")
    except ImportError:
        return None
    found = getattr(module, "PROTOCOL", None)
    if found != PROTOCOL:
        log.warning(
            "kappaflow_native speaks protocol %s, this kappaflow %s: using the Python loop", found, PROTOCOL
        )
        return None
    return cast(NativeCore, module)


def core(enabled: bool) -> NativeCore | None:
    """The core to run the drain loop with: the installed one, unless `kappaflow.native.enabled` is false."""
    return installed_core() if enabled else None


def describe(enabled: bool) -> str:
    """Which drain loop a process runs, for its start-up log."""
    if not enabled:
        return "Python (kappaflow.native.enabled=false)"
    return (
        "native (kappaflow_native)"
        if installed_core() is not None
        else "Python (kappaflow_native not installed)"
    )
