"""What the Schema Registry serdes share: configuration, subject naming, the lazily built Confluent
serializers, the process-wide registry clients, and the translation of their errors into kappaflow's.

The formats themselves (Avro, JsonSchema, Protobuf) are in kappaflow/api/registry_serdes.py, which says
why the serdes are built lazily and how their errors are classified.
"""

from __future__ import annotations

import importlib
import json
import threading
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, TypeVar

from kappaflow.api.errors import (
    ConfigError,
    DeserializationError,
    SchemaRegistryUnavailableError,
    SerializationError,
)
from kappaflow.api.serdes import Serde

T = TypeVar("T")

RegistryConfig = Mapping[str, str | int | float | bool]
"""`SchemaRegistryClient` settings: `url` and optionally `basic.auth.user.info`, `max.retries`, ..."""

_MAGIC_BYTE = 0
_TRANSIENT = frozenset({"_serializer", "_deserializer", "_contexts"})
_INSTALL_HINT = "install the optional dependencies with `pip install kappaflow[registry]`"


class SubjectNameStrategy(Enum):
    """Which registry subject a schema is registered and looked up under, as Confluent names them.

    TOPIC: `<topic>-key` / `<topic>-value` (the default). RECORD: the record's full name, so one
    schema serves many topics. TOPIC_RECORD: `<topic>-<record full name>`, for topics with several
    record types."""

    TOPIC = "topic"
    RECORD = "record"
    TOPIC_RECORD = "topic_record"


def _strategy_function(strategy: SubjectNameStrategy) -> Callable[..., str | None]:
    from confluent_kafka import schema_registry as sr

    functions: dict[SubjectNameStrategy, Callable[..., str | None]] = {
        SubjectNameStrategy.TOPIC: sr.topic_subject_name_strategy,
        SubjectNameStrategy.RECORD: sr.record_subject_name_strategy,
        SubjectNameStrategy.TOPIC_RECORD: sr.topic_record_subject_name_strategy,
    }
    return functions[strategy]


_clients: dict[tuple[tuple[str, str | int | float | bool], ...], Any] = {}
_clients_lock = threading.Lock()


def _registry_client(conf: RegistryConfig) -> Any:
    """The process's `SchemaRegistryClient` for `conf`, made once and shared (one cache, one pool)."""
    key = tuple(sorted(conf.items()))
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            try:
                from confluent_kafka.schema_registry import SchemaRegistryClient
            except ImportError as exc:  # pragma: no cover - depends on the install
                raise ConfigError(
                    f"Schema Registry serdes need extra packages: {_INSTALL_HINT} ({exc})"
                ) from exc
            client = _clients[key] = SchemaRegistryClient(dict(conf))
        return client


class WithoutContext:
    """Adapts a one-argument conversion to Confluent's `(value, SerializationContext)` callbacks.

    A class rather than a closure so the serde stays picklable with plain `pickle` too."""

    def __init__(self, function: Callable[[Any], Any]) -> None:
        self.function = function

    def __call__(self, value: Any, ctx: object) -> Any:
        return self.function(value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WithoutContext) and self.function == other.function

    def __hash__(self) -> int:
        return hash(self.function)


class _CallMethod:
    """`value.<method>()`, comparable (unlike `operator.methodcaller`) so equal serdes compare equal."""

    def __init__(self, method: str) -> None:
        self.method = method

    def __call__(self, value: Any) -> Any:
        return getattr(value, self.method)()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _CallMethod) and self.method == other.method

    def __hash__(self) -> int:
        return hash((_CallMethod, self.method))


def record_conversions(
    record_class: type | None,
    to_dict: Callable[[Any], dict[str, Any]] | None,
    from_dict: Callable[[dict[str, Any]], Any] | None,
) -> tuple[Callable[[Any], dict[str, Any]] | None, Callable[[dict[str, Any]], Any] | None]:
    """The to/from-dict conversions of a specific record: explicit functions win, then a class with
    `from_dict`/`to_dict` (as Avro code generators write), then a pydantic model; none means generic
    records (plain dicts)."""
    if record_class is None:
        return to_dict, from_dict
    if hasattr(record_class, "from_dict") and hasattr(record_class, "to_dict"):
        return to_dict or _CallMethod("to_dict"), from_dict or record_class.from_dict
    if hasattr(record_class, "model_validate") and hasattr(record_class, "model_dump"):
        return to_dict or _CallMethod("model_dump"), from_dict or record_class.model_validate
    raise ConfigError(
        f"record_class {record_class.__name__} has neither from_dict/to_dict nor pydantic's "
        "model_validate/model_dump; pass to_dict= and from_dict= instead"
    )


def schema_id_of(data: bytes) -> int | None:
    """The schema id framed in Confluent wire-format bytes, or None when the bytes are not framed."""
    if len(data) < 5 or data[0] != _MAGIC_BYTE:
        return None
    return int.from_bytes(data[1:5], "big")


