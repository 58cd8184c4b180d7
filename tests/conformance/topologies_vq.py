"""The "vq_" topology family and the versioned key queries (KIP-960, KIP-968) a scenario asks after its
steps; java/VersionedQueries.java is the Java half, which runs them through the store's IQv2 `query`.
A query is [store, key, as_of|None] (VersionedKeyQuery) or [store, key, from|None, to|None,
"asc"|"desc"|"any"] (MultiVersionedKeyQuery); a version is written [value, timestamp, valid_to|None],
a missing one None. Kept apart from topologies.py so the families other work adds do not collide."""

from __future__ import annotations

from typing import Any

from kappaflow import Materialized, Stores, StreamsBuilder
from kappaflow.query import MultiVersionedKeyQuery, VersionedKeyQuery, VersionedRecord
from kappaflow.query.versioned import run_multi_versioned, run_versioned
from kappaflow.testing import TopologyTestDriver
from tests.conformance.conventions import Outputs, Params


def vq_families(b: StreamsBuilder, family: str, p: Params) -> Outputs | None:
    if family != "vq_table":
        return None
    store = Stores.persistent_versioned_key_value_store("prices", p["history"])
    b.table("in", materialized=Materialized.as_(store)).to_stream().to("out")
    return {"out": "string"}


def _version(record: VersionedRecord[Any] | None) -> list[Any] | None:
    return None if record is None else [record.value, record.timestamp, record.valid_to]


def run_queries(driver: TopologyTestDriver, queries: list[list[Any]]) -> list[Any]:
    """Each query's answer, written as the Java half writes it."""
    answers: list[Any] = []
    for query in queries:
        store = driver.get_state_store(query[0])
        if len(query) == 3:
            single: VersionedKeyQuery[str, Any] = VersionedKeyQuery.with_key(query[1])
            if query[2] is not None:
                single = single.as_of(query[2])
            answers.append(_version(run_versioned(store, single)))
            continue
        many: MultiVersionedKeyQuery[str, Any] = MultiVersionedKeyQuery.with_key(query[1])
        if query[2] is not None:
            many = many.from_time(query[2])
        if query[3] is not None:
            many = many.to_time(query[3])
        if query[4] == "asc":
            many = many.with_ascending_timestamps()
        elif query[4] == "desc":
            many = many.with_descending_timestamps()
        answers.append([_version(record) for record in run_multi_versioned(store, many)])
    return answers
