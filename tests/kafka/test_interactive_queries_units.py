"""Interactive queries without a broker: endpoint encoding, group interpretation, rendering, routes."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from examples.queryable_app import COUNTS_STORE, SESSION_STORE, WINDOWED_STORE, build_topology

from kappaflow.api import serdes
from kappaflow.api.errors import ConfigError
from kappaflow.api.processor import TaskId
from kappaflow.api.windows import Window, Windowed
from kappaflow.clients import partition_for_key
from kappaflow.clients.admin import GroupMember
from kappaflow.query import render
from kappaflow.query.openapi import openapi_spec
from kappaflow.query.server import HttpAnswer, QueryService
from kappaflow.runner.metadata import (
    HostInfo,
    TopologyIndex,
    consumer_client_id,
    endpoint_of,
    interpret_group,
    key_metadata,
)
from kappaflow.runner.placement import standby_tasks_for

APP = "qa"
REPARTITION = f"{APP}-{COUNTS_STORE}-repartition"


def test_the_endpoint_travels_in_the_client_id():
    cid = consumer_client_id("qa-pod-0-consumer", "pod-0.qa.ns.svc:7070")
    assert cid == "qa-pod-0-consumer@iq=pod-0.qa.ns.svc:7070"
    assert endpoint_of(cid) == HostInfo("pod-0.qa.ns.svc", 7070)
    assert consumer_client_id("plain", "") == "plain"
    assert endpoint_of("plain") is None
    assert endpoint_of("x@iq=no-port") is None
    with pytest.raises(ConfigError, match="host:port"):
        HostInfo.parse("localhost:99999")


def members(n: int, partitions: int = 4) -> list[GroupMember]:
    """n members with Kafka's range assignment of every source/repartition topic of the example."""
    index = TopologyIndex(build_topology("input"), APP)
    topics = sorted({t for s in index.topology.sub_topologies() for t in index.source_topics_of(s.id)})
    result = []
    for m in range(n):
        mine = [p for p in range(partitions) if p * n // partitions == m]
        assignment = tuple(sorted((t, p) for t in topics for p in mine))
        result.append(
            GroupMember(f"member-{m}", consumer_client_id(f"c{m}", f"h{m}:70{m}0"), f"pod-{m}", assignment)
        )
    return result


def test_group_members_become_query_metadata_with_standbys():
    index = TopologyIndex(build_topology("input"), APP)
    group = members(3)
    view = interpret_group(True, group, index, 1, standby_tasks_for)
    assert [str(m.host_info) for m in view.metadata] == ["h0:7000", "h1:7010", "h2:7020"]
    assert all(m.state_store_names == {COUNTS_STORE, WINDOWED_STORE, SESSION_STORE} for m in view.metadata)
    # each stateful task is active on one host and standby on the next one in sorted order
    for task_id, host in view.active.items():
        if index.stores_of(task_id):
            assert view.standbys[task_id] and host not in view.standbys[task_id]
    counts = {"input": 4, REPARTITION: 4}
    for word in ["kafka", "streams", "python", "a", "zebra"]:
        meta = key_metadata(view, index, COUNTS_STORE, word.encode(), counts)
        partition = partition_for_key(word.encode(), 4)
        assert meta.partition == partition
        assert meta.active_host == view.active[TaskId(1, partition)]
        assert meta.standby_hosts == frozenset(view.standbys[TaskId(1, partition)])
    # while the group is rebalancing, nobody is named as the owner
    unstable = interpret_group(False, group, index, 1, standby_tasks_for)
    meta = key_metadata(unstable, index, COUNTS_STORE, b"kafka", counts)
    assert not meta.available and meta.partition == partition_for_key(b"kafka", 4)


def test_members_without_an_endpoint_are_not_advertised():
    index = TopologyIndex(build_topology("input"), APP)
    group = members(2)
    group[1] = dataclasses.replace(group[1], client_id="c1")
    view = interpret_group(True, group, index, 0, standby_tasks_for)
    assert [str(m.host_info) for m in view.metadata] == ["h0:7000"]
    keys = [w for w in ("a", "b", "c", "d", "e", "f", "g") if partition_for_key(w.encode(), 4) >= 2]
    meta = key_metadata(view, index, COUNTS_STORE, keys[0].encode(), {REPARTITION: 4})
    assert meta.active_host is None


def test_keys_are_read_from_urls_with_the_store_key_serde():
    assert render.parse_key("kafka", serdes.String()) == "kafka"
    assert render.parse_key("42", serdes.Long()) == 42
    assert render.parse_key("AAE=", serdes.Bytes()) == b"\x00\x01"
    assert render.parse_key('{"a": [1]}', serdes.Json()) == {"a": [1]}
    with pytest.raises(render.BadKey, match="Long"):
        render.parse_key("forty-two", serdes.Long())
    assert render.key_text(b"\x00\x01") == "AAE=" and render.key_text(7) == "7"


def test_values_render_as_json():
    @dataclasses.dataclass
    class Score:
        user: str
        value: float

    assert render.to_json(b"\xff") == {"encoding": "base64", "data": "/w=="}
    assert render.to_json(Windowed("k", Window(0, 60000))) == {"key": "k", "start": 0, "end": 60000}
    assert render.to_json(Score("u", 0.5)) == {"user": "u", "value": 0.5}
    assert render.to_json({"n": (1, 2)}) == {"n": [1, 2]}


class Reached(Exception):
    """Raised by the stub below: the route was matched and went on to ask the application."""


class _Stub:
    def __getattr__(self, name: str) -> Any:
        raise Reached(name)


def test_every_documented_path_is_routed():
    service = QueryService(_Stub(), HostInfo("127.0.0.1", 7070))  # type: ignore[arg-type]
    spec = openapi_spec()
    assert spec["openapi"] == "3.0.3"
    for path in spec["paths"]:
        concrete = path.replace("{store}", "word-counts").replace("{key}", "kafka")
        with pytest.raises(Reached):
            service.handle(concrete, {})
    with pytest.raises(HttpAnswer) as answer:
        service.handle("/v1/nothing", {})
    assert answer.value.status == 404
