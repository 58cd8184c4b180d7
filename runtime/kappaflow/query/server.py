"""The interactive-query HTTP server: any instance answers for any key, forwarding to its owner.

    GET /v1/stores/{store}/keys/{key}                 key-value lookup
    GET /v1/stores/{store}/keys/{key}/windows?from=&to=   window fetch (epoch ms; `to` defaults to now)
    GET /v1/stores/{store}/keys/{key}/sessions        sessions of a key
    GET /v1/stores/{store}/keys/{key}/version?as_of=  a versioned store's version of a key as of a time
    GET /v1/stores/{store}/keys/{key}/versions?from=&to=&order=   the versions of a key in a time range
    GET /v1/stores/{store}/keys/{key}/metadata        active host, standby hosts and partition of a key
    GET /v1/stores/{store}/range?from=&to=            key-value range over every instance
    GET /v1/stores/{store}/all                        every entry of a store, over every instance
    GET /v1/metadata                                  every instance and what it hosts
    GET /v1/lags                                      this instance's local store lags
    GET /v1/tasks                                     each task's active and standby hosts
    GET /v1/snapshots/{task}/{store}                  a tar of a standby store's RocksDB checkpoint
    GET /openapi.json                                 this API, described

A key request is routed with `query_metadata_for_key`: served here when this instance owns the key's
partition, else forwarded once (with `local=true`, so it never loops) to the owner. Scans gather every
owner's local part and check that each partition was read exactly once, so a scan during a rebalance
fails (503) rather than returning a partial answer. Whenever the owner is rebalancing or restoring, or
the group has no stable assignment, the answer is 503 with `Retry-After`, never a stale or wrong value;
`stale=true` also accepts standby and restoring copies, as `enable_stale_stores` does.

With `num.stream.threads` > 1 the stores live in worker processes: the parent's server reads a key
through the worker holding its task, and a local scan through every worker (`worker_local_key`,
`worker_local_scan` run there), so one server still answers for the whole instance.

It is the standard library's ThreadingHTTPServer: queries are short reads under the state lock, and
the server must not add a dependency to every application image.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kappaflow.api.errors import InvalidStateStoreError, InvalidStateStorePartitionError, StreamsError
from kappaflow.query import render, versioned
from kappaflow.query.openapi import openapi_spec
from kappaflow.runner.local_stores import LocalStoreProvider
from kappaflow.runner.metadata import HostInfo
from kappaflow.runner.snapshots import OFFSET_HEADER, Snapshot, SnapshotRefused, local_snapshot, send_snapshot
from kappaflow.runner.streams import KafkaStreams
from kappaflow.state.builders import ReadOnlyKeyValueView
from kappaflow.state.session_store import ReadOnlySessionView
from kappaflow.state.window_store import ReadOnlyWindowView

log = logging.getLogger(__name__)

RETRY_AFTER_S = 1
FORWARD_TIMEOUT_S = 5.0
# what may follow /v1/stores/{store}/keys/{key}: "" (a key-value lookup), or one of these
KEY_ACTIONS = ("", "windows", "sessions", "metadata", *versioned.HTTP_ACTIONS)


class HttpAnswer(Exception):
    """A finished response (status and JSON body), raised from deep inside a handler."""

    def __init__(self, status: int, body: dict[str, Any], retry: bool = False) -> None:
        super().__init__(body.get("error", ""))
        self.status = status
        self.body = body
        self.retry = retry


class SnapshotAnswer(Exception):
    """A snapshot to stream (`/v1/snapshots/...`): the answer is a tar, not JSON (runner/snapshots.py)."""

    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__(str(snapshot.directory))
        self.snapshot = snapshot


def unavailable(message: str) -> HttpAnswer:
    return HttpAnswer(503, {"error": message, "retryable": True}, retry=True)


class QueryService:
    """The request logic, separate from the HTTP plumbing so it can be read (and tested) as functions."""

    def __init__(self, streams: KafkaStreams, self_host: HostInfo | None) -> None:
        self.streams = streams
        self.self_host = self_host

    # ----------------------------------------------------------------- routing
    def handle(self, path: str, query: dict[str, str]) -> tuple[int, dict[str, Any]]:
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")]
        if parts == ["openapi.json"]:
            return 200, openapi_spec()
        if parts == ["v1", "metadata"]:
            return 200, self.metadata()
        if parts == ["v1", "lags"]:
            return 200, self.lags()
        if parts == ["v1", "tasks"]:
            return 200, self.tasks()
        if len(parts) == 4 and parts[:2] == ["v1", "snapshots"]:
            try:
                raise SnapshotAnswer(local_snapshot(self.streams, parts[2], parts[3]))
            except SnapshotRefused as refused:
                raise HttpAnswer(refused.status, {"error": refused.reason}) from refused
        if len(parts) >= 3 and parts[:2] == ["v1", "stores"]:
            store, rest = parts[2], parts[3:]
            if rest == ["all"]:
                return 200, self.scan(store, "all", query)
            if rest == ["range"]:
                return 200, self.scan(store, "range", query)
            if len(rest) >= 2 and rest[0] == "keys":
                action = rest[2] if len(rest) == 3 else ""
                if len(rest) <= 3 and action in KEY_ACTIONS:
                    return self.key_request(store, rest[1], action, path, query)
        raise HttpAnswer(404, {"error": f"no such endpoint: {path} (see /openapi.json)"})

    def _provider(self, store: str, stale: bool) -> LocalStoreProvider:
        try:
            return LocalStoreProvider(self.streams, store, stale)
        except InvalidStateStoreError as exc:
            raise HttpAnswer(404, {"error": str(exc)}) from exc

    # ----------------------------------------------------------------- key requests
    def key_request(
        self, store: str, key_text: str, action: str, path: str, query: dict[str, str]
    ) -> tuple[int, dict[str, Any]]:
        stale = query.get("stale") == "true"
        provider = self._provider(store, stale)
        key = render.parse_key(key_text, provider.key_serde())
        if action in versioned.HTTP_ACTIONS:  # refused here, before any routing, for a plain store
            if not versioned.is_versioned(provider):
                raise HttpAnswer(400, {"error": str(versioned.not_versioned_error(store, provider.kind))})
            try:
                versioned.query_from_params(action, key, query)
            except ValueError as exc:
                raise HttpAnswer(400, {"error": str(exc)}) from exc
        if action == "metadata":
            meta = self.streams.query_metadata_for_key(store, key)
            return 200, {
                "store": store,
                "key": render.to_json(key),
                "partition": meta.partition,
                "active_host": str(meta.active_host) if meta.active_host else None,
                "standby_hosts": sorted(str(h) for h in meta.standby_hosts),
            }
        if query.get("local") != "true" and not provider.is_global:
            meta = self.streams.query_metadata_for_key(store, key)
            if meta.active_host is None:
                raise unavailable(
                    f"no stable owner for partition {meta.partition} of '{store}' (rebalancing)"
                )
            targets = [meta.active_host] + (sorted(meta.standby_hosts) if stale else [])
            if self.self_host not in targets[:1] and not (stale and self.self_host in targets):
                return self.forward(targets, path, {**query, "local": "true"})
        return self.local_key(provider, store, key, action, query)

    def local_key(
        self, provider: LocalStoreProvider, store: str, key: Any, action: str, query: dict[str, str]
    ) -> tuple[int, dict[str, Any]]:
        if self.streams.runs_workers:
            try:
                task = "" if provider.is_global else f"{provider.subtopology}_{provider.partition_of(key)}"
                payload = (store, key, action, query, provider.enable_stale_stores)
                [(status, answer)] = self.streams.ask_workers(WORKER_LOCAL_KEY, payload, task)
            except InvalidStateStorePartitionError as exc:
                raise unavailable(str(exc)) from exc
            if status != 200:
                raise HttpAnswer(status, answer)
            return status, answer
        expected = {"windows": "window", "sessions": "session"}.get(action, "key_value")
        if provider.kind != expected:
            raise HttpAnswer(400, {"error": f"store '{store}' is a {provider.kind} store"})
        body: dict[str, Any] = {"store": store, "key": render.to_json(key), "host": str(self.self_host)}
        try:
            if action == "windows":
                start = _int(query, "from", 0)
                end = _int(query, "to", int(time.time() * 1000))
                windows = provider.read_key(key, lambda s: ReadOnlyWindowView(s).fetch(key, start, end))
                body["windows"] = [{"start": w, "value": render.to_json(v)} for w, v in windows]
            elif action in versioned.HTTP_ACTIONS:
                try:
                    body.update(versioned.read_for_http(provider, key, action, query))
                except LookupError as exc:
                    raise HttpAnswer(404, {**body, "error": str(exc)}) from exc
            elif action == "sessions":
                sessions = provider.read_key(key, lambda s: ReadOnlySessionView(s).fetch(key))
                body["sessions"] = [
                    {"start": w.window.start, "end": w.window.end, "value": render.to_json(v)}
                    for w, v in sessions
                ]
            else:
                value = provider.read_key(key, lambda s: ReadOnlyKeyValueView(s).get(key))
                if value is None:
                    raise HttpAnswer(404, {**body, "error": "key not found"})
                body["value"] = render.to_json(value)
        except InvalidStateStorePartitionError as exc:
            raise unavailable(str(exc)) from exc
        if not provider.is_global:
            body["partition"] = provider.partition_of(key)
        return 200, body

    # ----------------------------------------------------------------- scans
    def scan(self, store: str, kind: str, query: dict[str, str]) -> dict[str, Any]:
        stale = query.get("stale") == "true"
        provider = self._provider(store, stale)
        if query.get("local") == "true" or provider.is_global:  # a global store is whole everywhere
            return {"store": store, **self.local_scan(provider, kind, query)}
        count = self.streams.store_partition_count(store)
        hosts = sorted(
            {m.host_info for m in self.streams.metadata_for_all_clients() if store in m.state_store_names}
        )
        if not hosts or count is None:
            raise unavailable(f"no stable assignment for store '{store}' (rebalancing)")
        entries: list[Any] = []
        seen: list[int] = []
        for host in hosts:
            if host == self.self_host:
                part = self.local_scan(provider, kind, query)
            else:
                path = f"/v1/stores/{urllib.parse.quote(store, safe='')}/{kind}"
                _status, part = self.forward([host], path, {**query, "local": "true"})
            entries.extend(part["entries"])
            seen.extend(part["partitions"])
        if sorted(seen) != list(range(count)) and not stale:
            raise unavailable(f"store '{store}': partitions moved while scanning (rebalancing)")
        return {"store": store, "entries": entries, "partitions": sorted(set(seen))}

    def local_scan(self, provider: LocalStoreProvider, kind: str, query: dict[str, str]) -> dict[str, Any]:
        if self.streams.runs_workers:
            payload = (provider.name, kind, query, provider.enable_stale_stores)
            one = "" if provider.is_global else None  # a global store is whole in every worker
            try:
                parts = self.streams.ask_workers(WORKER_LOCAL_SCAN, payload, one)
            except InvalidStateStorePartitionError as exc:
                raise unavailable(str(exc)) from exc
            for part in parts:
                if isinstance(part, tuple):  # (status, body): the worker refused the request itself
                    raise HttpAnswer(*part)
            entries = [entry for part in parts for entry in part["entries"]]
            seen = [partition for part in parts for partition in part["partitions"]]
            return {"entries": entries, "partitions": seen, "host": str(self.self_host)}
        partitions: list[int] = []
        read: Callable[[Any], list[tuple[Any, Any]]]
        if provider.kind == "window":
            start, end = _int(query, "from", 0), _int(query, "to", int(time.time() * 1000))
            read = lambda s: ReadOnlyWindowView(s).fetch_all(start, end)  # noqa: E731
        elif provider.kind == "session":
            read = lambda s: ReadOnlySessionView(s).all()  # noqa: E731
        elif kind == "range":
            serde = provider.key_serde()
            low = render.parse_key(query["from"], serde) if "from" in query else None
            high = render.parse_key(query["to"], serde) if "to" in query else None
            read = lambda s: list(ReadOnlyKeyValueView(s).range(low, high))  # noqa: E731
        else:
            read = lambda s: list(ReadOnlyKeyValueView(s).all())  # noqa: E731
        try:
            pairs = provider.read_all(read, partitions)
        except InvalidStateStorePartitionError as exc:
            raise unavailable(str(exc)) from exc
        return {"entries": render.entries(pairs), "partitions": partitions, "host": str(self.self_host)}

    # ----------------------------------------------------------------- forwarding
    def forward(self, hosts: list[HostInfo], path: str, query: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """GET `path` on the first host that answers; its 503/404 is passed on as it is."""
        last = ""
        for host in hosts:
            url = f"http://{host}{path}?{urllib.parse.urlencode(query)}"
            try:
                with urllib.request.urlopen(url, timeout=FORWARD_TIMEOUT_S) as response:
                    return int(response.status), json.loads(response.read())
            except urllib.error.HTTPError as err:
                body = _json_body(err.read())
                if err.code == 503 and host is not hosts[-1]:
                    last = str(body.get("error", ""))
                    continue
                raise HttpAnswer(err.code, body, retry=err.code == 503) from err
            except (OSError, ValueError) as exc:
                last = f"{host} did not answer: {exc}"
        raise unavailable(f"owner unreachable: {last}")

    # ----------------------------------------------------------------- metadata
    def metadata(self) -> dict[str, Any]:
        return {
            "instances": [
                {
                    "host": str(m.host_info),
                    "client_id": m.client_id,
                    "stores": sorted(m.state_store_names),
                    "partitions": [list(tp) for tp in sorted(m.topic_partitions)],
                    "standby_stores": sorted(m.standby_state_store_names),
                    "standby_partitions": [list(tp) for tp in sorted(m.standby_topic_partitions)],
                }
                for m in self.streams.metadata_for_all_clients()
            ]
        }

    def tasks(self) -> dict[str, Any]:
        """Where each task of the group is active and kept as a standby (every instance that set
        `application.server`, as the group's assignment and the standby rule place them), and this
        instance's own tasks with their role and changelog lag: a warm-up replica of an instance that
        has not joined yet is in its own `local` only, since the group does not list it."""
        index = self.streams.topology_index
        placement: dict[str, dict[str, Any]] = {}
        for meta in self.streams.metadata_for_all_clients():
            host = str(meta.host_info)
            for task_id in index.task_ids_for(sorted(meta.topic_partitions)):
                placement.setdefault(str(task_id), {"active": None, "standbys": []})["active"] = host
            for task_id in index.task_ids_for(sorted(meta.standby_topic_partitions)):
                placement.setdefault(str(task_id), {"active": None, "standbys": []})["standbys"].append(host)
        return {
            "host": str(self.self_host),
            "tasks": {t: {**p, "standbys": sorted(p["standbys"])} for t, p in sorted(placement.items())},
            "local": self.streams.local_task_roles(),
        }

    def lags(self) -> dict[str, Any]:
        lags = self.streams.all_local_store_partition_lags()
        return {
            "host": str(self.self_host),
            "stores": {
                store: {
                    str(p): {
                        "current": info.current_offset_position,
                        "end": info.end_offset_position,
                        "lag": info.offset_lag,
                    }
                    for p, info in sorted(parts.items())
                }
                for store, parts in sorted(lags.items())
            },
        }


WORKER_LOCAL_KEY = f"{__name__}:worker_local_key"
WORKER_LOCAL_SCAN = f"{__name__}:worker_local_scan"


def _in_worker(streams: KafkaStreams, read: Callable[[QueryService], Any]) -> Any:
    """A local read in a worker process; a retryable answer travels back as the retryable error."""
    try:
        return read(QueryService(streams, streams.host_info))
    except HttpAnswer as answer:
        if answer.retry:
            raise InvalidStateStorePartitionError(str(answer)) from answer
        return answer.status, answer.body


def worker_local_key(streams: KafkaStreams, payload: tuple[str, Any, str, dict[str, str], bool]) -> Any:
    """Run in a worker (runner/worker_process.py): the key read the parent's `local_key` forwards."""
    store, key, action, query, stale = payload
    provider = LocalStoreProvider(streams, store, stale)
    return _in_worker(streams, lambda service: service.local_key(provider, store, key, action, query))


def worker_local_scan(streams: KafkaStreams, payload: tuple[str, str, dict[str, str], bool]) -> Any:
    """Run in a worker: this worker's part of a scan (entries and the partitions read)."""
    store, kind, query, stale = payload
    provider = LocalStoreProvider(streams, store, stale)
    return _in_worker(streams, lambda service: service.local_scan(provider, kind, query))


def _int(query: dict[str, str], name: str, default: int) -> int:
    text = query.get(name)
    if text is None:
        return default
    try:
        return int(text)
    except ValueError as exc:
        raise HttpAnswer(400, {"error": f"'{name}' must be an integer (epoch milliseconds)"}) from exc


def _json_body(data: bytes) -> dict[str, Any]:
    try:
        body = json.loads(data)
    except ValueError:
        return {"error": data.decode(errors="replace")}
    return body if isinstance(body, dict) else {"error": str(body)}


class QueryServer:
    """Serves QueryService over HTTP on `host:port` (port 0: the OS picks, for tests)."""

    def __init__(self, streams: KafkaStreams, host: str = "0.0.0.0", port: int | None = None) -> None:
        self_host = streams.host_info
        if port is None:
            if self_host is None:
                raise StreamsError("the query server needs 'application.server' (host:port) to be set")
            port = self_host.port
        self.service = QueryService(streams, self_host)
        service = self.service

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(url.query))
                retry = False
                try:
                    status, body = service.handle(url.path, query)
                except SnapshotAnswer as answer:
                    self._send_snapshot(answer.snapshot)
                    return
                except HttpAnswer as answer:
                    status, body, retry = answer.status, answer.body, answer.retry
                except render.BadKey as exc:
                    status, body = 400, {"error": str(exc)}
                except InvalidStateStorePartitionError as exc:
                    status, body, retry = 503, {"error": str(exc), "retryable": True}, True
                except StreamsError as exc:
                    status, body = 400, {"error": str(exc)}
                except Exception as exc:  # a bug must answer 500, not drop the connection
                    log.exception("query %s failed", self.path)
                    status, body = 500, {"error": f"{type(exc).__name__}: {exc}"}
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                if retry:
                    self.send_header("Retry-After", str(RETRY_AFTER_S))
                self.end_headers()
                self.wfile.write(payload)

            def _send_snapshot(self, snapshot: Snapshot) -> None:
                def headers(length: int, offset: int) -> None:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/x-tar")
                    self.send_header("Content-Length", str(length))
                    self.send_header(OFFSET_HEADER, str(offset))
                    self.end_headers()

                try:
                    send_snapshot(snapshot, headers, self.wfile)
                except OSError as exc:  # the peer went away: it falls back to restoring from the changelog
                    log.warning("sending a snapshot to %s failed: %s", self.address_string(), exc)
                except Exception:  # the peer sees a short archive and falls back the same way
                    log.exception("sending a snapshot to %s failed", self.address_string())

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("%s " + format, self.address_string(), *args)

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, name="kappaflow-iq", daemon=True)
        self._thread.start()
        log.info("interactive queries served on port %d", self.port)

    def stop(self) -> None:
        """Stop serving and close the socket; a server never started is only closed (socketserver's
        shutdown() would wait forever for a serving loop that never ran)."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(5)
            self._thread = None
        self._server.server_close()
