"""Schema Registry serdes: Avro, JSON Schema and Protobuf in the Confluent wire format.

The bytes are what Confluent's (and Kafka Streams users') serializers write: a magic byte 0, the 4-byte
big-endian schema id the registry assigned, then the encoded record (Protobuf adds its message indexes).
The work is done by confluent-kafka's own `confluent_kafka.schema_registry` serializers and client, not a
home-made one, so subject naming, schema caching, `use.latest.version` and reader/writer schema resolution
behave as every other Confluent client does. They need the optional extra: `pip install kappaflow[registry]`.

Why the serdes are built lazily: a topology is pickled to Spark executors and a serde may be declared at
module level, before any registry answers. The registry client and Confluent serializers are made on first
use and dropped when pickled, so a serde is a small value object (its configuration) that rebuilds itself
in each process. Clients are shared per registry configuration within a process, so every serde of an
application uses one HTTP client and one schema cache.

Errors: a record that cannot be written raises `SerializationError` naming the serde, topic, subject and
the registry's reason (an incompatible schema, a schema not registered while `auto_register` is off); bytes
that cannot be read raise `DeserializationError` naming the topic, the schema id in the bytes and the
cause, the error kappaflow's deserialization handler skips to the dead-letter topic with the raw bytes.
A registry that cannot be reached is not the record's fault: that raises
`SchemaRegistryUnavailableError`, which fails the stream thread instead of sending good records to the
dead-letter topic for the length of an outage (Java's Confluent deserializers report both as one
SerializationException).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kappaflow.api.errors import ConfigError
from kappaflow.api.registry_serde_base import (
    RegistryConfig,
    RegistrySerde,
    SchemaTextSerde,
    SubjectNameStrategy,
    WithoutContext,
)

if TYPE_CHECKING:
    from google.protobuf.message import Message

__all__ = ["Avro", "JsonSchema", "Protobuf", "RegistryConfig", "RegistrySerde", "SubjectNameStrategy"]


class Avro(SchemaTextSerde):
    """Avro records framed for the registry: generic (dicts) or specific (a `record_class` with
    `from_dict`/`to_dict`, a pydantic model, or explicit `to_dict`/`from_dict` functions).

    `schema` is the writer schema when serializing and the reader schema when deserializing: bytes
    written with an older compatible schema are resolved to it (new fields take their defaults), which is
    what keeps a state store and its changelog readable after a compatible change. Without `schema` the
    serde only reads, returning records in the writer's schema."""

    name = "Avro"

    def record_name(self) -> str | None:
        parsed = self.parsed_schema
        if not isinstance(parsed, dict) or "name" not in parsed:
            return None
        name = str(parsed["name"])
        namespace = parsed.get("namespace")
        return f"{namespace}.{name}" if namespace and "." not in name else name

    def _build_serializer(self, client: Any, conf: dict[str, Any]) -> Callable[[Any, Any], bytes | None]:
        from confluent_kafka.schema_registry.avro import AvroSerializer

        return AvroSerializer(  # type: ignore[no-any-return]
            client,
            self.require_schema(),
            to_dict=None if self.to_dict is None else WithoutContext(self.to_dict),
            conf=conf,
        )

    def _build_deserializer(self, client: Any, conf: dict[str, Any]) -> Callable[[bytes, Any], Any]:
        from confluent_kafka.schema_registry.avro import AvroDeserializer

        return AvroDeserializer(  # type: ignore[no-any-return]
            client,
            self.schema,
            from_dict=None if self.from_dict is None else WithoutContext(self.from_dict),
            conf=conf,
        )


class JsonSchema(SchemaTextSerde):
    """JSON documents validated against a JSON Schema on write and on read (a document that breaks it
    is a poison record), framed for the registry. Records are dicts, or specific records converted as for
    `Avro`. The RECORD strategies name the subject after the schema's `title`."""

    name = "JsonSchema"

    def record_name(self) -> str | None:
        parsed = self.parsed_schema
        return str(parsed["title"]) if isinstance(parsed, dict) and "title" in parsed else None

    def _build_serializer(self, client: Any, conf: dict[str, Any]) -> Callable[[Any, Any], bytes | None]:
        from confluent_kafka.schema_registry.json_schema import JSONSerializer

        return JSONSerializer(  # type: ignore[no-any-return]
            self.require_schema(),
            client,
            to_dict=None if self.to_dict is None else WithoutContext(self.to_dict),
            conf=conf,
        )

    def _build_deserializer(self, client: Any, conf: dict[str, Any]) -> Callable[[bytes, Any], Any]:
        from confluent_kafka.schema_registry.json_schema import JSONDeserializer

        return JSONDeserializer(  # type: ignore[no-any-return]
            self.schema,
            from_dict=None if self.from_dict is None else WithoutContext(self.from_dict),
            schema_registry_client=client,
            conf=conf,
        )


class Protobuf(RegistrySerde["Message"]):
    """Protobuf messages of one generated (or descriptor-built) message class, framed for the registry
    with Confluent's message indexes; the `.proto` schema and its imports are registered from the class's
    descriptor. The RECORD strategies use the message's full name."""

    name = "Protobuf"

    def __init__(
        self,
        registry: str | RegistryConfig,
        message_class: type[Message],
        *,
        is_key: bool = False,
        auto_register: bool = True,
        use_latest_version: bool = False,
        subject_name_strategy: SubjectNameStrategy = SubjectNameStrategy.TOPIC,
        normalize_schemas: bool = False,
    ) -> None:
        super().__init__(
            registry,
            is_key=is_key,
            auto_register=auto_register,
            use_latest_version=use_latest_version,
            subject_name_strategy=subject_name_strategy,
            normalize_schemas=normalize_schemas,
        )
        if not hasattr(message_class, "DESCRIPTOR"):
            raise ConfigError(f"Protobuf serde: {message_class!r} is not a protobuf message class")
        self.message_class = message_class

    def record_name(self) -> str | None:
        return str(self.message_class.DESCRIPTOR.full_name)

    def _confluent_conf(self, *, serializer: bool) -> dict[str, Any]:
        conf = super()._confluent_conf(serializer=serializer)
        conf["use.deprecated.format"] = False
        return conf

    def _build_serializer(self, client: Any, conf: dict[str, Any]) -> Callable[[Any, Any], bytes | None]:
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

        return ProtobufSerializer(self.message_class, client, conf=conf)  # type: ignore[no-any-return]

    def _build_deserializer(self, client: Any, conf: dict[str, Any]) -> Callable[[bytes, Any], Any]:
        from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer

        return ProtobufDeserializer(  # type: ignore[no-any-return]
            self.message_class, conf=conf, schema_registry_client=client
        )

    def _identity(self) -> tuple[object, ...]:
        return (self.record_name(),)
