"""kappaflow.serdes.Avro / JsonSchema / Protobuf against the real registry (Apicurio's Confluent API).

Each test uses its own topic names, so subjects never collide within the shared session registry.
"""

from __future__ import annotations

import pickle
import uuid

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from pydantic import BaseModel

from kappaflow import serdes
from kappaflow.api.errors import ConfigError, DeserializationError, SerializationError
from kappaflow.serdes import SubjectNameStrategy
from tests.registry.schemas import (
    ORDER_JSON_SCHEMA,
    PAGE_VIEW_INCOMPATIBLE,
    PAGE_VIEW_V1,
    PAGE_VIEW_V2,
    CustomerTotal,
    OrderPlaced,
    PageView,
)

pytestmark = [pytest.mark.registry, pytest.mark.timeout(120)]

VIEW = {"user": "ann", "page": "home", "millis": 7}


def topic() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def framed_id(data: bytes) -> int:
    assert data[0] == 0, "Confluent framing starts with magic byte 0"
    return int.from_bytes(data[1:5], "big")


def latest_id(url: str, subject: str) -> int:
    return int(SchemaRegistryClient({"url": url}).get_latest_version(subject).schema_id)


def test_avro_generic_and_specific_records_round_trip_under_topic_subjects(schema_registry_url):
    url, name = schema_registry_url, topic()
    generic = serdes.Avro(url, PAGE_VIEW_V1)
    data = generic.serialize(name, VIEW)
    assert data is not None and framed_id(data) == latest_id(url, f"{name}-value")
    # Avro binary after the 5-byte header: zigzag lengths then UTF-8, zigzag long 7 -> 0x0e
    assert data[5:] == b"\x06ann\x08home\x0e"
    assert generic.deserialize(name, data) == VIEW
    specific = serdes.Avro(url, PAGE_VIEW_V1, record_class=PageView)
    assert specific.deserialize(name, data) == PageView("ann", "home", 7)
    assert specific.serialize(name, PageView("ann", "home", 7)) == data
    key = serdes.Avro(url, '"string"', is_key=True)
    key_bytes = key.serialize(name, "ann")
    assert key_bytes is not None and framed_id(key_bytes) == latest_id(url, f"{name}-key")
    assert key.deserialize(name, key_bytes) == "ann"
    assert generic.serialize(name, None) is None and generic.deserialize(name, None) is None


def test_json_schema_validates_on_write_and_read(schema_registry_url):
    url, name = schema_registry_url, topic()
    serde = serdes.JsonSchema(url, ORDER_JSON_SCHEMA)
    data = serde.serialize(name, {"id": "o1", "amount": 2.5})
    assert data is not None and framed_id(data) == latest_id(url, f"{name}-value")
    assert serde.deserialize(name, data) == {"id": "o1", "amount": 2.5}
    with pytest.raises(SerializationError, match=rf"subject '{name}-value'.*less than the minimum"):
        serde.serialize(name, {"id": "o2", "amount": -1})
    # a framed document that breaks the schema is a poison record on read
    invalid = data[:5] + b'{"id": "o3", "amount": -4}'
    with pytest.raises(DeserializationError, match="less than the minimum"):
        serde.deserialize(name, invalid)


class Order(BaseModel):
    id: str
    amount: float


def test_specific_records_as_pydantic_models_and_plain_functions(schema_registry_url):
    url, name = schema_registry_url, topic()
    models = serdes.JsonSchema(url, ORDER_JSON_SCHEMA, record_class=Order)
    data = models.serialize(name, Order(id="o1", amount=2.5))
    assert data is not None and data[5:] == b'{"id":"o1","amount":2.5}'
    assert models.deserialize(name, data) == Order(id="o1", amount=2.5)
    tuples = serdes.Avro(
        url,
        PAGE_VIEW_V1,
        to_dict=lambda view: dict(zip(("user", "page", "millis"), view, strict=True)),
        from_dict=lambda record: (record["user"], record["page"], record["millis"]),
    )
    avro_topic = topic()
    encoded = tuples.serialize(avro_topic, ("ann", "home", 7))
    assert encoded is not None and tuples.deserialize(avro_topic, encoded) == ("ann", "home", 7)


