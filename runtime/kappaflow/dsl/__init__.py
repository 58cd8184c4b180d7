"""The DSL: StreamsBuilder, KStream, KTable, GlobalKTable and grouped streams, compiled to a Topology."""

from kappaflow.dsl.branched import Branched, BranchedKStream
from kappaflow.dsl.builder import StreamsBuilder
from kappaflow.dsl.change import Change
from kappaflow.dsl.fk_extractor import ForeignKeyExtractor
from kappaflow.dsl.grouped import KGroupedStream
from kappaflow.dsl.kstream import KStream
from kappaflow.dsl.ktable import GlobalKTable, KGroupedTable, KTable
from kappaflow.dsl.options import Consumed, Grouped, Joined, Materialized, Named, Produced, Repartitioned
from kappaflow.dsl.suppress import BufferConfig, Suppressed
from kappaflow.dsl.windowed import TimeWindowedKStream
from kappaflow.dsl.windows import JoinWindows, SessionWindows, SlidingWindows, TimeWindows

__all__ = [
    "Branched",
    "BranchedKStream",
    "BufferConfig",
    "Change",
    "Consumed",
    "ForeignKeyExtractor",
    "GlobalKTable",
    "Grouped",
    "JoinWindows",
    "Joined",
    "KGroupedStream",
    "KGroupedTable",
    "KStream",
    "KTable",
    "Materialized",
    "Named",
    "Produced",
    "Repartitioned",
    "SessionWindows",
    "SlidingWindows",
    "StreamsBuilder",
    "Suppressed",
    "TimeWindowedKStream",
    "TimeWindows",
]
