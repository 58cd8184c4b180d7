"""The schemas the registry tests share: Avro (two compatible versions), JSON Schema, and Protobuf.

The Protobuf classes are built the way protoc's Python output builds them (a serialized
FileDescriptorProto added to the default pool, then `_builder` makes the module's message classes), from
a descriptor written here in code, so no protoc binary is needed and the classes pickle by reference like
generated ones. The same descriptor bytes are handed to the Java check, which parses records with
protobuf-java's DynamicMessage.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.internal import builder as _builder

PAGE_VIEW_V1 = json.dumps(
    {
        "type": "record",
        "name": "PageView",
        "namespace": "dev.kappaflow.test",
        "fields": [
            {"name": "user", "type": "string"},
            {"name": "page", "type": "string"},
            {"name": "millis", "type": "long"},
        ],
    }
)

# v2 adds a field with a default: BACKWARD compatible, so v2 readers resolve v1 bytes.
PAGE_VIEW_V2 = json.dumps(
    {
        "type": "record",
        "name": "PageView",
        "namespace": "dev.kappaflow.test",
        "fields": [
            {"name": "user", "type": "string"},
            {"name": "page", "type": "string"},
            {"name": "millis", "type": "long"},
            {"name": "referrer", "type": "string", "default": "direct"},
        ],
    }
)

# Drops `page` and adds a field without a default: a v1 reader... fine, but v_bad readers cannot read v1
# records (no default for `country`), so the registry refuses it under BACKWARD.
PAGE_VIEW_INCOMPATIBLE = json.dumps(
    {
        "type": "record",
        "name": "PageView",
        "namespace": "dev.kappaflow.test",
        "fields": [
            {"name": "user", "type": "string"},
            {"name": "country", "type": "string"},
        ],
    }
)

PAGE_COUNT = json.dumps(
    {
        "type": "record",
        "name": "PageCount",
        "namespace": "dev.kappaflow.test",
        "fields": [{"name": "page", "type": "string"}, {"name": "views", "type": "long"}],
    }
)

PAGE_COUNT_V2 = json.dumps(
    {
        "type": "record",
        "name": "PageCount",
        "namespace": "dev.kappaflow.test",
        "fields": [
            {"name": "page", "type": "string"},
            {"name": "views", "type": "long"},
            {"name": "last_user", "type": ["null", "string"], "default": None},
        ],
    }
)

ORDER_JSON_SCHEMA = json.dumps(
    {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Order",
        "type": "object",
        "properties": {"id": {"type": "string"}, "amount": {"type": "number", "minimum": 0}},
        "required": ["id", "amount"],
        "additionalProperties": False,
    }
)


@dataclass(frozen=True)
class PageView:
    """A specific record, as Avro code generators shape them: `from_dict` and `to_dict`."""

    user: str
    page: str
    millis: int

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PageView:
        return cls(data["user"], data["page"], data["millis"])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _file_descriptor() -> bytes:
    proto = descriptor_pb2.FileDescriptorProto(
        name="kappaflow_test/orders.proto", package="dev.kappaflow.test", syntax="proto3"
    )
    order = proto.message_type.add(name="OrderPlaced")
    label = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
    kinds = descriptor_pb2.FieldDescriptorProto
    order.field.add(name="order_id", number=1, type=kinds.TYPE_STRING, label=label, json_name="orderId")
    order.field.add(name="customer", number=2, type=kinds.TYPE_STRING, label=label, json_name="customer")
    order.field.add(name="cents", number=3, type=kinds.TYPE_INT64, label=label, json_name="cents")
    total = proto.message_type.add(name="CustomerTotal")
    total.field.add(name="customer", number=1, type=kinds.TYPE_STRING, label=label, json_name="customer")
    total.field.add(name="cents", number=2, type=kinds.TYPE_INT64, label=label, json_name="cents")
    total.field.add(name="orders", number=3, type=kinds.TYPE_INT32, label=label, json_name="orders")
    return proto.SerializeToString()


ORDERS_FILE_DESCRIPTOR = _file_descriptor()
DESCRIPTOR = descriptor_pool.Default().AddSerializedFile(ORDERS_FILE_DESCRIPTOR)
_builder.BuildTopDescriptorsAndMessages(DESCRIPTOR, __name__, globals())

OrderPlaced: Any = globals()["OrderPlaced"]
CustomerTotal: Any = globals()["CustomerTotal"]
