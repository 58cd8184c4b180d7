"""The producer a Spark worker keeps across its reprocessing tasks (kappaflow.spark.worker_producer)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

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
    producer.produce("out", key=b"k", value=b"unsent")
    assert len(producer) == 1
    kept.discard(producer)
    assert len(producer) == 0  # its record will never be delivered by a later task's flush
    assert kept.worker_producer(dict(SETTINGS)) is not producer
