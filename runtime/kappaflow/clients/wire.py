"""The Kafka wire protocol's framing, for the few admin requests librdkafka does not offer.

confluent-kafka's AdminClient has no DescribeProducers, ListTransactions, DescribeTransactions or
transaction abort (KIP-664), which `kappaflow transactions` needs to find and end a hanging transaction
(issue 29). Those requests are small; rather than a second Kafka client library (and its own idea of
connections, versions and retries), this module encodes and decodes just what they need, following the
message schemas in Kafka's `clients/src/main/resources/common/message/*.json`:

- the primitive types, both the classic ones (int16-length strings, int32-length arrays) and the
  *flexible* ones (unsigned-varint lengths stored plus one, 0 meaning null, and tagged fields after
  every struct, which a reader must skip since a newer broker may add some);
- request header v1 (non-flexible requests) and v2 (flexible: a tagged-field section after the client
  id, which itself stays a classic string), response header v0 and v1 (flexible: tagged fields);
- ApiVersions, so each request goes out at the highest version both sides speak. ApiVersions' response
  always has header v0, whatever the request version: a broker must be able to answer a client whose
  version it does not know.

Everything here is pure (bytes in, values out); `clients/wire_client.py` holds the socket.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

API_VERSIONS = 18
API_VERSIONS_VERSION = 3  # the first flexible one (Kafka 2.4+); every broker with KIP-664 speaks it

# The error codes these requests can answer with (Kafka's Errors enum), for messages a user can act on.
ERROR_NAMES: dict[int, str] = {
    -1: "UNKNOWN_SERVER_ERROR", 0: "NONE", 3: "UNKNOWN_TOPIC_OR_PARTITION", 5: "LEADER_NOT_AVAILABLE",
    6: "NOT_LEADER_OR_FOLLOWER", 7: "REQUEST_TIMED_OUT", 8: "BROKER_NOT_AVAILABLE",
    9: "REPLICA_NOT_AVAILABLE", 14: "COORDINATOR_LOAD_IN_PROGRESS", 15: "COORDINATOR_NOT_AVAILABLE",
    16: "NOT_COORDINATOR", 25: "UNKNOWN_MEMBER_ID", 29: "TOPIC_AUTHORIZATION_FAILED",
    30: "GROUP_AUTHORIZATION_FAILED", 31: "CLUSTER_AUTHORIZATION_FAILED", 69: "GROUP_ID_NOT_FOUND",
    82: "FENCED_INSTANCE_ID",
    35: "UNSUPPORTED_VERSION", 42: "INVALID_REQUEST", 47: "INVALID_PRODUCER_EPOCH", 48: "INVALID_TXN_STATE",
    49: "INVALID_PRODUCER_ID_MAPPING", 52: "TRANSACTION_COORDINATOR_FENCED",
    53: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", 56: "KAFKA_STORAGE_ERROR", 59: "UNKNOWN_PRODUCER_ID",
    90: "PRODUCER_FENCED", 105: "TRANSACTIONAL_ID_NOT_FOUND",
}  # fmt: skip


def error_name(code: int) -> str:
    return ERROR_NAMES.get(code, f"error code {code}")


class ProtocolError(Exception):
    """A response that does not parse as the schema says, or a version neither side can use."""


# ------------------------------------------------------------------------------------------- writing
class Writer:
    """Appends encoded fields; `flexible` picks the compact encodings of strings and arrays."""

    def __init__(self, flexible: bool) -> None:
        self.flexible = flexible
        self._parts: list[bytes] = []

    def getvalue(self) -> bytes:
        return b"".join(self._parts)

    def int8(self, value: int) -> None:
        self._parts.append(struct.pack(">b", value))

    def boolean(self, value: bool) -> None:
        self.int8(1 if value else 0)

    def int16(self, value: int) -> None:
        self._parts.append(struct.pack(">h", value))

    def int32(self, value: int) -> None:
        self._parts.append(struct.pack(">i", value))

    def int64(self, value: int) -> None:
        self._parts.append(struct.pack(">q", value))

    def uvarint(self, value: int) -> None:
        if value < 0:
            raise ValueError(f"an unsigned varint cannot hold {value}")
        out = bytearray()
        while value >= 0x80:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)
        self._parts.append(bytes(out))

    def string(self, value: str | None, *, classic: bool = False) -> None:
        """A string (None: null). `classic` forces the int16 length even in a flexible message: the
        request header's client id is one."""
        data = None if value is None else value.encode()
        if self.flexible and not classic:
            self.uvarint(0 if data is None else len(data) + 1)
        else:
            self.int16(-1 if data is None else len(data))
        if data:
            self._parts.append(data)

    def array(self, items: Sequence[T] | None, write: Callable[[Writer, T], None]) -> None:
        if self.flexible:
            self.uvarint(0 if items is None else len(items) + 1)
        else:
            self.int32(-1 if items is None else len(items))
        for item in items or ():
            write(self, item)

    def tags(self) -> None:
        """An empty tagged-field section (flexible versions only): kappaflow sends no tagged fields."""
        if self.flexible:
            self.uvarint(0)