def test_protobuf_messages_round_trip_with_message_indexes(schema_registry_url):
    url, name = schema_registry_url, topic()
    first = serdes.Protobuf(url, OrderPlaced)
    data = first.serialize(name, OrderPlaced(order_id="o1", customer="c1", cents=250))
    assert data is not None and framed_id(data) == latest_id(url, f"{name}-value")
    assert data[5:6] == b"\x00"  # the first message of the file: Confluent's one-byte index shorthand
    assert first.deserialize(name, data) == OrderPlaced(order_id="o1", customer="c1", cents=250)
    second = serdes.Protobuf(url, CustomerTotal)
    other = second.serialize(f"{name}-totals", CustomerTotal(customer="c1", cents=3, orders=1))
    assert other is not None and other[5:7] == b"\x02\x02"  # one index, [1], zigzag-encoded
    assert second.deserialize(f"{name}-totals", other).orders == 1


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        (SubjectNameStrategy.TOPIC, "{topic}-value"),
        (SubjectNameStrategy.RECORD, "dev.kappaflow.test.PageView"),
        (SubjectNameStrategy.TOPIC_RECORD, "{topic}-dev.kappaflow.test.PageView"),
    ],
)
def test_subject_name_strategies_register_under_the_named_subject(schema_registry_url, strategy, expected):
    url, name = schema_registry_url, topic()
    serde = serdes.Avro(url, PAGE_VIEW_V1, subject_name_strategy=strategy)
    subject = expected.format(topic=name)
    assert serde.subject(name) == subject
    data = serde.serialize(name, VIEW)
    assert data is not None and framed_id(data) == latest_id(url, subject)
    assert serdes.Protobuf(url, OrderPlaced, subject_name_strategy=strategy).subject(name) == expected.format(
        topic=name
    ).replace("PageView", "OrderPlaced")


def test_auto_register_off_needs_a_registered_schema(schema_registry_url):
    url, name = schema_registry_url, topic()
    strict = serdes.Avro(url, PAGE_VIEW_V1, auto_register=False)
    with pytest.raises(
        SerializationError, match=rf"subject '{name}-value'.*not registered.*auto_register is off"
    ):
        strict.serialize(name, VIEW)
    registered = serdes.Avro(url, PAGE_VIEW_V1).serialize(name, VIEW)
    assert serdes.Avro(url, PAGE_VIEW_V1, auto_register=False).serialize(name, VIEW) == registered


def test_use_latest_version_writes_with_the_subjects_newest_schema(schema_registry_url):
    url, name = schema_registry_url, topic()
    serdes.Avro(url, PAGE_VIEW_V1).serialize(name, VIEW)
    v2_bytes = serdes.Avro(url, PAGE_VIEW_V2).serialize(name, {**VIEW, "referrer": "ad"})
    assert v2_bytes is not None
    latest = serdes.Avro(url, PAGE_VIEW_V1, auto_register=False, use_latest_version=True)
    data = latest.serialize(name, VIEW)
    assert data is not None and framed_id(data) == framed_id(v2_bytes)
    assert serdes.Avro(url).deserialize(name, data) == {**VIEW, "referrer": "direct"}
    with pytest.raises(SerializationError, match="use_latest_version is on but the subject has no version"):
        serdes.Avro(url, PAGE_VIEW_V1, auto_register=False, use_latest_version=True).serialize(topic(), VIEW)


