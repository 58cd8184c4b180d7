"""kappaflow's native core: `kappaflow_native` (Rust, `runtime/native/`), a task's drain loop and its
cached aggregations compiled.

The core is optional. `make setup` builds it with maturin when Rust is on the machine; without it kappaflow
runs their Python twins (`kappaflow.tasks.drain.drain_python`, `KStreamAggregateProcessor.fuse`), with the
same results, slower. `kappaflow.native.enabled=false` keeps a process on the Python code with the core
installed: the tests run the in-process tiers with both that way.
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from kappaflow.api.processor import ProcessorContext
from kappaflow.api.record import Headers
from kappaflow.state.api import RecordContext
from kappaflow.state.kv_layers import CachedStoreBinding
from kappaflow.state.timestamped import ValueAndTimestamp
from kappaflow.tasks.drain import Drained, DrainPlan, RawTuple

log = logging.getLogger(__name__)

PROTOCOL = 4
"""The version of the calls below; a core built from other sources says another and is not used."""


@dataclass(frozen=True, slots=True)
class AggregatePlan:
    """What the native core compiles a `KStreamAggregateProcessor` stage from (read once, when fused;
    the processor's `fuse_native` builds it)."""

    node: str  # named as the failed node when the update raises
    context: ProcessorContext  # whose record context a write carries
    skip_null: Callable[[], None]  # a record with a null key or value: logged and counted as dropped
    counting: bool  # count(): 1, then aggregate + 1, without calling the initializer and adder
    initializer: Callable[[], Any] | None
    aggregator: Callable[[Any, Any, Any], Any] | None
    reducer: Callable[[Any, Any], Any] | None  # reduce(): the first value is the aggregate
    store: CachedStoreBinding
    value_and_timestamp: type[ValueAndTimestamp[Any]] = ValueAndTimestamp
    record_context: type[RecordContext] = RecordContext


@dataclass(frozen=True, slots=True)
class StatelessPlan:
    """What the native core compiles a built-in stateless processor's stage from (its `fuse_native`)."""

    # filter, map, map_values, flat_map, flat_map_values, select_key, peek, null_key_filter
    kind: str
    callback: Callable[..., Any]  # the predicate, mapper, selector or action; the null-key filter's drop
    flag: bool  # filter: negate; map_values, flat_map_values: with the key; peek: forwards
    node: str  # named as the failed node when the callback raises
    context: ProcessorContext
    downstream: Callable[[Any, Any, int, Headers], None]  # the next stage (a native one called directly)
    pair: Callable[[Any, str], tuple[Any, Any]]  # map, flat_map: a result that is not a pair raises here


@dataclass(frozen=True, slots=True)
class SinkPlan:
    """What the native core compiles a sink to a fixed topic without a partitioner from."""

    topic: str
    node: str
    send: Callable[[str, bytes | None, bytes | None, Headers, int, int | None], None]  # the collector's
    key_utf8: bool  # String serde: `str.encode()` inline
    value_utf8: bool
    key_serializer: Callable[[str, Any], bytes | None]
    value_serializer: Callable[[str, Any], bytes | None]
    context: ProcessorContext
    serialization_error: type[BaseException]  # re-raised naming the sink
    streams_error: type[BaseException]  # a negative timestamp


class NativeStage(Protocol):
    """A stage compiled by the native core (a `kappaflow.tasks.fusion.Stage`)."""

    def __call__(self, key: Any, value: Any, timestamp: int, headers: Headers, /) -> None: ...


class StatelessStage(NativeStage, Protocol):
    def __init__(self, plan: StatelessPlan, /) -> None: ...


class SinkStage(NativeStage, Protocol):
    def __init__(self, plan: SinkPlan, /) -> None: ...


class AggregateStage(Protocol):
    """A compiled `KStreamAggregateProcessor` stage (a `kappaflow.tasks.fusion.Stage`)."""

    def __init__(self, plan: AggregatePlan, /) -> None: ...

    def __call__(self, key: Any, value: Any, timestamp: int, headers: Headers, /) -> None: ...


class NativeCore(Protocol):
    PROTOCOL: int
    AggregateStage: type[AggregateStage]
    StatelessStage: type[StatelessStage]
    SinkStage: type[SinkStage]

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
