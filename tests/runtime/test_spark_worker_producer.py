"""The producer a Spark worker keeps across its reprocessing tasks (kappaflow.spark.worker_producer)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError

from kappaflow.spark import worker_producer as kept

# No broker: nothing here delivers a record; a producer only has to exist, queue and be purged.
SETTINGS = {"bootstrap.servers": "127.0.0.1:9", "client.id": "app-a-reprocess-producer", "linger.ms": 20}


@pytest.fixture(autouse=True)
def _released() -> Iterator[None]:
    kept.release()
    yield
    kept.release()


def test_tasks_with_the_same_settings_share_one_producer() -> None:
    first = kept.worker_producer(dict(SETTINGS))
    assert kept.worker_producer(dict(SETTINGS)) is first


def test_another_jobs_settings_replace_the_kept_producer() -> None:
    first = kept.worker_producer(dict(SETTINGS))
    other = kept.worker_producer({**SETTINGS, "client.id": "app-b-reprocess-producer"})
    assert other is not first
    assert kept.worker_producer({**SETTINGS, "client.id": "app-b-reprocess-producer"}) is other
    assert kept.worker_producer(dict(SETTINGS)) is not first  # the first was let go, not kept aside


def test_a_failed_tasks_producer_is_purged_and_not_reused() -> None:
    producer = kept.worker_producer(dict(SETTINGS))
    reports: list[Any] = []
    producer.produce("out", key=b"k", value=b"unsent", on_delivery=lambda err, _msg: reports.append(err))
    kept.discard(producer)
    producer.poll(0)
    # its record was purged: a later task's flush will never deliver it
    assert [err.code() for err in reports] == [KafkaError._PURGE_QUEUE]
    assert kept.worker_producer(dict(SETTINGS)) is not producer
