"""Serdes, byte-compatible with Kafka's Java serdes: `from kappaflow import serdes; serdes.Long()`.

`Avro`, `JsonSchema` and `Protobuf` frame records for a Confluent-compatible Schema Registry (they need
`pip install kappaflow[registry]`); `SubjectNameStrategy` picks the subject they register under.
"""

from kappaflow.api.registry_serdes import Avro, JsonSchema, Protobuf, RegistrySerde, SubjectNameStrategy
from kappaflow.api.serdes import Bytes, Double, Float, Integer, Json, Long, Pydantic, Serde, String

__all__ = [
    "Avro",
    "Bytes",
    "Double",
    "Float",
    "Integer",
    "Json",
    "JsonSchema",
    "Long",
    "Protobuf",
    "Pydantic",
    "RegistrySerde",
    "Serde",
    "String",
    "SubjectNameStrategy",
]
