"""The Processor API: the protocols user processors implement and the context they are given.

These are protocols, not base classes, so any object with the right methods is a processor; the task
layer supplies the concrete context. Nothing here knows about Kafka clients or the DSL.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from kappaflow.api.record import Headers, Record, RecordMetadata

if TYPE_CHECKING:
    from kappaflow.api.config import StreamsConfig

KIn = TypeVar("KIn")
VIn = TypeVar("VIn")


@dataclass(frozen=True, slots=True, order=True)
class TaskId:
    """A task is one partition of one sub-topology; `0_3` is sub-topology 0, partition 3."""

    subtopology: int
    partition: int

    def __str__(self) -> str:
        return f"{self.subtopology}_{self.partition}"

    @staticmethod
    def parse(text: str) -> TaskId:
        """The TaskId of its text form, `<sub-topology>_<partition>` (e.g. `0_1`)."""
        sub, _, part = text.partition("_")
        return TaskId(int(sub), int(part))


class PunctuationType(Enum):
    """Stream-time punctuation advances with record timestamps; wall-clock with the system clock."""

    STREAM_TIME = "stream_time"
    WALL_CLOCK_TIME = "wall_clock_time"


class Cancellable(Protocol):
    """The handle `ProcessorContext.schedule` returns."""

    def cancel(self) -> None:
        """Stop the punctuation."""


class ProcessorContext(Protocol):
    """What a processor may do: forward records, schedule punctuations, reach its stores and metadata."""

    @property
    def application_id(self) -> str:
        """The application's `application.id`."""

    @property
    def task_id(self) -> TaskId:
        """The task this processor instance runs in."""

    @property
    def app_config(self) -> StreamsConfig:
        """The application's configuration."""

    def forward(self, record: Record[Any, Any], child: str | None = None) -> None:
        """Send `record` to every child processor, or only to the child named `child`."""

    def schedule(
        self, interval: timedelta | int, punctuation_type: PunctuationType, callback: Callable[[int], None]
    ) -> Cancellable:
        """Call `callback(timestamp)` every `interval` of stream time (`PunctuationType.STREAM_TIME`, advanced
        by records) or wall-clock time; `cancel()` the returned handle to stop."""

    def get_state_store(self, name: str) -> Any:
        """The store `name`, connected to this processor by `Topology.add_state_store` or by naming it in
        `KStream.process`."""

    def record_metadata(self) -> RecordMetadata | None:
        """Topic, partition and offset of the record being processed; None in a punctuation."""

    def current_stream_time_ms(self) -> int:
        """The task's stream time: the largest record timestamp it has seen."""

    def current_system_time_ms(self) -> int:
        """The wall-clock time (the driver's in the TopologyTestDriver)."""

    def commit(self) -> None:
        """Ask for a commit soon after this record, before `commit.interval.ms` elapses. The scheduled
        commits keep their pace (as in Kafka Streams): the next is still due an interval after the last
        scheduled one, not after this request's."""


@runtime_checkable
class Processor(Protocol[KIn, VIn]):
    """A node of the topology: `init` once per task, `process` for each record, `close` at shutdown."""

    def init(self, context: ProcessorContext) -> None:
        """Called once before the first record: keep the context, look up stores, schedule punctuations."""

    def process(self, record: Record[KIn, VIn]) -> None:
        """Called for each record; forward results with `context.forward`."""

    def close(self) -> None:
        """Called when the task closes (rebalance, shutdown); release what `init` acquired."""


class BaseProcessor:
    """Convenience base: keeps the context and implements empty init/close."""

    context: ProcessorContext

    def init(self, context: ProcessorContext) -> None:
        """Keep the context as `self.context`."""
        self.context = context

    def process(self, record: Record[Any, Any]) -> None:
        """Override: handle one record."""
        raise NotImplementedError

    def close(self) -> None:
        """Nothing to release by default."""
        return None


ProcessorSupplier = Callable[[], Processor[Any, Any]]

VOut = TypeVar("VOut", covariant=True)
KT = TypeVar("KT", contravariant=True)
VT = TypeVar("VT", contravariant=True)


class ValueTransformerContext(ProcessorContext, Protocol):
    """The old-style context a `ValueTransformerWithKey` gets (Java's `processor.ProcessorContext`): the
    current record's `topic()`, `partition()`, `offset()`, `timestamp()` and `headers()` besides the
    usual; outside a record (a punctuation) topic is None and partition, offset and timestamp -1."""

    def topic(self) -> str | None: ...

    def partition(self) -> int: ...

    def offset(self) -> int: ...

    def timestamp(self) -> int: ...

    def headers(self) -> Headers: ...


class ValueTransformerWithKey(Protocol[KT, VT, VOut]):
    """`KTable.transform_values`: a value computed from the key and value (null included), with
    access to state stores; its context refuses `forward`, as Java's ForwardingDisabledProcessorContext."""

    def init(self, context: ValueTransformerContext) -> None: ...

    def transform(self, key: KT, value: VT | None) -> VOut | None: ...

    def close(self) -> None: ...


def to_millis(duration: timedelta | int, what: str = "duration") -> int:
    """Durations are `timedelta` or integer milliseconds everywhere in the API."""
    if isinstance(duration, timedelta):
        return int(duration.total_seconds() * 1000)
    if isinstance(duration, bool) or not isinstance(duration, int):
        raise TypeError(f"{what} must be a timedelta or integer milliseconds, got {duration!r}")
    return duration