class RegistrySerde(Serde[T]):
    """What the three formats share: registry configuration, subject naming, lazy Confluent serdes and
    the translation of their errors into kappaflow's."""

    name = "Registry"

    def __init__(
        self,
        registry: str | RegistryConfig,
        *,
        is_key: bool = False,
        auto_register: bool = True,
        use_latest_version: bool = False,
        subject_name_strategy: SubjectNameStrategy = SubjectNameStrategy.TOPIC,
        normalize_schemas: bool = False,
    ) -> None:
        conf: dict[str, str | int | float | bool] = (
            {"url": registry} if isinstance(registry, str) else dict(registry)
        )
        if not conf.get("url"):
            raise ConfigError(f"{self.name} serde: the registry configuration needs a 'url'")
        if not isinstance(subject_name_strategy, SubjectNameStrategy):
            raise ConfigError(
                f"{self.name} serde: subject_name_strategy must be a SubjectNameStrategy, "
                f"got {subject_name_strategy!r}"
            )
        self.registry_conf = conf
        self.is_key = is_key
        self.auto_register = auto_register
        self.use_latest_version = use_latest_version
        self.subject_name_strategy = subject_name_strategy
        self.normalize_schemas = normalize_schemas
        self._serializer: Callable[[Any, Any], bytes | None] | None = None
        self._deserializer: Callable[[bytes, Any], Any] | None = None
        self._contexts: dict[str, Any] = {}

    # -- what each format supplies ------------------------------------------------------------------

    def record_name(self) -> str | None:
        """The fully qualified record name the RECORD strategies use (None when the schema has none)."""
        raise NotImplementedError

    def _build_serializer(self, client: Any, conf: dict[str, Any]) -> Callable[[Any, Any], bytes | None]:
        raise NotImplementedError

    def _build_deserializer(self, client: Any, conf: dict[str, Any]) -> Callable[[bytes, Any], Any]:
        raise NotImplementedError

    def _identity(self) -> tuple[object, ...]:
        """The format's own settings, for equality and hashing on top of the shared ones."""
        raise NotImplementedError

    # -- the Serde protocol --------------------------------------------------------------------------

    def subject(self, topic: str) -> str | None:
        """The subject this serde registers or looks up for `topic`, by its naming strategy."""
        return _strategy_function(self.subject_name_strategy)(self._context(topic), self.record_name())

    def serialize(self, topic: str, data: T | None) -> bytes | None:
        if data is None:
            return None
        serializer = self._serializer or self._make_serializer()
        try:
            return serializer(data, self._context(topic))
        except Exception as exc:
            if _registry_unavailable(exc):
                raise SchemaRegistryUnavailableError(self._unavailable(topic, "write to", exc)) from exc
            raise SerializationError(self._serialize_failure(topic, data, exc)) from exc

    def deserialize(self, topic: str, data: bytes | None) -> T | None:
        if data is None:
            return None
        deserializer = self._deserializer or self._make_deserializer()
        try:
            result: T = deserializer(data, self._context(topic))
        except Exception as exc:
            if _registry_unavailable(exc):
                raise SchemaRegistryUnavailableError(self._unavailable(topic, "read from", exc)) from exc
            schema_id = schema_id_of(data)
            framing = "no Confluent framing (magic byte 0)" if schema_id is None else f"schema id {schema_id}"
            raise DeserializationError(
                f"{self!r} cannot decode {len(data)} bytes from topic '{topic}' ({framing}): {_reason(exc)}",
                topic=topic,
            ) from exc
        return result

    def to_bytes(self, data: T) -> bytes:
        raise SerializationError(f"{self!r} needs the topic: call serialize(topic, data)")

    def from_bytes(self, data: bytes) -> T:
        raise DeserializationError(f"{self!r} needs the topic: call deserialize(topic, data)")

    # -- helpers -------------------------------------------------------------------------------------

    def _context(self, topic: str) -> Any:
        """Confluent's per-call context (topic, key or value), made once per topic: this is per record."""
        context = self._contexts.get(topic)
        if context is None:
            from confluent_kafka.serialization import MessageField, SerializationContext

            field = MessageField.KEY if self.is_key else MessageField.VALUE
            context = self._contexts[topic] = SerializationContext(topic, field)
        return context

    def _confluent_conf(self, *, serializer: bool) -> dict[str, Any]:
        conf: dict[str, Any] = {
            "use.latest.version": self.use_latest_version,
            "subject.name.strategy": _strategy_function(self.subject_name_strategy),
        }
        if serializer:
            conf["auto.register.schemas"] = self.auto_register
            conf["normalize.schemas"] = self.normalize_schemas
        return conf

    def _make_serializer(self) -> Callable[[Any, Any], bytes | None]:
        try:
            self._serializer = self._build_serializer(
                _registry_client(self.registry_conf), self._confluent_conf(serializer=True)
            )
        except ImportError as exc:
            raise ConfigError(f"{self!r} needs extra packages: {_INSTALL_HINT} ({exc})") from exc
        return self._serializer

    def _make_deserializer(self) -> Callable[[bytes, Any], Any]:
        try:
            self._deserializer = self._build_deserializer(
                _registry_client(self.registry_conf), self._confluent_conf(serializer=False)
            )
        except ImportError as exc:
            raise ConfigError(f"{self!r} needs extra packages: {_INSTALL_HINT} ({exc})") from exc
        return self._deserializer

    def _unavailable(self, topic: str, action: str, exc: Exception) -> str:
        return (
            f"{self!r} cannot {action} topic '{topic}': the schema registry could not be reached or failed, "
            f"so the record is not skipped as a bad one: {_reason(exc)}"
        )

    def _serialize_failure(self, topic: str, data: object, exc: Exception) -> str:
        """A message naming the subject and what the registry (or the encoder) objected to."""
        from confluent_kafka.schema_registry import SchemaRegistryError

        try:
            subject = self.subject(topic)
        except Exception:  # the strategy itself failed: the reason below says why
            subject = None
        where = f"{self!r} for topic '{topic}', subject '{subject}'"
        if isinstance(exc, SchemaRegistryError):
            status = exc.http_status_code
            if status == 409:
                return (
                    f"{where}: the registry rejected the schema as incompatible with the subject's "
                    f"registered versions: {exc.error_message}"
                )
            if status == 404 and not self.auto_register and not self.use_latest_version:
                return (
                    f"{where}: the schema is not registered under the subject and auto_register is off "
                    f"(register it first, or use use_latest_version=True): {exc.error_message}"
                )
            if status == 404 and self.use_latest_version:
                return (
                    f"{where}: use_latest_version is on but the subject has no version: {exc.error_message}"
                )
            if status == 422:
                return f"{where}: the registry refused the schema as invalid: {exc.error_message}"
            return f"{where}: the registry answered HTTP {status}: {exc.error_message}"
        return f"{where} cannot serialize {type(data).__name__} {data!r:.80}: {_reason(exc)}"

    def __getstate__(self) -> dict[str, Any]:
        # the clients and Confluent serializers are rebuilt on first use in the unpickling process
        return {k: v for k, v in self.__dict__.items() if k not in _TRANSIENT}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # the transient fields are set here, not taken from the state, so a serde pickled by another
        # kappaflow version (a Spark driver and its executors) still unpickles into a working one
        self.__dict__.update(state)
        self._serializer = None
        self._deserializer = None
        self._contexts = {}

    def _shared_identity(self) -> tuple[object, ...]:
        return (
            type(self),
            tuple(sorted(self.registry_conf.items())),
            self.is_key,
            self.auto_register,
            self.use_latest_version,
            self.subject_name_strategy,
            self.normalize_schemas,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RegistrySerde):
            return False
        return self._shared_identity() == other._shared_identity() and self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash((self._shared_identity(), self._identity()))

    def __repr__(self) -> str:
        record = self.record_name()
        side = "key" if self.is_key else "value"
        return f"{self.name}({record or 'schemaless'}, {side}, {self.registry_conf['url']})"


