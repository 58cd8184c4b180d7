"""A blocking connection to one Kafka broker for the requests in clients/txn_messages.py (and the
LeaveGroup of clients/group_messages.py): the thin I/O.

One request at a time (the tooling asks a handful of brokers a handful of questions), each at the highest
version both sides speak, learnt by ApiVersions when the connection opens. PLAINTEXT and SSL listeners
are supported; SASL is not (the command says so and names `kafka-transactions.sh` as the way then).
"""

from __future__ import annotations

import socket
import ssl
import struct
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from kappaflow.clients import txn_messages as msg
from kappaflow.clients.wire import (
    API_VERSIONS,
    API_VERSIONS_VERSION,
    ProtocolError,
    Reader,
    VersionRange,
    decode_api_versions_response,
    decode_response_header,
    encode_api_versions_request,
    encode_request,
    error_name,
    pick_version,
)

T = TypeVar("T")
CLIENT_ID = "kappaflow-transactions"
MAX_RESPONSE_BYTES = 64 * 1024 * 1024


class BrokerIOError(Exception):
    """The broker could not be reached or closed the connection; the message names its address."""


def ssl_context(settings: Mapping[str, Any]) -> ssl.SSLContext | None:
    """An SSL context from librdkafka's settings (security.protocol=SSL, ssl.ca.location,
    ssl.certificate.location, ssl.key.location, ssl.key.password), None for PLAINTEXT."""
    protocol = str(settings.get("security.protocol", "PLAINTEXT")).upper()
    if protocol == "PLAINTEXT":
        return None
    if protocol != "SSL":
        raise BrokerIOError(
            f"security.protocol={protocol} is not supported by `kappaflow transactions` (PLAINTEXT and SSL "
            "are); use Kafka's kafka-transactions.sh with the same settings"
        )
    context = ssl.create_default_context(cafile=settings.get("ssl.ca.location"))
    if settings.get("ssl.endpoint.identification.algorithm", "https") == "none":
        context.check_hostname = False
    certificate = settings.get("ssl.certificate.location")
    if certificate:
        context.load_cert_chain(
            certificate, settings.get("ssl.key.location"), settings.get("ssl.key.password")
        )
    return context


class BrokerConnection:
    """A socket to `host:port`, with the versions the broker speaks for the APIs kappaflow sends."""

    def __init__(self, host: str, port: int, timeout_s: float, context: ssl.SSLContext | None,
                 client_id: str = CLIENT_ID) -> None:  # fmt: skip
        self.address = f"{host}:{port}"
        self._client_id = client_id
        self._correlation = 0
        try:
            raw = socket.create_connection((host, port), timeout=timeout_s)
            self._sock: socket.socket = context.wrap_socket(raw, server_hostname=host) if context else raw
        except OSError as exc:
            raise BrokerIOError(f"cannot connect to broker {self.address}: {exc}") from exc
        self._versions = self._api_versions()

    def close(self) -> None:
        self._sock.close()

    def _api_versions(self) -> dict[int, VersionRange]:
        body = encode_api_versions_request(CLIENT_ID, "1")
        reader = self._exchange(API_VERSIONS, API_VERSIONS_VERSION, True, body, flexible_header=False)
        error, versions = decode_api_versions_response(reader)
        if error != 0:
            raise ProtocolError(f"broker {self.address} refused ApiVersions v3: {error_name(error)} "
                                "(Kafka 3.0 or later is needed)")  # fmt: skip
        return versions

    def version(self, api_key: int) -> int:
        return pick_version(msg.API_NAMES[api_key], msg.SUPPORTED[api_key], self._versions.get(api_key))

    def call(self, api_key: int, encode: Callable[[int], bytes], decode: Callable[[int, Reader], T]) -> T:
        """Send `encode(version)` as `api_key` at the version picked, return `decode(version, body)`."""
        version = self.version(api_key)
        flexible = msg.is_flexible(api_key, version)
        reader = self._exchange(api_key, version, flexible, encode(version), flexible_header=flexible)
        return decode(version, reader)

    def _exchange(self, api_key: int, version: int, flexible: bool, body: bytes, *,
                  flexible_header: bool) -> Reader:  # fmt: skip
        self._correlation += 1
        frame = encode_request(api_key, version, self._correlation, self._client_id, flexible, body)
        try:
            self._sock.sendall(frame)
            size = struct.unpack(">i", self._read(4))[0]
            if not 0 < size <= MAX_RESPONSE_BYTES:
                raise ProtocolError(f"broker {self.address} sent a response of {size} bytes")
            response = self._read(size)
        except OSError as exc:
            raise BrokerIOError(f"broker {self.address}: {exc}") from exc
        correlation, reader = decode_response_header(response, flexible_header, flexible)
        if correlation != self._correlation:
            raise ProtocolError(
                f"broker {self.address} answered request {correlation}, not {self._correlation}"
            )
        return reader

    def _read(self, size: int) -> bytes:
        chunks: list[bytes] = []
        while size > 0:
            chunk = self._sock.recv(min(size, 1 << 20))
            if not chunk:
                raise BrokerIOError(f"broker {self.address} closed the connection")
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)
