"""The Kafka runner: `KafkaStreams`, the poll -> process -> commit loop, health and metrics endpoints."""

from kappaflow.runner.streams import KafkaStreams, State, StreamThreadExceptionResponse

__all__ = ["KafkaStreams", "State", "StreamThreadExceptionResponse"]
