"""A topic created just before the application starts: under KRaft the broker learns it from the metadata
log a moment after the controller confirmed the creation. The start-up checks look again for a short
while before calling a topic missing; a topic that is really missing is still refused."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from kappaflow.clients import admin as admin_module
from kappaflow.clients.admin import InternalTopicManager, TopicError


class _Metadata:
    """`list_topics` answers: the topic is absent from the first `absent_for` answers, then present."""

    def __init__(self, topics: dict[str, int], absent: str, absent_for: int) -> None:
        self.topics, self.absent, self.absent_for, self.calls = topics, absent, absent_for, 0

    def list_topics(self, timeout: float) -> Any:
        self.calls += 1
        listed = {
            name: SimpleNamespace(error=None, partitions=dict.fromkeys(range(count)))
            for name, count in self.topics.items()
            if name != self.absent or self.calls > self.absent_for
        }
        return SimpleNamespace(topics=listed)


def _manager(metadata: _Metadata) -> InternalTopicManager:
    manager = InternalTopicManager({"bootstrap.servers": "unused:9092"})
    manager.admin = metadata  # type: ignore[assignment]
    return manager


@pytest.fixture(autouse=True)
def _quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admin_module, "METADATA_RETRY_S", 0.01)
    monkeypatch.setattr(admin_module, "METADATA_SETTLE_S", 0.5)


def test_a_source_topic_the_broker_learns_a_moment_late_is_found() -> None:
    metadata = _Metadata({"in": 4, "out": 4}, absent="in", absent_for=3)
    assert _manager(metadata).require_topics(["in"]) == {"in": 4}
    assert metadata.calls == 4


def test_a_source_topic_that_stays_missing_is_refused_by_name_after_the_settle_time() -> None:
    metadata = _Metadata({"in": 4}, absent="in", absent_for=10**9)
    with pytest.raises(TopicError, match="source topics do not exist: in"):
        _manager(metadata).require_topics(["in"])
    assert metadata.calls > 1


def test_without_a_settle_time_one_answer_decides() -> None:
    metadata = _Metadata({"in": 4, "out": 2}, absent="out", absent_for=1)
    assert _manager(metadata).partition_counts(["in", "out"]) == {"in": 4}
    assert metadata.calls == 1


def test_the_output_check_waits_for_a_late_output_topic() -> None:
    from kappaflow.runner.topics import check_outputs

    metadata = _Metadata({"out": 2}, absent="out", absent_for=2)
    check_outputs(_manager(metadata), {"out": ["KSTREAM-SINK-0000000001"]}, "")
    assert metadata.calls == 3