def test_an_incompatible_schema_change_is_refused_naming_the_subject(schema_registry_url):
    url, name = schema_registry_url, topic()
    serdes.Avro(url, PAGE_VIEW_V1).serialize(name, VIEW)
    with pytest.raises(SerializationError) as failure:
        serdes.Avro(url, PAGE_VIEW_INCOMPATIBLE).serialize(name, {"user": "ann", "country": "fr"})
    message = str(failure.value)
    assert f"subject '{name}-value'" in message and "incompatible" in message and "country" in message


def test_compatible_evolution_reads_old_bytes_with_the_new_reader(schema_registry_url):
    url, name = schema_registry_url, topic()
    old = serdes.Avro(url, PAGE_VIEW_V1).serialize(name, VIEW)
    assert serdes.Avro(url, PAGE_VIEW_V2).deserialize(name, old) == {**VIEW, "referrer": "direct"}
    new = serdes.Avro(url, PAGE_VIEW_V2).serialize(name, {**VIEW, "referrer": "ad"})
    assert serdes.Avro(url, PAGE_VIEW_V1).deserialize(name, new) == VIEW  # forward too: v1 skips the field


def test_undecodable_bytes_raise_the_error_the_dead_letter_handler_takes(schema_registry_url):
    url, name = schema_registry_url, topic()
    serde = serdes.Avro(url, PAGE_VIEW_V1)
    with pytest.raises(DeserializationError, match=rf"topic '{name}' \(no Confluent framing"):
        serde.deserialize(name, b"plain text")
    with pytest.raises(DeserializationError, match="schema id 2147483632"):
        serde.deserialize(name, b"\x00\x7f\xff\xff\xf0\x02a")
    good = serde.serialize(name, VIEW)
    assert good is not None
    with pytest.raises(DeserializationError, match=f"schema id {framed_id(good)}"):
        serde.deserialize(name, good[:7])  # truncated record


def test_serdes_pickle_without_their_clients_and_rebuild_on_use(schema_registry_url):
    """What Spark does with a topology: pickle it after it was used, unpickle in another process."""
    url, name = schema_registry_url, topic()
    avro = serdes.Avro(url, PAGE_VIEW_V1, record_class=PageView)
    proto = serdes.Protobuf(url, OrderPlaced)
    avro_bytes = avro.serialize(name, PageView("ann", "home", 7))
    proto_bytes = proto.serialize(name + "-p", OrderPlaced(order_id="o1"))
    for serde, data in [(avro, avro_bytes), (proto, proto_bytes)]:
        pickled = pickle.dumps(serde)
        assert b"SchemaRegistryClient" not in pickled and b"AvroSerializer" not in pickled
        copy = pickle.loads(pickled)
        assert copy == serde and hash(copy) == hash(serde)
        target = name if serde is avro else name + "-p"
        assert copy.deserialize(target, data) == serde.deserialize(target, data)
    assert serdes.Avro(url, PAGE_VIEW_V1) != serdes.Avro(url, PAGE_VIEW_V2)
    assert serdes.Avro(url, PAGE_VIEW_V1) != serdes.Avro(url, PAGE_VIEW_V1, is_key=True)


def test_bad_configuration_names_the_setting():
    with pytest.raises(ConfigError, match="needs a 'url'"):
        serdes.Avro({"basic.auth.user.info": "a:b"}, PAGE_VIEW_V1)
    with pytest.raises(ConfigError, match="'schema' is not valid JSON"):
        serdes.Avro("http://127.0.0.1:1", "{not json")
    with pytest.raises(ConfigError, match="record_class dict has neither"):
        serdes.Avro("http://127.0.0.1:1", PAGE_VIEW_V1, record_class=dict)
    with pytest.raises(ConfigError, match="not a protobuf message class"):
        serdes.Protobuf("http://127.0.0.1:1", dict)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="subject_name_strategy must be a SubjectNameStrategy"):
        serdes.JsonSchema("http://127.0.0.1:1", ORDER_JSON_SCHEMA, subject_name_strategy="topic")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="writing needs a schema"):
        serdes.Avro("http://127.0.0.1:1").serialize("t", VIEW)
