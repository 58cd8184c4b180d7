"""Serdes, byte-compatible with Kafka's Java serdes: `from kappaflow import serdes; serdes.Long()`."""

from kappaflow.api.serdes import Bytes, Double, Float, Integer, Json, Long, Pydantic, Serde, String

__all__ = ["Bytes", "Double", "Float", "Integer", "Json", "Long", "Pydantic", "Serde", "String"]
