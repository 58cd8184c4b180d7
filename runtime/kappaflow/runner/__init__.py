"""The Kafka runner: `KafkaStreams`, the poll -> process -> commit loop, health and metrics endpoints."""

from kappaflow.runner.gc_tuning import tune_gc_for_streaming
from kappaflow.runner.streams import KafkaStreams, State, StreamThreadExceptionResponse

__all__ = ["KafkaStreams", "State", "StreamThreadExceptionResponse", "tune_gc_for_streaming"]
