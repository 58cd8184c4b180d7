"""The Kafka runner: `KafkaStreams`, the poll -> process -> commit loop, health and metrics endpoints."""

from kappaflow.runner.close_options import CloseOptions, GroupMembershipOperation
from kappaflow.runner.gc_tuning import tune_gc_for_streaming
from kappaflow.runner.states import State, StreamThreadExceptionResponse
from kappaflow.runner.streams import KafkaStreams

__all__ = [
    "CloseOptions",
    "GroupMembershipOperation",
    "KafkaStreams",
    "State",
    "StreamThreadExceptionResponse",
    "tune_gc_for_streaming",
]
