"""KIP-960/968 versioned key queries against a running application on the real broker: two instances
share a versioned table; a key's version as of a time and its history are asked over HTTP from the
instance that does not own the key (so the request is routed to the owner, as any key lookup), and
through the Python API on the owner. A plain store refuses both, clearly, before anything is routed.
Then `kappaflow run` with two worker processes: the parent's one server reads each key through the worker
holding its task."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer

from kappaflow import Materialized, Stores, StreamsBuilder, serdes
from kappaflow.api.errors import InvalidStateStoreError
from kappaflow.query import MultiVersionedKeyQuery, QueryableStoreTypes, QueryServer, VersionedKeyQuery
from kappaflow.runner import KafkaStreams
from kappaflow.runner.metadata import HostInfo
from kappaflow.state.versioned import VersionedRecord
from tests.harness.kafka_fixtures import free_port
from tests.kafka.streams_support import (
    fast_config,
    http_get,
    kill_if_running,
    start_cli_app,
    wait_for,
    wait_running,
)
from tests.kafka.test_interactive_queries import get_json

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

KEYS = [f"sku{i}" for i in range(8)]
VERSIONS = [(1000, "v1"), (2000, "v2"), (3000, "v3")]


def topology(prices: str, stock: str) -> Any:
    builder = StreamsBuilder()
    string = serdes.String()
    versioned = Stores.persistent_versioned_key_value_store("prices", 3_600_000)
    builder.table(prices, key_serde=string, value_serde=string, materialized=Materialized.as_(versioned))
    builder.table(stock, key_serde=string, value_serde=string, materialized="stock")
    return builder.build()


def produce_versions(bootstrap: str, prices: str, stock: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for timestamp, version in VERSIONS:
        for key in KEYS:
            producer.produce(prices, key=key.encode(), value=f"{key}-{version}".encode(), timestamp=timestamp)
    producer.produce(stock, key=b"sku0", value=b"12")
    producer.flush(30)


def test_versioned_queries_over_http_are_routed_to_the_owner_and_work_from_python(
    kafka_bootstrap: str, kafka_topics: Any, tmp_path: Any
) -> None:
    prices, stock = kafka_topics("vq-prices", partitions=4), kafka_topics("vq-stock", partitions=4)
    app_id = f"vq-{uuid.uuid4().hex[:8]}"
    instances: list[tuple[KafkaStreams, QueryServer, int]] = []
    for n in range(2):
        port = free_port()
        config = fast_config(
            kafka_bootstrap, app_id, str(tmp_path / f"i{n}"), **{"application.server": f"127.0.0.1:{port}"}
        )
        streams = KafkaStreams(topology(prices, stock), config)
        server = QueryServer(streams, "127.0.0.1")
        server.start()
        streams.start()
        instances.append((streams, server, port))
    try:
        wait_running(*(streams for streams, _, _ in instances))
        produce_versions(kafka_bootstrap, prices, stock)
        first = instances[0]
        by_host = {HostInfo("127.0.0.1", port): (streams, port) for streams, _, port in instances}

        def latest_everywhere() -> bool:
            for key in KEYS:
                status, body, _ = get_json(first[2], f"/v1/stores/prices/keys/{key}/version")
                if status != 200 or body["value"] != f"{key}-v3":
                    return False
            return True

        wait_for(latest_everywhere, 60, "every key's latest version readable over HTTP")
        remote = [
            k
            for k in KEYS
            if first[0].query_metadata_for_key("prices", k).active_host != HostInfo("127.0.0.1", first[2])
        ]
        assert remote, "the two instances should share the partitions"
        key = remote[0]
        owner_streams, owner_port = by_host[first[0].query_metadata_for_key("prices", key).active_host]  # type: ignore[index]

        status, body, _ = get_json(first[2], f"/v1/stores/prices/keys/{key}/version?as_of=1500")
        assert status == 200, body
        assert (body["value"], body["timestamp"], body["valid_to"]) == (f"{key}-v1", 1000, 2000)
        assert body["host"] == f"127.0.0.1:{owner_port}"  # answered by the owner
        status, body, _ = get_json(first[2], f"/v1/stores/prices/keys/{key}/version")
        assert (status, body["value"], body["timestamp"], body["valid_to"]) == (200, f"{key}-v3", 3000, None)
        status, body, _ = get_json(first[2], f"/v1/stores/prices/keys/{key}/version?as_of=999")
        assert status == 404 and "no version" in body["error"]

        status, body, _ = get_json(
            first[2], f"/v1/stores/prices/keys/{key}/versions?from=1500&to=2500&order=asc"
        )
        assert status == 200, body
        assert [(v["value"], v["timestamp"], v["valid_to"]) for v in body["versions"]] == [
            (f"{key}-v1", 1000, 2000),
            (f"{key}-v2", 2000, 3000),
        ]
        status, body, _ = get_json(first[2], f"/v1/stores/prices/keys/{key}/versions")
        assert [v["timestamp"] for v in body["versions"]] == [3000, 2000, 1000]  # newest first by default

        # refused before routing: a plain store, a bad range
        status, body, _ = get_json(first[2], "/v1/stores/stock/keys/sku0/version")
        assert status == 400 and "not a versioned one" in body["error"]
        status, body, _ = get_json(first[2], f"/v1/stores/prices/keys/{key}/versions?from=9&to=1")
        assert status == 400 and "must not be after" in body["error"]

        # the Python API, on the owner
        view = owner_streams.store("prices", QueryableStoreTypes.versioned_key_value())
        assert view.query(VersionedKeyQuery.with_key(key).as_of(2500)) == VersionedRecord(
            f"{key}-v2", 2000, 3000
        )
        history = view.query(MultiVersionedKeyQuery.with_key(key).with_ascending_timestamps())
        assert [r.value for r in history] == [f"{key}-v1", f"{key}-v2", f"{key}-v3"]
        with pytest.raises(InvalidStateStoreError, match="not a versioned one"):
            owner_streams.store("stock", QueryableStoreTypes.versioned_key_value())
    finally:
        for streams, server, _ in instances:
            server.stop()
            streams.close(30)


def test_versioned_queries_through_worker_processes(
    kafka_bootstrap: str, kafka_topics: Any, tmp_path: Any
) -> None:
    prices, stock = kafka_topics("vqw-prices", partitions=4), kafka_topics("vqw-stock", partitions=4)
    query_port = free_port()
    props = fast_config(
        kafka_bootstrap,
        f"vqw-{uuid.uuid4().hex[:8]}",
        str(tmp_path / "state"),
        **{
            "num.stream.threads": 2,
            "application.server": f"127.0.0.1:{query_port}",
            "query.http.enabled": "true",
            "query.http.host": "127.0.0.1",
        },
    )
    env = {"VQ_PRICES": prices, "VQ_STOCK": stock}
    process = start_cli_app("tests.kafka.apps:versioned_prices", props, tmp_path, env)
    try:
        produce_versions(kafka_bootstrap, prices, stock)

        def history(key: str) -> list[Any] | None:
            status, text = http_get(query_port, f"/v1/stores/prices/keys/{key}/versions?order=asc")
            if status != 200:  # 0 while the server is not listening yet, 503 while tasks are assigned
                return None
            return [(v["value"], v["timestamp"], v["valid_to"]) for v in json.loads(text)["versions"]]

        expected = {
            key: [(f"{key}-v1", 1000, 2000), (f"{key}-v2", 2000, 3000), (f"{key}-v3", 3000, None)]
            for key in KEYS
        }
        wait_for(
            lambda: {key: history(key) for key in KEYS} == expected, 90, "every key's history, both workers"
        )
        for key in KEYS:
            status, body, _ = get_json(query_port, f"/v1/stores/prices/keys/{key}/version?as_of=2999")
            assert (status, body["value"], body["valid_to"]) == (200, f"{key}-v2", 3000), body
        status, body, _ = get_json(query_port, "/v1/stores/stock/keys/sku0/versions")
        assert status == 400 and "not a versioned one" in body["error"]
    finally:
        process.terminate()
        try:
            process.wait(45)
        finally:
            kill_if_running(process)
