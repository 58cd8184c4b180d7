"""Click enrichment through an HTTP service, one call per record, without blocking the stream thread.

Clicks (key: user id, value: page) are enriched with the user's profile fetched from a profile service
over HTTP - the call a Python team puts in a stream processor - by `map_values_async`: up to 128 calls
in flight per task, each user's clicks kept in order (per-key ordering), 2 s per attempt, 3 retries.
A click whose lookup keeps failing goes to the processing exception handler (and the dead-letter topic
when `errors.dead.letter.queue.topic.name` is set), like any processing error.

The client is plain asyncio (no extra dependency); `serve_profiles` is a small local profile service to
run it against:

    python -m examples.async_enrichment serve 8088 &      # the HTTP service
    PROFILE_SERVICE=127.0.0.1:8088 kappaflow run examples.async_enrichment:build_topology \
        --config app.properties
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from kappaflow import Ordering, StreamsBuilder, Topology, serdes

CLICKS = "clicks"
ENRICHED = "clicks-enriched"


class ProfileService:
    """An asyncio HTTP/1.1 client of the profile service at `address` (host:port): GET /users/<id>."""

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self.host, self.port = host or "127.0.0.1", int(port)

    async def profile(self, user_id: str) -> dict[str, str]:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            request = f"GET /users/{user_id} HTTP/1.1\r\nHost: {self.host}\r\nConnection: close\r\n\r\n"
            writer.write(request.encode())
            await writer.drain()
            response = await reader.read()
        finally:
            writer.close()
        head, _, body = response.partition(b"\r\n\r\n")
        status = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b"?"
        if status != b"200":
            raise ConnectionError(f"profile service answered {status.decode(errors='replace')} for {user_id}")
        return dict(json.loads(body))


def build_topology(service: str | None = None) -> Topology:
    profiles = ProfileService(service or os.environ.get("PROFILE_SERVICE", "127.0.0.1:8088"))

    async def enrich(user_id: str, page: str) -> str:
        profile = await profiles.profile(user_id)
        return json.dumps({"user": user_id, "page": page, "region": profile.get("region", "unknown")})

    builder = StreamsBuilder()
    clicks = builder.stream(CLICKS, key_serde=serdes.String(), value_serde=serdes.String())
    enriched = clicks.map_values_async(
        enrich, max_in_flight=128, ordering=Ordering.PER_KEY, timeout=2_000, retries=3, backoff=100
    )
    enriched.to(ENRICHED, key_serde=serdes.String(), value_serde=serdes.String())
    return builder.build()


async def serve_profiles(port: int, delay_s: float = 0.05) -> None:
    """A local profile service: GET /users/<id> -> {"region": ...} after `delay_s`; 404 for "nobody"."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        path = head.split(b" ", 2)[1].decode()
        await asyncio.sleep(delay_s)
        user = path.rsplit("/", 1)[-1]
        if user == "nobody":
            status, body = "404 Not Found", b"{}"
        else:
            status, body = "200 OK", json.dumps({"region": f"region-{len(user) % 3}"}).encode()
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        asyncio.run(serve_profiles(int(sys.argv[2]) if len(sys.argv) > 2 else 8088))