# ------------------------------------------------------------------------------------------- reading
class Reader:
    """Reads fields in order from a response body; running out of bytes is a ProtocolError."""

    def __init__(self, data: bytes, flexible: bool) -> None:
        self.flexible = flexible
        self._data = memoryview(data)
        self._at = 0

    def _take(self, size: int) -> memoryview:
        end = self._at + size
        if size < 0 or end > len(self._data):
            raise ProtocolError(f"response truncated: wanted {size} bytes at {self._at} of {len(self._data)}")
        chunk = self._data[self._at : end]
        self._at = end
        return chunk

    def remaining(self) -> int:
        return len(self._data) - self._at

    def int8(self) -> int:
        return int(struct.unpack(">b", self._take(1))[0])

    def boolean(self) -> bool:
        return self.int8() != 0

    def int16(self) -> int:
        return int(struct.unpack(">h", self._take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">i", self._take(4))[0])

    def int64(self) -> int:
        return int(struct.unpack(">q", self._take(8))[0])

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise ProtocolError("varint longer than 10 bytes")

    def nullable_string(self) -> str | None:
        size = self.uvarint() - 1 if self.flexible else self.int16()
        if size < 0:
            return None
        return bytes(self._take(size)).decode()

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise ProtocolError("null where the schema has a non-nullable string")
        return value

    def array(self, read: Callable[[Reader], T]) -> list[T]:
        """An array (a null one reads as empty: no field used here tells null from empty apart)."""
        size = self.uvarint() - 1 if self.flexible else self.int32()
        return [read(self) for _ in range(max(size, 0))]

    def tags(self) -> None:
        """Skip a tagged-field section: fields a newer broker added, none of which kappaflow needs."""
        if not self.flexible:
            return
        for _ in range(self.uvarint()):
            self.uvarint()  # the tag
            self._take(self.uvarint())


# ----------------------------------------------------------------------------------- header, framing
def encode_request(api_key: int, version: int, correlation_id: int, client_id: str, flexible: bool,
                   body: bytes) -> bytes:  # fmt: skip
    """A whole request as sent on the socket: the int32 size, header v1 (v2 when `flexible`), body."""
    header = Writer(flexible)
    header.int16(api_key)
    header.int16(version)
    header.int32(correlation_id)
    header.string(client_id, classic=True)
    header.tags()
    payload = header.getvalue() + body
    return struct.pack(">i", len(payload)) + payload


def decode_response_header(frame: bytes, flexible_header: bool, flexible_body: bool) -> tuple[int, Reader]:
    """(correlation id, a reader at the start of the body) of a response frame without its size. The
    header's encoding is not always the body's: ApiVersions answers with header v0 and a flexible body."""
    reader = Reader(frame, flexible_header)
    correlation_id = reader.int32()
    reader.tags()
    reader.flexible = flexible_body
    return correlation_id, reader


# ----------------------------------------------------------------------------------------- ApiVersions
@dataclass(frozen=True, slots=True)
class VersionRange:
    min_version: int
    max_version: int


def encode_api_versions_request(client_name: str, client_version: str) -> bytes:
    body = Writer(flexible=True)
    body.string(client_name)
    body.string(client_version)
    body.tags()
    return body.getvalue()


def decode_api_versions_response(reader: Reader) -> tuple[int, dict[int, VersionRange]]:
    """(error code, api key -> versions). A broker that does not speak v3 answers UNSUPPORTED_VERSION
    with a v0 body, which the caller reports (such a broker predates KIP-664 anyway)."""
    error = reader.int16()
    if error != 0:
        return error, {}

    def one(r: Reader) -> tuple[int, VersionRange]:
        key, low, high = r.int16(), r.int16(), r.int16()
        r.tags()
        return key, VersionRange(low, high)

    versions = dict(reader.array(one))
    reader.int32()  # throttle time
    reader.tags()
    return error, versions


def pick_version(api_name: str, ours: VersionRange, broker: VersionRange | None) -> int:
    """The highest version both sides speak; a ProtocolError naming the request when there is none."""
    if broker is None:
        raise ProtocolError(f"the broker does not support {api_name} (Kafka 3.0 or later is needed)")
    version = min(ours.max_version, broker.max_version)
    if version < max(ours.min_version, broker.min_version):
        raise ProtocolError(
            f"no common version of {api_name}: kappaflow speaks {ours.min_version}-{ours.max_version}, "
            f"the broker {broker.min_version}-{broker.max_version}"
        )
    return version
