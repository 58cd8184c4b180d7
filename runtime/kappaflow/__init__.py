"""kappaflow: Kafka Streams for Python.

The public facade. Users write `from kappaflow import StreamsBuilder, Materialized, serdes` and compile
their topology with `builder.build()`; the same Topology runs in the TopologyTestDriver, on Kafka and on
Spark.
"""

from kappaflow import serdes
from kappaflow.api.async_calls import Ordering
from kappaflow.api.config import StreamsConfig
from kappaflow.api.errors import (
    ConfigError,
    DeserializationError,
    HandlerResponse,
    InvalidStateStoreError,
    ProcessingError,
    SchemaRegistryUnavailableError,
    SerializationError,
    StreamsError,
    TopologyError,
)
from kappaflow.api.offset_reset import AutoOffsetReset
from kappaflow.api.processor import (
    BaseProcessor,
    Cancellable,
    Processor,
    ProcessorContext,
    PunctuationType,
    TaskId,
)
from kappaflow.api.record import Headers, Record, RecordMetadata
from kappaflow.api.time import (
    ConsumedRecord,
    FailOnInvalidTimestamp,
    WallclockTimestampExtractor,
    log_and_skip_on_invalid_timestamp,
    use_partition_time_on_invalid_timestamp,
)
from kappaflow.api.windowed_serdes import SessionWindowedSerde, TimeWindowedSerde
from kappaflow.api.windows import Window, Windowed
from kappaflow.api.wrapper import ProcessorWrapper
from kappaflow.dsl import (
    Branched,
    BranchedKStream,
    BufferConfig,
    Change,
    Consumed,
    ForeignKeyExtractor,
    GlobalKTable,
    Grouped,
    Joined,
    JoinWindows,
    KGroupedStream,
    KGroupedTable,
    KStream,
    KTable,
    Materialized,
    Named,
    Produced,
    Repartitioned,
    SessionWindows,
    SlidingWindows,
    StreamsBuilder,
    Suppressed,
    TimeWindows,
)
from kappaflow.dsl.emit import EmitStrategy
from kappaflow.state import KeyValueStore, Stores, ValueAndTimestamp
from kappaflow.topology import Topology

__version__ = "0.1.0"

__all__ = [
    "AutoOffsetReset",
    "BaseProcessor",
    "Branched",
    "BranchedKStream",
    "BufferConfig",
    "Cancellable",
    "Change",
    "ConfigError",
    "Consumed",
    "ConsumedRecord",
    "DeserializationError",
    "EmitStrategy",
    "FailOnInvalidTimestamp",
    "ForeignKeyExtractor",
    "GlobalKTable",
    "Grouped",
    "HandlerResponse",
    "Headers",
    "InvalidStateStoreError",
    "JoinWindows",
    "Joined",
    "KGroupedStream",
    "KGroupedTable",
    "KStream",
    "KTable",
    "KeyValueStore",
    "Materialized",
    "Named",
    "Ordering",
    "ProcessingError",
    "Processor",
    "ProcessorContext",
    "ProcessorWrapper",
    "Produced",
    "PunctuationType",
    "Record",
    "RecordMetadata",
    "Repartitioned",
    "SchemaRegistryUnavailableError",
    "SerializationError",
    "SessionWindowedSerde",
    "SessionWindows",
    "SlidingWindows",
    "Stores",
    "StreamsBuilder",
    "StreamsConfig",
    "StreamsError",
    "Suppressed",
    "TaskId",
    "TimeWindowedSerde",
    "TimeWindows",
    "Topology",
    "TopologyError",
    "ValueAndTimestamp",
    "WallclockTimestampExtractor",
    "Window",
    "Windowed",
    "log_and_skip_on_invalid_timestamp",
    "serdes",
    "use_partition_time_on_invalid_timestamp",
]