def _transport_errors() -> tuple[type[BaseException], ...]:
    """Connection-level failures of the HTTP client confluent-kafka uses (httpx2, or httpx before)."""
    errors: list[type[BaseException]] = [OSError]
    for module in ("httpx2", "httpx"):
        try:
            errors.append(importlib.import_module(module).TransportError)
        except (ImportError, AttributeError):
            continue
    return tuple(errors)


def _registry_unavailable(exc: BaseException) -> bool:
    """True when the registry, not the record, is at fault: it could not be reached, failed (5xx), or
    refused our credentials. A 404 for the record's schema id is the record's fault (a poison record)."""
    from confluent_kafka.schema_registry import SchemaRegistryError

    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, SchemaRegistryError):
            status = cause.http_status_code
            return status >= 500 or status in (401, 403, 408, 429)
        if isinstance(cause, _transport_errors()):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _reason(exc: BaseException) -> str:
    """The innermost useful text of an error (Confluent wraps encoder errors in its own)."""
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if type(exc).__name__ not in text else text


class SchemaTextSerde(RegistrySerde[Any]):
    """A format whose schema is JSON text (Avro, JSON Schema), with generic or specific records.

    `schema` is the writer schema when serializing and the reader schema when deserializing. Records
    are dicts (generic), or specific ones converted by a `record_class` with `from_dict`/`to_dict` (as
    Avro code generators write them), a pydantic model, or explicit `to_dict`/`from_dict` functions."""

    def __init__(
        self,
        registry: str | RegistryConfig,
        schema: str | None = None,
        *,
        record_class: type | None = None,
        to_dict: Callable[[Any], dict[str, Any]] | None = None,
        from_dict: Callable[[dict[str, Any]], Any] | None = None,
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
        self.schema = schema
        self.parsed_schema = _parse_json(schema, self.name, "schema") if schema is not None else None
        self.to_dict, self.from_dict = record_conversions(record_class, to_dict, from_dict)

    def require_schema(self) -> str | None:
        """The writer schema; writing without one only works by asking the registry for the latest."""
        if self.schema is None and not self.use_latest_version:
            raise ConfigError(f"{self!r}: writing needs a schema (or use_latest_version=True)")
        return self.schema

    def _identity(self) -> tuple[object, ...]:
        return (self.schema, self.to_dict, self.from_dict)


def _parse_json(text: str, serde: str, field: str) -> object:
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{serde} serde: '{field}' is not valid JSON: {exc}") from exc
